package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdClusterSpec is the desired state of an etcd cluster. Changes that etcd cannot take in
// place (removing auth, adding or removing TLS, a downgrade, a minor version skipped) are
// refused at admission, with the way to get there instead.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.auth) || has(self.auth)",message="auth cannot be removed once set: etcd keeps authentication on, and the operator needs the root password to manage the cluster; to change the password, change it in the Secret auth.rootSecretName names, or name another Secret"
// +kubebuilder:validation:XValidation:rule="has(self.tls) == has(oldSelf.tls)",message="tls cannot be added to or removed from an existing cluster: its members' URLs would change under a live quorum; restore a backup into a new EtcdCluster with the TLS settings you want"
type EtcdClusterSpec struct {
	// Size is the number of voting members. Use an odd number: 3 tolerates the loss of one
	// member, 5 of two. Changed one member at a time; a scale-down never removes a member
	// whose removal would lose quorum.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +kubebuilder:default=3
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Size",xDescriptors="urn:alm:descriptor:com.tectonic.ui:podCount"
	Size int32 `json:"size,omitempty"`

	// Version is the etcd version to run, as MAJOR.MINOR.PATCH (3.5 or newer). Raising it rolls
	// the members one at a time, the leader last, each step gated on cluster health. Once the
	// cluster runs (status.currentVersion is set), it may be any patch of the running minor
	// version or of the next one: a lower minor version, or skipping one, is refused.
	// +kubebuilder:validation:Pattern=`^3\.([5-9]|[1-9][0-9])\.(0|[1-9][0-9]*)$`
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:default="3.6.16"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="etcd Version",xDescriptors="urn:alm:descriptor:com.tectonic.ui:text"
	Version string `json:"version,omitempty"`

	// Repository overrides the etcd image repository; the image is <repository>:v<version>.
	// Empty means the images the operator was installed with (its RELATED_IMAGE_ETCD setting, and
	// RELATED_IMAGE_ETCD_V<version> for each other version it ships).
	// The image must contain the etcd, etcdctl and etcdutl binaries of that version.
	//
	// A repository pinned by digest (<repository>@sha256:<digest>, as mirrors for disconnected
	// clusters name images) is taken for the image of spec.version and run as it is; with a
	// v<version> tag before the digest, for the image of that version. Any other version a
	// member runs (the one an upgrade starts from, say) is <repository>:v<version>, by tag.
	// Changing spec.version therefore changes the digest too, in the same update.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+([._:/-][a-z0-9]+)*(@sha256:[a-f0-9]{64})?$`
	// +optional
	Repository string `json:"repository,omitempty"`

	// Storage says where each member keeps its data.
	// +kubebuilder:default={}
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage"
	Storage StorageSpec `json:"storage,omitempty"`

	// PodTemplate customises the member pods. The operator owns the etcd container's command,
	// ports, probes and volumes; everything here is layered on top.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Pod Template"
	PodTemplate PodTemplate `json:"podTemplate,omitempty"`

	// ClientService shapes the Service clients connect to, <name>-client: its type and
	// annotations. By default it is a ClusterIP Service, reachable from inside the cluster only.
	// +kubebuilder:default={}
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Client Service"
	ClientService ClientServiceSpec `json:"clientService,omitempty"`

	// TLS encrypts and authenticates peer and client traffic. Set it when the cluster is
	// created: it cannot be added or removed later.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="TLS"
	TLS *TLSSpec `json:"tls,omitempty"`

	// Auth turns on etcd's authentication with a root user, once the cluster has bootstrapped.
	// It cannot be removed once set. Without tls, the root password crosses the network in
	// clear text whenever a client authenticates (the operator warns with an AuthWithoutTLS
	// event): use it with tls.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Authentication"
	Auth *AuthSpec `json:"auth,omitempty"`

	// Tuning passes well-understood etcd settings through to every member.
	// +kubebuilder:default={}
	// +optional
	Tuning EtcdTuning `json:"tuning,omitempty"`

	// Paused stops every change the operator would make to this cluster (membership, pods,
	// upgrades, defragmentation). Status is still observed and reported.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Paused",xDescriptors="urn:alm:descriptor:com.tectonic.ui:booleanSwitch"
	Paused bool `json:"paused,omitempty"`

	// QuorumLossRecovery says what the operator may do when a majority of members is lost.
	// The default, Manual, only reports it.
	// +kubebuilder:default={}
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Quorum Loss Recovery"
	QuorumLossRecovery QuorumLossRecoverySpec `json:"quorumLossRecovery,omitempty"`

	// Defragmentation reclaims the space etcd keeps after compaction.
	// +kubebuilder:default={}
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Defragmentation"
	Defragmentation DefragmentationSpec `json:"defragmentation,omitempty"`

	// CorruptionCheck catches members whose data diverged from the others' (a flipped bit on
	// disk, a bug) before they serve it. A member found corrupt is taken out of the client
	// Service, replaced while a quorum holds (its claim kept, released from the cluster) and
	// never used as a backup's source or a quorum recovery's survivor.
	// +kubebuilder:default={}
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Corruption Check"
	CorruptionCheck CorruptionCheckSpec `json:"corruptionCheck,omitempty"`
}

// CorruptionCheckPolicy turns the corruption checks on or off.
// +kubebuilder:validation:Enum=Enabled;Disabled
type CorruptionCheckPolicy string

const (
	// CorruptionCheckEnabled: etcd's own checks run on every member (a starting member compares
	// its data with its peers' and refuses to serve on a mismatch; the leader compares the
	// members' hashes after each compaction and raises a CORRUPT alarm), and the operator
	// compares every member's keyspace hash at a common revision every interval.
	CorruptionCheckEnabled CorruptionCheckPolicy = "Enabled"
	// CorruptionCheckDisabled: members are started without etcd's checks, and the operator does
	// not compare hashes. A CORRUPT alarm raised anyway is still acted on.
	CorruptionCheckDisabled CorruptionCheckPolicy = "Disabled"
)

