package v1alpha1

import "k8s.io/apimachinery/pkg/api/resource"

// StorageLocation is where snapshots are written to or read from: an S3-compatible bucket or a
// PersistentVolumeClaim. Exactly one is set.
//
// +kubebuilder:validation:XValidation:rule="[has(self.s3), has(self.pvc)].exists_one(x, x)",message="set exactly one of s3 or pvc"
type StorageLocation struct {
	// S3 is an S3-compatible object store (AWS S3, MinIO, Ceph RGW, ...).
	// +optional
	S3 *S3Location `json:"s3,omitempty"`

	// PVC is a PersistentVolumeClaim in the same namespace, mounted by the Jobs that
	// write and read the snapshots.
	// +optional
	PVC *PVCLocation `json:"pvc,omitempty"`
}

// S3Location is a bucket and a key prefix in an S3-compatible object store.
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) || !self.endpoint.startsWith('http://') || (has(self.allowPlainHTTP) && self.allowPlainHTTP)",fieldPath=".endpoint",message="an http:// endpoint sends the credentials and the snapshot, which holds the whole keyspace, unencrypted: use https://, or set allowPlainHTTP: true to accept that on a network you trust"
type S3Location struct {
	// Bucket name.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	Bucket string `json:"bucket"`

	// Prefix of the object keys, such as "prod/etcd/". Snapshots are named
	// <prefix><namespace>/<cluster>/<backup>_<backup UID>/<UTC time>-r<revision>.db, so that
	// each EtcdBackup's sort by time and are its own, whoever else shares the prefix.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/')",message="s3.prefix must not start with /"
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// Endpoint of an S3-compatible server, such as https://minio.storage.svc:9000. Empty
	// means AWS S3. An http:// endpoint is refused unless allowPlainHTTP is true.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://[^\s/]+(/.*)?$`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// AllowPlainHTTP accepts an http:// endpoint. Over plain HTTP the credentials and every
	// snapshot (the whole keyspace) cross the network unencrypted, so it is off by default;
	// set it only for a server on a network you trust, such as a test server in the cluster.
	// +optional
	AllowPlainHTTP bool `json:"allowPlainHTTP,omitempty"`

	// Region of the bucket.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:default="us-east-1"
	// +optional
	Region string `json:"region,omitempty"`

	// ForcePathStyle addresses the bucket as <endpoint>/<bucket> rather than as a host name,
	// which most self-hosted servers need.
	// +optional
	ForcePathStyle bool `json:"forcePathStyle,omitempty"`

	// CredentialsSecretName is a Secret in the same namespace with the keys
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and optionally AWS_SESSION_TOKEN). Leave
	// it out to use the pod's own AWS identity instead: with serviceAccountName bound to an
	// IAM role (EKS IAM roles for service accounts, OpenShift with STS), the role's web
	// identity token; otherwise whatever the AWS SDK's default chain finds, such as the
	// node's instance role.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Credentials Secret",xDescriptors="urn:alm:descriptor:io.kubernetes:Secret"
	CredentialsSecretName string `json:"credentialsSecretName,omitempty"`

	// ServiceAccountName is the ServiceAccount, in the same namespace, that the backup and
	// restore Jobs reading and writing this bucket run as: the one bound to the IAM role with
	// access to it. Empty means the namespace's default ServiceAccount. The Jobs never mount
	// its Kubernetes API token; the role's token is mounted by the platform's identity webhook.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// CASecretName is a Secret with a ca.crt key to trust for a server with a private CA.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="CA Secret",xDescriptors="urn:alm:descriptor:io.kubernetes:Secret"
	CASecretName string `json:"caSecretName,omitempty"`
}

// PVCLocation is a directory on a PersistentVolumeClaim.
type PVCLocation struct {
	// ClaimName of a PersistentVolumeClaim in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`

	// SubPath is the directory inside the volume, relative and without "..". Snapshots are
	// files <namespace>/<cluster>/<backup>_<backup UID>/<UTC time>-r<revision>.db under it.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="pvc.subPath must be a relative path without '..'"
	// +optional
	SubPath string `json:"subPath,omitempty"`

	// Provision has the operator create the claim when it does not exist, before the
	// backup's first run: ReadWriteOnce, of this size and StorageClass, labelled
	// app.kubernetes.io/managed-by: etcd-operator. The claim belongs to no object: it and its
	// snapshots stay when the EtcdBackup is deleted, for restores and for later backups to
	// the same claim; delete it yourself once its snapshots are no longer needed. A claim
	// that exists is used as it is, never resized or otherwise changed. Without provision,
	// the claim must exist before the backup runs: the backup waits, Ready=False with reason
	// ClaimNotFound. Only a backup's destination can provision; a restore reads a claim that
	// exists.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Provision Claim"
	Provision *ClaimProvision `json:"provision,omitempty"`
}

// ClaimProvision is the claim the operator creates for a backup destination.
type ClaimProvision struct {
	// Size of the claim's volume, such as 1Gi: room for the snapshots retention keeps, each
	// about the size of the cluster's database.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0",message="pvc.provision.size must be at least 64Mi"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Size",xDescriptors="urn:alm:descriptor:com.tectonic.ui:text"
	Size resource.Quantity `json:"size"`

	// StorageClassName of the claim; empty means the cluster's default class.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage Class",xDescriptors="urn:alm:descriptor:io.kubernetes:StorageClass"
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// SnapshotEncryption is where the keys that encrypt and decrypt snapshots are. Exactly one
// source of keys is set; today, a Secret.
//
// +kubebuilder:validation:XValidation:rule="[has(self.secretName)].exists_one(x, x)",message="encryption needs secretName, the Secret holding the age keys"
type SnapshotEncryption struct {
	// SecretName is a Secret in the same namespace holding age X25519 identities, one per
	// entry, each as `age-keygen` writes it (a line AGE-SECRET-KEY-1...), such as
	// `kubectl create secret generic backup-keys --from-file=2026-11-27=key.txt`. The entry
	// whose name sorts last (byte order: use dates such as 2026-11-27) is the newest key: it
	// encrypts new snapshots. Every entry decrypts: keep a retired key in the Secret for as
	// long as snapshots encrypted to it are kept. A key is known by its id, the first 16
	// hexadecimal digits of the sha256 of its public key (`age-keygen -y key.txt | tr -d '\n'
	// | sha256sum | cut -c1-16`), recorded with every snapshot encrypted to it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Keys Secret",xDescriptors="urn:alm:descriptor:io.kubernetes:Secret"
	SecretName string `json:"secretName,omitempty"`
}