// CorruptionCheckSpec says how members whose data diverged are caught.
type CorruptionCheckSpec struct {
	// Policy is Enabled (default) or Disabled. Changing it restarts the members one at a time
	// with or without etcd's checks; members made by an operator version without them get them
	// at their next restart.
	// +kubebuilder:default=Enabled
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Corruption Check Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Enabled","urn:alm:descriptor:com.tectonic.ui:select:Disabled"}
	Policy CorruptionCheckPolicy `json:"policy,omitempty"`

	// Interval between the operator's comparisons of every member's keyspace hash (HashKV) at a
	// common revision. Each comparison reads every member's whole database, so it is spaced
	// hours apart by default.
	// +kubebuilder:default="4h0m0s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="corruptionCheck.interval must be at least 1m"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// StorageSpec gives each member a PersistentVolumeClaim of its own, or, by explicit opt-in, an
// emptyDir that is lost with the pod.
//
// Until the cluster has formed (status.clusterID is set) its storage can still be corrected;
// from then on, the EtcdCluster's rules refuse what a volume cannot take.
//
// +kubebuilder:validation:XValidation:rule="!has(self.ephemeral) || !self.ephemeral || !has(self.storageClassName)",message="storage.storageClassName has no meaning with storage.ephemeral: true"
type StorageSpec struct {
	// Size of each member's volume (or the emptyDir's size limit when ephemeral). Keep it
	// comfortably above tuning.quotaBackendBytes. It can grow, and not shrink, once the
	// cluster has formed.
	// +kubebuilder:default="4Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0",message="storage.size must be at least 64Mi"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Volume Size",xDescriptors="urn:alm:descriptor:com.tectonic.ui:text"
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the members' claims; empty means the cluster's default class.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage Class",xDescriptors="urn:alm:descriptor:io.kubernetes:StorageClass"
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Ephemeral keeps member data in an emptyDir instead of a PersistentVolumeClaim. Data then
	// survives a container restart but not the loss of the pod: a replaced member rejoins
	// empty and catches up from the others, and losing a majority loses the data. For tests
	// and caches only.
	// +optional
	Ephemeral bool `json:"ephemeral,omitempty"`

	// RetentionPolicy says what happens to a member's claim when the member goes away.
	// +kubebuilder:default={}
	// +optional
	RetentionPolicy PVCRetentionPolicy `json:"retentionPolicy,omitempty"`
}

// PVCRetentionPolicyType is Retain or Delete.
// +kubebuilder:validation:Enum=Retain;Delete
type PVCRetentionPolicyType string

const (
	// RetainPVC keeps the claim, and its data, after its member is gone.
	RetainPVC PVCRetentionPolicyType = "Retain"
	// DeletePVC deletes the claim once its member has been removed from etcd.
	DeletePVC PVCRetentionPolicyType = "Delete"
)

// PVCRetentionPolicy mirrors the StatefulSet setting of the same name.
type PVCRetentionPolicy struct {
	// WhenScaled applies to the claim of a member removed by a scale-down. A removed member
	// can never rejoin with its old data, so Delete is the default.
	// +kubebuilder:default=Delete
	// +optional
	WhenScaled PVCRetentionPolicyType `json:"whenScaled,omitempty"`

	// WhenDeleted applies to every claim when the EtcdCluster is deleted. Retain, the default,
	// keeps the data of a cluster deleted by mistake; the claims are then yours to delete.
	// +kubebuilder:default=Retain
	// +optional
	WhenDeleted PVCRetentionPolicyType `json:"whenDeleted,omitempty"`
}

// PodTemplate is the part of the member pods a user may shape.
type PodTemplate struct {
	// Metadata adds labels and annotations to the member pods (the annotations to the pods of
	// the cluster's Jobs too).
	// +optional
	Metadata PodMetadata `json:"metadata,omitempty"`

	// Resources of the etcd container. Each value left unset has a default: a CPU request of
	// 100m (none when a CPU limit below 100m is set) and no CPU limit, since throttling etcd
	// stalls its heartbeats and elections; a memory request of 256Mi, or the memory limit if
	// that is lower; and a memory limit of the backend quota (tuning.quotaBackendBytes) plus
	// 1Gi, or the memory request if that is higher, so that a namespace whose ResourceQuota
	// requires limits admits the members. etcd is sensitive to CPU starvation: for production,
	// set requests to what the cluster needs. A change restarts the members one at a time.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Resources",xDescriptors="urn:alm:descriptor:com.tectonic.ui:resourceRequirements"
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Affinity of the member pods. Each part set here (nodeAffinity, podAffinity,
	// podAntiAffinity) replaces that part of the default, which is: nodeAffinity requiring a
	// node whose kubernetes.io/os and kubernetes.io/arch the etcd image is built for (linux;
	// amd64, arm64), and podAntiAffinity preferring (weight 100) a node with no other member
	// of the cluster, by kubernetes.io/hostname, so that members still schedule when nodes are
	// fewer than members. To require one member per node, set podAntiAffinity with the same
	// term under requiredDuringSchedulingIgnoredDuringExecution. An image of other platforms
	// (spec.repository) needs a nodeAffinity of its own. The operator's Jobs for the cluster
	// (backups, their verification, restores, quorum-loss recovery) take the nodeAffinity set
	// here, narrowed to nodes of those platforms (they run the operator's own image, built
	// for them only): one that allows no such node leaves them Pending. They never take
	// podAffinity or podAntiAffinity. As every podTemplate change, a change here restarts the
	// members one at a time.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations of the member pods, and of the operator's Jobs for the cluster (backups, their
	// verification, restores, quorum-loss recovery), so that a node pool tainted for etcd takes
	// them too.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// NodeSelector of the member pods, and of the operator's Jobs for the cluster (backups, their
	// verification, restores, quorum-loss recovery): a restore Job is the first to use a new
	// member's claim, so the volume is made where the member can run.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// TopologySpreadConstraints of the member pods; their label selector, when left empty,
	// selects the cluster's members. When none is set, members spread over zones
	// (topology.kubernetes.io/zone, maxSkew 1, whenUnsatisfiable ScheduleAnyway): the scheduler
	// prefers the zone with the fewest members, and still schedules in a cluster of one zone.
	// Setting any replaces that default.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// PriorityClassName of the member pods, and of the Jobs that stand in for them while the
	// cluster is restored or recovers a lost quorum. Backup and verification Jobs keep the
	// default priority. A control-plane etcd deserves a high one.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// ImagePullSecrets for a private etcd image repository, given to the member pods and to
	// every Job of the operator's for the cluster: restores and verification run the etcd image.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

// ClientServiceSpec is what a user may set of the client Service. Both fields may change at any
// time: the Service is updated in place, and clients inside the cluster keep its name and
// cluster IP.
type ClientServiceSpec struct {
	// Type of the client Service: ClusterIP (the default) for clients inside the cluster;
	// NodePort or LoadBalancer to expose etcd to clients outside it, on every node's port or
	// through the cloud's load balancer. Anyone who reaches that address reaches etcd: expose
	// a cluster only with tls and auth. With tls.provider Operator the members' certificate
	// names the Service's in-cluster DNS names only; clients outside that verify the server's
	// name need tls.provider Secrets with a certificate that also names the outside address.
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +kubebuilder:default=ClusterIP
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Client Service Type",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:ClusterIP","urn:alm:descriptor:com.tectonic.ui:select:NodePort","urn:alm:descriptor:com.tectonic.ui:select:LoadBalancer"}
	Type corev1.ServiceType `json:"type,omitempty"`

	// Annotations of the client Service, such as a cloud's load balancer settings (internal
	// or external, the subnets, the source ranges). Removing one here removes it from the
	// Service; annotations that others put on the Service are left alone. Keys under
	// etcd.database.dev/ are the operator's.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('etcd.database.dev/'))",message="annotation keys with the etcd.database.dev/ prefix are reserved for the operator"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PodMetadata is the labels and annotations added to member pods.
type PodMetadata struct {
	// Labels added to every member pod. Keys under etcd.database.dev/ are the operator's.
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('etcd.database.dev/'))",message="label keys with the etcd.database.dev/ prefix are reserved for the operator"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations added to every member pod, and to the pods of the cluster's backup, restore
	// and verify Jobs (a service mesh's sidecar kept out of pods that must end, say). Labels
	// stay on members: a Service selecting them would take the Jobs' pods in.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// TLSProvider is where certificates come from.
// +kubebuilder:validation:Enum=Operator;Secrets;CertManager
type TLSProvider string

const (
	// TLSProviderOperator: the operator makes a CA per cluster and issues and renews every
	// certificate from it.
	TLSProviderOperator TLSProvider = "Operator"
	// TLSProviderSecrets: the user provides kubernetes.io/tls Secrets, each with its ca.crt.
	TLSProviderSecrets TLSProvider = "Secrets"
	// TLSProviderCertManager: cert-manager issues and renews every certificate from the
	// issuer spec.tls.certManager names; the operator trusts the CA of the first certificates
	// issued, kept in the Secret <cluster>-trust-bundle.
	TLSProviderCertManager TLSProvider = "CertManager"
)

// TLSSpec turns on TLS for peer and client traffic, with certificates from one provider.
//
// +kubebuilder:validation:XValidation:rule="self.provider == oldSelf.provider",message="tls.provider cannot be changed on an existing cluster; restore a backup into a new EtcdCluster instead"
// +kubebuilder:validation:XValidation:rule="self.provider != 'Secrets' || has(self.secrets)",message="tls.secrets is required when tls.provider is Secrets"
// +kubebuilder:validation:XValidation:rule="self.provider != 'CertManager' || has(self.certManager)",message="tls.certManager is required when tls.provider is CertManager"
// +kubebuilder:validation:XValidation:rule="self.provider == 'Secrets' || !has(self.secrets)",message="tls.secrets is only used when tls.provider is Secrets"
// +kubebuilder:validation:XValidation:rule="self.provider == 'CertManager' || !has(self.certManager)",message="tls.certManager is only used when tls.provider is CertManager"
// +kubebuilder:validation:XValidation:rule="!has(self.validity) || duration(self.validity) <= duration('87600h')",message="tls.validity must be at most 87600h (10 years): the CA lives ten times as long as the certificates it issues; choose a shorter validity"
// +kubebuilder:validation:XValidation:rule="!has(self.renewBefore) || duration(self.renewBefore) > duration('0s')",message="tls.renewBefore must be above 0, such as 720h: certificates are renewed that long before they expire"
// +kubebuilder:validation:XValidation:rule="!has(self.caRenewBefore) || duration(self.caRenewBefore) > duration('0s')",message="tls.caRenewBefore must be above 0, such as 2160h: the CA is replaced that long before it expires"
// +kubebuilder:validation:XValidation:rule="!has(self.caRenewBefore) || !has(self.validity) || duration(self.caRenewBefore).getSeconds() < duration(self.validity).getSeconds() * 10",message="tls.caRenewBefore must be shorter than the CA's life, ten times tls.validity, or the CA would be replaced again as soon as it is made"
// +kubebuilder:validation:XValidation:rule="!has(self.caRenewBefore) || self.provider == 'Operator'",message="tls.caRenewBefore is only used when tls.provider is Operator: the operator replaces only a CA it made"
// +kubebuilder:validation:XValidation:rule="!has(self.validity) || !has(self.renewBefore) || duration(self.renewBefore) < duration(self.validity)",message="tls.renewBefore must be shorter than tls.validity, or every certificate would be renewed as soon as it is issued; lower tls.renewBefore or raise tls.validity"
// +kubebuilder:validation:XValidation:rule="self.provider != 'CertManager' || !has(self.validity) || duration(self.validity) >= duration('1h')",message="tls.validity must be at least 1h with tls.provider CertManager: cert-manager refuses certificates shorter than an hour"
// +kubebuilder:validation:XValidation:rule="self.provider != 'CertManager' || !has(self.renewBefore) || duration(self.renewBefore) >= duration('5m')",message="tls.renewBefore must be at least 5m with tls.provider CertManager: cert-manager refuses to renew closer to expiry than that"
type TLSSpec struct {
	// Provider of the certificates: Operator (the default: the operator makes a CA for the
	// cluster, issues every certificate from it and renews them before they expire), Secrets
	// (kubernetes.io/tls Secrets you provide) or CertManager (cert-manager Certificates from
	// the issuer certManager.issuerRef names, which needs cert-manager installed before the
	// operator starts). The provider cannot change once set.
	// +kubebuilder:default=Operator
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="TLS Provider",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Operator","urn:alm:descriptor:com.tectonic.ui:select:Secrets","urn:alm:descriptor:com.tectonic.ui:select:CertManager"}
	Provider TLSProvider `json:"provider,omitempty"`

	// Secrets names your kubernetes.io/tls Secrets, each with its ca.crt, when provider is
	// Secrets.
	// +optional
	Secrets *TLSSecrets `json:"secrets,omitempty"`

	// CertManager names the cert-manager issuer when provider is CertManager.
	// +optional
	CertManager *CertManagerTLS `json:"certManager,omitempty"`

	// Validity of the certificates the operator issues (provider Operator), at most 87600h
	// (10 years); the CA lives ten times as long. With provider CertManager, the duration of
	// the Certificates, at least 1h (cert-manager's minimum).
	// +kubebuilder:default="8760h0m0s"
	// +optional
	Validity *metav1.Duration `json:"validity,omitempty"`

	// RenewBefore is how long before expiry an operator-issued certificate is renewed: above 0
	// and shorter than validity. With provider CertManager, the Certificates' renewBefore, at
	// least 5m (cert-manager's minimum).
	// +kubebuilder:default="720h0m0s"
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`

	// CARenewBefore is how long before its expiry the CA the operator made (provider Operator)
	// is replaced by a new one, without downtime (status.caRotation). Unset, validity plus
	// renewBefore: the CA is replaced before a certificate issued from it would be cut short by
	// its expiry. The annotation etcd.database.dev/rotate-ca replaces it at any time.
	// +optional
	CARenewBefore *metav1.Duration `json:"caRenewBefore,omitempty"`
}

// TLSSecrets are user-provided kubernetes.io/tls Secrets, each carrying ca.crt.
type TLSSecrets struct {
	// Peer is the members' certificate for peer traffic, valid for every member's peer DNS
	// name (<member>.<cluster>-peer.<namespace>.svc and the wildcard *.<cluster>-peer...).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Peer Certificate Secret",xDescriptors="urn:alm:descriptor:io.kubernetes:Secret"
	Peer string `json:"peer"`
	// Server is the members' certificate for client traffic, valid for the client Service's
	// DNS names and every member's peer DNS name. Its ca.crt holds the CA of the client
	// certificate: members accept only client certificates signed by a CA in it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Server Certificate Secret",xDescriptors="urn:alm:descriptor:io.kubernetes:Secret"
	Server string `json:"server"`
	// Client is the certificate the operator, and its backup and restore Jobs, present to etcd.
	// Its ca.crt holds the CA of the server certificate, which they verify members with.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Client Certificate Secret",xDescriptors="urn:alm:descriptor:io.kubernetes:Secret"
	Client string `json:"client"`
}

// CertManagerTLS names the cert-manager issuer of provider CertManager.
type CertManagerTLS struct {
	// IssuerRef is the Issuer (in the cluster's namespace) or ClusterIssuer that signs the
	// peer, server and client certificates. Members trust the CA of the first certificates it
	// issued, kept in the Secret <cluster>-trust-bundle, and no other: do not replace the CA of
	// this issuer in place, as members would stop trusting what it issues next (the cluster
	// reports UntrustedIssuer). Point it at another issuer instead: the cluster moves to that
	// issuer's CA without downtime (status.caRotation), members trusting both CAs before any
	// certificate of the new one is used.
	IssuerRef IssuerReference `json:"issuerRef"`
}

// IssuerReference names a cert-manager issuer.
// +kubebuilder:validation:XValidation:rule="self.group != 'cert-manager.io' || self.kind in ['Issuer', 'ClusterIssuer']",message="issuerRef.kind must be Issuer or ClusterIssuer for group cert-manager.io"
type IssuerReference struct {
	// Name of the issuer.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Kind is Issuer (default) or ClusterIssuer, or the kind of an external issuer of
	// another group.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:default=Issuer
	// +optional
	Kind string `json:"kind,omitempty"`
	// Group of the issuer resource: cert-manager.io (default), or an external issuer's.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:default="cert-manager.io"
	// +optional
	Group string `json:"group,omitempty"`
}

// AuthSpec turns on etcd authentication.
type AuthSpec struct {
	// RootSecretName is a Secret in the cluster's namespace whose `password` key is the etcd
	// root user's password. The operator creates the root user and enables auth once the
	// cluster has bootstrapped. Changing the password in the Secret (or naming another Secret)
	// changes it in etcd within about 30 s; the operator keeps the password etcd has in a
	// Secret of its own, <cluster>-root-credentials, which backup Jobs also read, with the last
	// 10 it has set: a restore of a backup taken before a rotation logs in with the password of
	// the backup's time and sets this Secret's, with nothing for you to do.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Root Password Secret",xDescriptors="urn:alm:descriptor:io.kubernetes:Secret"
	RootSecretName string `json:"rootSecretName"`
}

// EtcdTuning are etcd server settings passed through unchanged.
//
// +kubebuilder:validation:XValidation:rule="!has(self.electionTimeoutMillis) || !has(self.heartbeatIntervalMillis) || self.electionTimeoutMillis >= 5 * self.heartbeatIntervalMillis",message="tuning.electionTimeoutMillis must be at least 5 times tuning.heartbeatIntervalMillis (etcd refuses to start otherwise)"
type EtcdTuning struct {
	// QuotaBackendBytes is the size at which etcd raises its NOSPACE alarm and refuses writes
	// (etcd's --quota-backend-bytes); keep it well below storage.size, and at most 8Gi. Unset,
	// the operator uses etcd's own default of 2Gi, or 3/4 of storage.size if that is smaller,
	// so that the WAL and snapshots still fit on the volume when NOSPACE is raised.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="tuning.quotaBackendBytes must be above 0; leave it unset for min(2Gi, 3/4 of storage.size)"
	// +optional
	QuotaBackendBytes *resource.Quantity `json:"quotaBackendBytes,omitempty"`

	// AutoCompactionMode is periodic (retention is a duration) or revision (retention is a
	// count of revisions).
	// +kubebuilder:validation:Enum=periodic;revision
	// +kubebuilder:default=periodic
	// +optional
	AutoCompactionMode string `json:"autoCompactionMode,omitempty"`

	// AutoCompactionRetention is etcd's --auto-compaction-retention: a duration such as "1h"
	// for periodic mode, a number of revisions for revision mode, "0" to turn it off.
	// +kubebuilder:validation:Pattern=`^([0-9]+|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:default="1h"
	// +optional
	AutoCompactionRetention string `json:"autoCompactionRetention,omitempty"`

	// SnapshotCount is the number of committed transactions that triggers a raft snapshot to
	// disk (etcd's --snapshot-count).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=10000
	// +optional
	SnapshotCount int64 `json:"snapshotCount,omitempty"`

	// HeartbeatIntervalMillis is etcd's --heartbeat-interval.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=5000
	// +kubebuilder:default=100
	// +optional
	HeartbeatIntervalMillis int32 `json:"heartbeatIntervalMillis,omitempty"`

	// ElectionTimeoutMillis is etcd's --election-timeout.
	// +kubebuilder:validation:Minimum=50
	// +kubebuilder:validation:Maximum=50000
	// +kubebuilder:default=1000
	// +optional
	ElectionTimeoutMillis int32 `json:"electionTimeoutMillis,omitempty"`
}

// QuorumLossRecoveryPolicy is what the operator may do when quorum is lost.
// +kubebuilder:validation:Enum=Manual;ForceNewCluster;FromLatestBackup
type QuorumLossRecoveryPolicy string

const (
	// QuorumLossRecoveryManual reports lost quorum, names the survivor to recover from, and
	// changes nothing until the EtcdCluster is annotated etcd.database.dev/recover-from=<member>.
	QuorumLossRecoveryManual QuorumLossRecoveryPolicy = "Manual"
	// QuorumLossRecoveryForceNewCluster restarts the surviving member with the most recent
	// data as a one-member cluster (etcd --force-new-cluster) and grows it back. Writes that
	// only the lost members had are gone: an explicit opt-in.
	QuorumLossRecoveryForceNewCluster QuorumLossRecoveryPolicy = "ForceNewCluster"
	// QuorumLossRecoveryFromLatestBackup does what ForceNewCluster does while a member's data
	// survives, and when none does, restores the cluster in place (an EtcdRestore the operator
	// creates) from the newest completed snapshot of an EtcdBackup of this cluster. Writes
	// after that snapshot are gone.
	QuorumLossRecoveryFromLatestBackup QuorumLossRecoveryPolicy = "FromLatestBackup"
)

// QuorumLossRecoverySpec is the opt-in for automatic recovery from quorum loss.
type QuorumLossRecoverySpec struct {
	// Policy is Manual (the default: report, and recover only when annotated),
	// ForceNewCluster (recover from the surviving member with the most recent data), or
	// FromLatestBackup (as ForceNewCluster, and when no member's data survives, restore the
	// newest completed snapshot of this cluster's EtcdBackups). A copy of the survivor's data
	// is always kept first.
	// +kubebuilder:default=Manual
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Recovery Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Manual","urn:alm:descriptor:com.tectonic.ui:select:ForceNewCluster","urn:alm:descriptor:com.tectonic.ui:select:FromLatestBackup"}
	Policy QuorumLossRecoveryPolicy `json:"policy,omitempty"`

	// After is how long quorum must stay lost, counted from when the operator first found it
	// lost (status.quorumLostTime), before policy ForceNewCluster or FromLatestBackup acts, so
	// that a node reboot or a network blip is not treated as a disaster; it is also how long a
	// member's pod must have found no node before its data counts as out of reach. At least 2
	// minutes: longer than Kubernetes takes to notice a node that stopped answering and than a
	// cluster autoscaler takes to bring a node, so that a member slow to come back is never
	// forced out. The recover-from annotation, a person's decision, does not wait for it.
	// +kubebuilder:default="10m0s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('2m')",message="quorumLossRecovery.after must be at least 2m: a member slower than that to come back (a node reboot, an autoscaled node) must not be forced out of the cluster"
	// +optional
	After *metav1.Duration `json:"after,omitempty"`
}

// DefragmentationPolicy turns automatic defragmentation on or off.
// +kubebuilder:validation:Enum=Auto;Disabled
type DefragmentationPolicy string

const (
	// DefragmentationAuto defragments one member at a time, never the leader while others
	// need it first, when its fragmentation passes the threshold.
	DefragmentationAuto DefragmentationPolicy = "Auto"
	// DefragmentationDisabled never defragments.
	DefragmentationDisabled DefragmentationPolicy = "Disabled"
)

// DefragmentationSpec says when a member's database is defragmented.
type DefragmentationSpec struct {
	// Policy is Auto (default) or Disabled.
	// +kubebuilder:default=Auto
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Defragmentation Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Auto","urn:alm:descriptor:com.tectonic.ui:select:Disabled"}
	Policy DefragmentationPolicy `json:"policy,omitempty"`

	// ThresholdPercent is the share of a member's database file that must be free space
	// before it is defragmented; and at least 1Mi must be free, as a small file keeps a few
	// free pages after any defragmentation.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=50
	// +optional
	ThresholdPercent int32 `json:"thresholdPercent,omitempty"`

	// MinimumDBSize is the database file size below which defragmentation is not worth it.
	// +kubebuilder:default="100Mi"
	// +optional
	MinimumDBSize *resource.Quantity `json:"minimumDBSize,omitempty"`
}

// MemberStatus is one member as etcd and Kubernetes report it.
type MemberStatus struct {
	// Name of the member, which is also the name of its pod and its claim.
	Name string `json:"name"`
	// ID is etcd's member ID, in hexadecimal.
	// +optional
	ID string `json:"id,omitempty"`
	// PeerURL the member advertises to its peers.
	// +optional
	PeerURL string `json:"peerURL,omitempty"`
	// ClientURL the member advertises to clients.
	// +optional
	ClientURL string `json:"clientURL,omitempty"`
	// Version of etcd the member runs.
	// +optional
	Version string `json:"version,omitempty"`
	// IsLearner is true while the member is a non-voting learner catching up.
	// +optional
	IsLearner bool `json:"isLearner,omitempty"`
	// IsLeader is true for the raft leader.
	// +optional
	IsLeader bool `json:"isLeader,omitempty"`
	// Healthy is true when the member answered its status request, has a leader and reports
	// no error. Cluster-wide alarms such as NOSPACE are listed in errors and make the cluster
	// Degraded, but leave members healthy: they still serve reads.
	Healthy bool `json:"healthy"`
	// DBSizeBytes is the size of the member's database file.
	// +optional
	DBSizeBytes int64 `json:"dbSizeBytes,omitempty"`
	// DBSizeInUseBytes is the part of the database file holding live data.
	// +optional
	DBSizeInUseBytes int64 `json:"dbSizeInUseBytes,omitempty"`
	// Errors the member reported, its alarms ("alarm: NOSPACE"), or why it did not answer.
	// +optional
	Errors []string `json:"errors,omitempty"`
	// Outdated is true while the member runs an earlier spec than the current one: its pod was
	// made from an earlier podTemplate, tuning or repository, or its claim is smaller than
	// storage.size. The operator restarts such members one at a time, health-gated, leader
	// last, and expands claims (Progressing RollingOut). A new version shows in version.
	// +optional
	Outdated bool `json:"outdated,omitempty"`
}

// CertificateStatus is one certificate the cluster uses.
type CertificateStatus struct {
	// Name says which certificate: ca, peer, server or client.
	Name string `json:"name"`
	// SecretName holds it.
	SecretName string `json:"secretName"`
	// NotAfter is when it expires.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
	// RenewalTime is when the operator will renew it (operator-issued certificates only).
	// +optional
	RenewalTime *metav1.Time `json:"renewalTime,omitempty"`
}

// CARotationPhase is how far a CA rotation has gone.
// +kubebuilder:validation:Enum=Prepare;TrustBoth;Reissue;DropOld;Done
type CARotationPhase string

// CARotationStatus is a replacement of the cluster's CA (provider Operator: the CA the operator
// made; CertManager: the issuer's CA, by another issuer's), made without downtime in four
// phases, each begun only once the members show, live, that the one before is complete:
// Prepare (the new CA is made, or obtained from the new issuer), TrustBoth (every member trusts
// the old and the new CA: the trust bundle holds both, and members are restarted one at a time,
// the leader last, to load it), Reissue (every certificate is issued from the new CA; members
// load certificates without a restart), DropOld (the bundle holds the new CA alone, and members
// are restarted one at a time again), then Done.
type CARotationStatus struct {
	// Phase reached.
	Phase CARotationPhase `json:"phase"`
	// OldCA is the SHA-256 fingerprint of the CA being replaced.
	// +kubebuilder:validation:MaxLength=64
	OldCA string `json:"oldCA"`
	// NewCA is the SHA-256 fingerprint of the CA replacing it, once made.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	NewCA string `json:"newCA,omitempty"`
	// Trigger is what started it: Requested (the annotation etcd.database.dev/rotate-ca),
	// CAExpiring (tls.caRenewBefore) or IssuerChanged (tls.certManager.issuerRef).
	// +kubebuilder:validation:MaxLength=253
	Trigger string `json:"trigger"`
	// FromIssuer and ToIssuer (provider CertManager) are the issuer the certificates came from
	// before the rotation, kept on the Certificates until Reissue, and the one whose CA is NewCA,
	// used from Reissue on.
	// +optional
	FromIssuer *IssuerReference `json:"fromIssuer,omitempty"`
	// +optional
	ToIssuer *IssuerReference `json:"toIssuer,omitempty"`
	// Annotation is the value etcd.database.dev/rotate-ca had when it began: another value asks
	// for another rotation.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Annotation string `json:"annotation,omitempty"`
	// Message says what the rotation does or waits for now.
	// +optional
	Message string `json:"message,omitempty"`
	// StartTime is when it began.
	StartTime metav1.Time `json:"startTime"`
	// CompletionTime is when it reached Done.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// OperationStatus is the change under way: what the operator is doing, to which members, and
// since when. It describes the current step only: a spec edit made mid-way changes the next
// step, and never leaves one half done.
type OperationStatus struct {
	// Type is the operation, as the Progressing condition's reason names it: Bootstrapping,
	// ScalingUp, ScalingDown, ReplacingMember, PromotingLearner, Upgrading, RollingOut,
	// RecoveringMembers, Restoring, EnablingAuth, ChangingRootPassword, Defragmenting, RotatingCA.
	Type string `json:"type"`
	// Action is the step under way, such as AddLearner, PromoteLearner or RemoveMember.
	// +optional
	Action string `json:"action,omitempty"`
	// Members the step acts on, if any.
	// +optional
	Members []string `json:"members,omitempty"`
	// StartTime is when the operation of this type began; it stays while the type does.
	StartTime metav1.Time `json:"startTime"`
}

// QuorumRecoveryStatus records a recovery from a quorum lost for good.
type QuorumRecoveryStatus struct {
	// Member is the surviving member the cluster is recovered from: the one whose log reached
	// furthest, or the one the user named. Empty when no member's data survived and the
	// cluster is restored from a backup instead.
	// +optional
	Member string `json:"member,omitempty"`
	// Backup is the snapshot the cluster is restored from when no member's data survived
	// (policy FromLatestBackup).
	// +optional
	Backup *RecoveryBackupStatus `json:"backup,omitempty"`
	// LostMembers are the voting members the recovery does without: every other member of the
	// last membership (its data gone or out of reach, declared lost, or a survivor not chosen),
	// and those an earlier recovery this one followed did without. Their pods are stopped
	// before the survivor is forced and never made again on their data, and their claims, if
	// any, are kept.
	// +optional
	LostMembers []string `json:"lostMembers,omitempty"`
	// RaftIndex is how far the member's log reached when the recovery began, as it reported it
	// or as its data said; 0 when not known (a member named by the user that did not answer).
	// A member done without that answers with a log further than this before the force gives
	// the recovery up; a new one may then begin, from the member whose log reaches furthest.
	// +optional
	RaftIndex int64 `json:"raftIndex,omitempty"`
	// Trigger is what allowed the recovery: the policy (ForceNewCluster or FromLatestBackup),
	// or the user's recover-from annotation.
	Trigger string `json:"trigger"`
	// FromIssuer and ToIssuer (provider CertManager) are the issuer the certificates came from
	// before the rotation, kept on the Certificates until Reissue, and the one whose CA is NewCA,
	// used from Reissue on.
	// +optional
	FromIssuer *IssuerReference `json:"fromIssuer,omitempty"`
	// +optional
	ToIssuer *IssuerReference `json:"toIssuer,omitempty"`
	// Annotation is the value etcd.database.dev/rotate-ca had when it began: another value asks
	// for another rotation.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Annotation string `json:"annotation,omitempty"`
	// StartTime is when the recovery began.
	StartTime metav1.Time `json:"startTime"`
	// PreservedData is the copy of the member's data directory kept before it was rewritten.
	// +optional
	PreservedData *PreservedDataStatus `json:"preservedData,omitempty"`
	// ForcedTime is when the member was restarted alone with --force-new-cluster.
	// +optional
	ForcedTime *metav1.Time `json:"forcedTime,omitempty"`
	// ServedTime is when the forced member first served as a cluster of one: from then on the
	// other members are added back as in a scale-up.
	// +optional
	ServedTime *metav1.Time `json:"servedTime,omitempty"`
	// CompletionTime is when the cluster was available again at its spec size, or when the
	// recovery was abandoned.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Abandoned says why the recovery ended without being carried through, if it did: the data
	// of the member it built on was deleted or out of reach, a member done without answered
	// with a further log, its forced pod never ran, its member was declared lost (a new
	// recovery may then begin), or the cluster served again without it (restored in place).
	// +optional
	Abandoned string `json:"abandoned,omitempty"`
}

// RecoveryBackupStatus is the backup a lost quorum is recovered from, and the restore that
// carries it out.
type RecoveryBackupStatus struct {
	// EtcdBackup whose snapshot is restored.
	EtcdBackup string `json:"etcdBackup"`
	// SnapshotURI of the snapshot restored: the newest completed one of the cluster's backups,
	// or, should it no longer exist when the restore fetched it, the newest older snapshot of
	// the same EtcdBackup that did (the EtcdRestore's status.missingSnapshotURI names the
	// missing one; event SnapshotFallback).
	SnapshotURI string `json:"snapshotURI"`
	// Revision of the snapshot: the data the recovered cluster starts from.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// EtcdRestore is the in-place restore the operator creates for the recovery.
	EtcdRestore string `json:"etcdRestore"`
}

// PreservedDataStatus says where a copy of a member's data directory is kept.
type PreservedDataStatus struct {
	// ClaimName is the PersistentVolumeClaim holding the copy.
	ClaimName string `json:"claimName"`
	// Path is the copy's directory inside the claim.
	Path string `json:"path"`
	// SizeBytes copied.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// DBSHA256 is the sha256 of the copied database file (member/snap/db).
	// +optional
	DBSHA256 string `json:"dbSHA256,omitempty"`
	// RaftIndex is the raft index the copied database had applied.
	// +optional
	RaftIndex int64 `json:"raftIndex,omitempty"`
	// Revision is the highest key revision in the copied database: the data the recovered
	// cluster starts from.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Time the copy completed.
	Time metav1.Time `json:"time"`
}

// CorruptMember is a member found with data that diverged from the others'.
type CorruptMember struct {
	// Name of the member.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// ID is etcd's member ID, in hexadecimal.
	// +kubebuilder:validation:MaxLength=16
	// +optional
	ID string `json:"id,omitempty"`
	// Evidence says how the divergence was found: etcd's CORRUPT alarm, the member's own
	// check refusing to start, or the operator's hash comparison (with the hashes).
	// +kubebuilder:validation:MaxLength=1024
	Evidence string `json:"evidence"`
	// DetectedTime is when the operator first found it.
	DetectedTime metav1.Time `json:"detectedTime"`
	// Claim is the member's claim, kept with its data once the member is removed: released
	// from the cluster (deleting the cluster leaves it), for the user to examine and delete.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Claim string `json:"claim,omitempty"`
}

// ConsistencyCheck is one comparison of the members' keyspace hashes at a revision.
type ConsistencyCheck struct {
	// Time the comparison was made.
	Time metav1.Time `json:"time"`
	// Revision the members' keyspaces were hashed at.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Result: Consistent, Diverged (Diverged names the minority) or Inconclusive (Message says
	// why: a member did not answer, the revision was compacted, no majority agreed).
	// +kubebuilder:validation:Enum=Consistent;Diverged;Inconclusive
	Result string `json:"result"`
	// Diverged are the members whose hash differed from the majority's.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Diverged []string `json:"diverged,omitempty"`
	// Message gives the hashes, or why the comparison was inconclusive.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// Results of a consistency check.
const (
	ConsistencyConsistent   = "Consistent"
	ConsistencyDiverged     = "Diverged"
	ConsistencyInconclusive = "Inconclusive"
)

// EtcdClusterStatus is what the operator last observed. Every field is observed, never
// assumed.
type EtcdClusterStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Size is the number of members in etcd's member list, learners included.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Members"
	Size int32 `json:"size,omitempty"`

	// ReadyMembers is the number of voting members that are healthy.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Ready Members"
	ReadyMembers int32 `json:"readyMembers,omitempty"`

	// Selector is the label selector of the member pods, for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// CurrentVersion is the lowest etcd version any member runs.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Current Version"
	CurrentVersion string `json:"currentVersion,omitempty"`

	// Leader is the name of the member that leads raft.
	// +optional
	Leader string `json:"leader,omitempty"`

	// ClusterID is etcd's cluster ID, in hexadecimal.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`

	// HighestRevision is the highest revision of the keyspace any member reported to the
	// operator, ever: the high-water mark of what a client may have read or watched. It never
	// goes down, not even when a restore takes the data back to an older revision; a restore
	// starts past it (EtcdRestore spec.revisionBump).
	// +optional
	HighestRevision int64 `json:"highestRevision,omitempty"`

	// Members as etcd reports them.
	// +optional
	// +listType=map
	// +listMapKey=name
	Members []MemberStatus `json:"members,omitempty"`

	// ClientService is the Service clients connect to.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Client Service",xDescriptors="urn:alm:descriptor:io.kubernetes:Service"
	ClientService string `json:"clientService,omitempty"`

	// ClientEndpoint is the URL clients use, through the client Service.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Client Endpoint",xDescriptors="urn:alm:descriptor:com.tectonic.ui:text"
	ClientEndpoint string `json:"clientEndpoint,omitempty"`

	// Certificates in use, with their expiry.
	// +optional
	Certificates []CertificateStatus `json:"certificates,omitempty"`

	// CARotation is the last replacement of the cluster's CA (provider Operator): under way, or
	// its record once Done.
	// +optional
	CARotation *CARotationStatus `json:"caRotation,omitempty"`

	// CorruptMembers are the members found with data that diverged from the others', each with
	// the evidence, until it is replaced and etcd's CORRUPT alarm for it is cleared.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	CorruptMembers []CorruptMember `json:"corruptMembers,omitempty"`

	// LastConsistencyCheck is the operator's latest comparison of the members' keyspace hashes
	// (spec.corruptionCheck).
	// +optional
	LastConsistencyCheck *ConsistencyCheck `json:"lastConsistencyCheck,omitempty"`

	// QuorumLostTime is when the operator first found this formed cluster without a quorum
	// serving (etcd answered no member list), since one last served; unset while a quorum
	// serves. The wait of spec.quorumLossRecovery.after counts from it, and the recover-from
	// and lost-members annotations given before it are ignored.
	// +optional
	QuorumLostTime *metav1.Time `json:"quorumLostTime,omitempty"`

	// QuorumRecovery is the last recovery from a quorum lost for good: the member it was made
	// from, where a copy of that member's data was kept before anything was rewritten, and how
	// far it went. It stays after the recovery completes, as its record.
	// +optional
	QuorumRecovery *QuorumRecoveryStatus `json:"quorumRecovery,omitempty"`

	// Operation is the change under way, if any: its type, the current step, the members it
	// acts on and since when. Unset while no change is under way.
	// +optional
	Operation *OperationStatus `json:"operation,omitempty"`

	// Conditions: Available (quorum and a serving client endpoint), Progressing (a change is
	// under way), Degraded (something needs attention).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors="urn:alm:descriptor:io.kubernetes.conditions"
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdCluster is an etcd cluster run by the operator: one pod and one volume per member,
// membership changed one safe step at a time.
//
// The name is a DNS label of at most 50 characters: member pods, named <cluster>-<5
// characters>, and Services are named after it.
//
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="an EtcdCluster name must be a DNS label of at most 50 characters (lower-case letters, digits, '-'; starting with a letter) because member pods and Services are named after it"
//
// A new spec.version is checked against status.currentVersion, the lowest version a member
// runs, not against the previous spec.version: an upgrade that has not started can be taken
// back, and two quick edits cannot skip a minor version. Only an update that changes
// spec.version is checked, so that edits of other fields are never refused for the version.
//
// +kubebuilder:validation:XValidation:rule="!has(self.spec.version) || (has(oldSelf.spec.version) && self.spec.version == oldSelf.spec.version) || !has(self.status) || !has(self.status.currentVersion) || !self.status.currentVersion.matches('^[0-9]{1,4}[.][0-9]{1,4}[.]') || int(self.spec.version.split('.')[0]) * 1000 + int(self.spec.version.split('.')[1]) >= int(self.status.currentVersion.split('.')[0]) * 1000 + int(self.status.currentVersion.split('.')[1])",fieldPath=".spec.version",message="version cannot be downgraded below the running version (status.currentVersion): etcd does not roll its data back to an older format; restore a backup into a new EtcdCluster of the older version instead",messageExpression="'version cannot be downgraded below the running version ' + self.status.currentVersion + ' (status.currentVersion): etcd does not roll its data back to an older format; choose a version of the running minor version or the next one, or restore a backup into a new EtcdCluster of the older version instead'"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.version) || (has(oldSelf.spec.version) && self.spec.version == oldSelf.spec.version) || !has(self.status) || !has(self.status.currentVersion) || !self.status.currentVersion.matches('^[0-9]{1,4}[.][0-9]{1,4}[.]') || int(self.spec.version.split('.')[0]) * 1000 + int(self.spec.version.split('.')[1]) <= int(self.status.currentVersion.split('.')[0]) * 1000 + int(self.status.currentVersion.split('.')[1]) + 1",fieldPath=".spec.version",message="version can be at most one minor version above the running version (status.currentVersion): upgrade one minor version at a time, and wait for status.currentVersion to reach it before the next",messageExpression="'version can be at most one minor version above the running version ' + self.status.currentVersion + ' (status.currentVersion): upgrade one minor version at a time, and wait for status.currentVersion to reach it before the next'"
//
// An image pinned by digest is the image of one version: a new version needs a new image.
//
// +kubebuilder:validation:XValidation:rule="!has(self.spec.repository) || !self.spec.repository.contains('@') || !has(oldSelf.spec.repository) || self.spec.repository != oldSelf.spec.repository || !has(self.spec.version) || !has(oldSelf.spec.version) || self.spec.version == oldSelf.spec.version",fieldPath=".spec.repository",message="spec.repository is pinned by digest, the image of one etcd version: change it to the digest of the new version's image in the same update as spec.version, or name the repository without a digest"
//
// Storage can be corrected until the cluster has formed (status.clusterID is set): before that
// no member holds data. From then on a volume cannot change class or kind, nor shrink.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.clusterID) || size(oldSelf.status.clusterID) == 0 || (has(self.spec.storage.ephemeral) && self.spec.storage.ephemeral) == (has(oldSelf.spec.storage.ephemeral) && oldSelf.spec.storage.ephemeral)",fieldPath=".spec.storage.ephemeral",message="storage.ephemeral cannot be changed on an existing cluster; restore a backup into a new EtcdCluster instead"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.clusterID) || size(oldSelf.status.clusterID) == 0 || (has(self.spec.storage.storageClassName) == has(oldSelf.spec.storage.storageClassName) && (!has(self.spec.storage.storageClassName) || self.spec.storage.storageClassName == oldSelf.spec.storage.storageClassName))",fieldPath=".spec.storage.storageClassName",message="storage.storageClassName cannot be changed on an existing cluster; restore a backup into a new EtcdCluster with the class you want"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.clusterID) || size(oldSelf.status.clusterID) == 0 || !has(self.spec.storage.size) || !has(oldSelf.spec.storage.size) || quantity(string(self.spec.storage.size)).compareTo(quantity(string(oldSelf.spec.storage.size))) >= 0",fieldPath=".spec.storage.size",message="storage.size cannot shrink: a volume cannot give space back"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.size,statuspath=.status.size,selectorpath=.status.selector
// +kubebuilder:resource:shortName=etcdc,categories=etcd-operator
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyMembers`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.currentVersion`
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.leader`,priority=1
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.status.operation.type`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="etcd Cluster",resources={{Pod,v1},{PersistentVolumeClaim,v1},{Service,v1},{Secret,v1},{PodDisruptionBudget,v1}}
type EtcdCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	// +optional
	Spec   EtcdClusterSpec   `json:"spec,omitempty"`
	Status EtcdClusterStatus `json:"status,omitempty"`
}

// EtcdClusterList is a list of EtcdCluster.
//
// +kubebuilder:object:root=true
type EtcdClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EtcdCluster{}, &EtcdClusterList{})
}
