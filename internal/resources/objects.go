package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

const (
	dataVolume = "data"
	// The restore Jobs prepare data where the member pods look for it.
	dataMount = jobspec.MemberDataMount
	// dataDir is a subdirectory so that a filesystem's lost+found at the volume root does not
	// make etcd think the directory holds foreign data.
	dataDir = jobspec.MemberDataDir

	etcdUID = 65532
)

// Image is the etcd image of version for the cluster: from spec.repository, or else from the
// image the operator was installed with (ClusterImages).
func Image(c *etcdv1alpha1.EtcdCluster, defaults EtcdImages, version string) string {
	return ClusterImages(c, defaults).Image(version)
}

// VersionOfImage is the etcd version an image built by Image runs, or "" for other images.
func VersionOfImage(image string) string {
	i := strings.LastIndex(image, ":v")
	if i < 0 || strings.Contains(image[i:], "/") {
		return ""
	}
	return image[i+2:]
}

// MemberPodSpecHash identifies the parts of the spec a member pod is made from, but for the
// version (upgrades roll that on their own, in place): the pod template, tuning and image
// repository. A pod whose recorded hash differs runs an outdated spec.
func MemberPodSpecHash(c *etcdv1alpha1.EtcdCluster) string {
	raw, err := json.Marshal(struct {
		PodTemplate etcdv1alpha1.PodTemplate
		Tuning      etcdv1alpha1.EtcdTuning
		Repository  string
		Ephemeral   bool
		// An emptyDir's size limit is part of the pod; a claim's size is expanded in place.
		EphemeralSize *resource.Quantity
		// Only when off: pods made before the checks existed, and so without them, are not
		// all restarted by an operator upgrade; they get the checks at their next restart.
		CorruptionChecksOff bool `json:",omitempty"`
	}{c.Spec.PodTemplate, c.Spec.Tuning, c.Spec.Repository, c.Spec.Storage.Ephemeral, ephemeralSize(c),
		c.Spec.CorruptionCheck.Policy == etcdv1alpha1.CorruptionCheckDisabled})
	if err != nil {
		panic(fmt.Sprintf("marshal the pod spec: %v", err)) // plain structs always marshal
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

func ephemeralSize(c *etcdv1alpha1.EtcdCluster) *resource.Quantity {
	if c.Spec.Storage.Ephemeral {
		return c.Spec.Storage.Size
	}
	return nil
}

// MemberStorageSize is the size each member's claim asks for.
func MemberStorageSize(c *etcdv1alpha1.EtcdCluster) resource.Quantity {
	if c.Spec.Storage.Size != nil {
		return *c.Spec.Storage.Size
	}
	return resource.MustParse("4Gi")
}

// MemberSpec is what distinguishes one member's pod from another's.
type MemberSpec struct {
	Name string
	// Version of etcd the pod runs.
	Version string
	// InitialCluster and State are the bootstrap flags; etcd reads them only when the data
	// directory is empty, i.e. on the member's first start.
	InitialCluster string
	State          string // "new" or "existing"
	// ForceNewCluster restarts the member with --force-new-cluster: a cluster of one from its
	// own data, to recover a quorum lost for good. The pod says so (AnnotationForceNewCluster)
	// and is replaced by a normal one as soon as it serves: restarted with the flag again, it
	// would drop every member added since.
	ForceNewCluster bool
	// Voter: the member votes (etcd lists it as a voter, or it is one of the members a cluster
	// forms with), so its pod is made with LabelVoter and the PodDisruptionBudget counts it from
	// the start.
	Voter bool
	// Restore, on a member a restore prepares in its own pod, is what the pod restores before
	// etcd starts (AnnotationMemberRestore).
	Restore *MemberRestore
	// TrustedCAHash is TrustedCAHash of the user's TLS Secrets (tls.provider Secrets) when the
	// pod is made; "" otherwise.
	TrustedCAHash string
}

// MemberPod is the pod of one member. Its etcd carries none of the proxy variables the
// operator's Jobs get: etcd's peer transport takes a proxy from its environment, and members
// need nothing outside the cluster. Only the fetch of a member restored in its pod does.
func MemberPod(c *etcdv1alpha1.EtcdCluster, m MemberSpec, images EtcdImages, pods PodSettings) *corev1.Pod {
	tmpl := c.Spec.PodTemplate
	labels := maps.Clone(tmpl.Metadata.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, MemberLabels(c, m.Name))
	labels[LabelServesClients] = "true"
	delete(labels, LabelVoter)
	if m.Voter {
		labels[LabelVoter] = "true"
	}
	delete(labels, LabelRestore)
	if m.Restore != nil {
		// The restore follows its members' pods as it follows its Jobs'.
		labels[LabelRestore] = m.Restore.Restore
	}

	annotations := maps.Clone(tmpl.Metadata.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationInitialCluster] = m.InitialCluster
	annotations[AnnotationClusterState] = m.State
	annotations[AnnotationPodSpecHash] = MemberPodSpecHash(c)
	annotations[AnnotationEtcdVersion] = m.Version
	delete(annotations, AnnotationTrustedCAHash)
	if m.TrustedCAHash != "" {
		annotations[AnnotationTrustedCAHash] = m.TrustedCAHash
	}
	if m.ForceNewCluster {
		annotations[AnnotationForceNewCluster] = "true"
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        m.Name,
			Namespace:   c.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			Hostname:  m.Name,
			Subdomain: PeerServiceName(c.Name),
			// etcd talks to no Kubernetes API.
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			RestartPolicy:                corev1.RestartPolicyAlways,
			// Enough for etcd to finish in-flight requests and hand off leadership.
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			SecurityContext:               restrictedPod(etcdUID, pods),
			Affinity:                      memberAffinity(c),
			TopologySpreadConstraints:     memberTopologySpread(c),
			PriorityClassName:             tmpl.PriorityClassName,
			Containers:                    []corev1.Container{etcdContainer(c, m, images)},
			Volumes:                       []corev1.Volume{dataVolumeSource(c, m.Name)},
		},
	}
	applyClusterPodTemplate(&pod.Spec, c)
	// Certificates are read from files that the kubelet refreshes when their Secrets
	// change; etcd loads them per handshake, so renewal needs no restart.
	volumes, mounts := tlsVolumes(c)
	pod.Spec.Volumes = append(pod.Spec.Volumes, volumes...)
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, mounts...)
	if m.Restore != nil {
		addMemberRestore(pod, c, m, images)
	}
	return pod
}

func etcdContainer(c *etcdv1alpha1.EtcdCluster, m MemberSpec, images EtcdImages) corev1.Container {
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromInt32(MetricsPort), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    period,
			TimeoutSeconds:   5,
			FailureThreshold: failures,
		}
	}
	return corev1.Container{
		Name:            "etcd",
		Image:           Image(c, images, m.Version),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/usr/local/bin/etcd"},
		Args:            etcdArgs(c, m),
		// The end of its log when etcd exits with an error: a member whose initial corruption
		// check failed says so there ("found data inconsistency with peers"), which is how the
		// operator learns it (no alarm is raised for a member that never started).
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Ports: []corev1.ContainerPort{
			{Name: "client", ContainerPort: ClientPort, Protocol: corev1.ProtocolTCP},
			{Name: "peer", ContainerPort: PeerPort, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
		},
		Resources: memberResources(c),
		// etcd's own health endpoints, on the plain-HTTP metrics listener so that probes need
		// no client certificate. A learner is not ready (it cannot serve linearizable reads),
		// so the client Service only sends clients to voting members.
		// Readiness is probed every second: the kubelet only starts it once the startup probe
		// has passed, and a member back from a restart should take traffic at once.
		StartupProbe:    probe("/livez", 1, 300),
		LivenessProbe:   probe("/livez", 10, 6),
		ReadinessProbe:  probe("/readyz", 1, 3),
		VolumeMounts:    []corev1.VolumeMount{{Name: dataVolume, MountPath: dataMount}},
		SecurityContext: restrictedContainer(),
	}
}

// Default member resources: a floor that keeps members out of the BestEffort class, the first
// evicted under node pressure. No CPU limit: throttling etcd stalls heartbeats and elections.
var (
	defaultMemberCPURequest    = resource.MustParse("100m")
	defaultMemberMemoryRequest = resource.MustParse("256Mi")
	// memoryLimitOverQuota is the room above the backend quota for etcd's index, raft log and
	// request buffers: the quota bounds the database, which etcd maps into memory.
	memoryLimitOverQuota = resource.MustParse("1Gi")
)

// memberResources are spec.podTemplate.resources with the defaults filled in where they are
// unset: requests so that members are never BestEffort, and a memory limit of the backend
// quota plus room (never below the memory request), so that namespaces whose ResourceQuota
// demands limits admit the members.
func memberResources(c *etcdv1alpha1.EtcdCluster) corev1.ResourceRequirements {
	r := *c.Spec.PodTemplate.Resources.DeepCopy()
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	if _, ok := r.Requests[corev1.ResourceCPU]; !ok {
		if limit, limited := r.Limits[corev1.ResourceCPU]; !limited || limit.Cmp(defaultMemberCPURequest) >= 0 {
			r.Requests[corev1.ResourceCPU] = defaultMemberCPURequest
		}
	}
	if _, ok := r.Limits[corev1.ResourceMemory]; !ok {
		limit := *resource.NewQuantity(QuotaBackendBytes(c), resource.BinarySI)
		limit.Add(memoryLimitOverQuota)
		if request, ok := r.Requests[corev1.ResourceMemory]; ok && request.Cmp(limit) > 0 {
			limit = request
		}
		r.Limits[corev1.ResourceMemory] = limit
	}
	if _, ok := r.Requests[corev1.ResourceMemory]; !ok {
		request := defaultMemberMemoryRequest
		if limit := r.Limits[corev1.ResourceMemory]; limit.Cmp(request) < 0 {
			request = limit
		}
		r.Requests[corev1.ResourceMemory] = request
	}
	return r
}

// restrictedContainer meets the restricted Pod Security profile, with a read-only root.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// PodSettings are what the operator's install and platform give every pod it creates.
type PodSettings struct {
	// Env is added to the agent Jobs' containers (OLM's proxy settings), never to members.
	Env []corev1.EnvVar
	// PlatformAssignsIDs leaves the pods' user, group and filesystem group unset, for the
	// platform's admission to assign from the namespace's range (platform.Platform.AssignsPodIDs):
	// OpenShift refuses a pod that brings IDs of its own outside that range.
	PlatformAssignsIDs bool
}

// restrictedPod meets the restricted Pod Security profile as uid, with volumes it can write;
// on a platform that assigns IDs, as the user and filesystem group it assigns.
func restrictedPod(uid int64, pods PodSettings) *corev1.PodSecurityContext {
	sc := &corev1.PodSecurityContext{
		RunAsNonRoot:        ptr.To(true),
		RunAsUser:           ptr.To(uid),
		RunAsGroup:          ptr.To(uid),
		FSGroup:             ptr.To(uid),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if pods.PlatformAssignsIDs {
		sc.RunAsUser, sc.RunAsGroup, sc.FSGroup = nil, nil, nil
	}
	return sc
}

func etcdArgs(c *etcdv1alpha1.EtcdCluster, m MemberSpec) []string {
	t := c.Spec.Tuning
	args := []string{
		"--name=" + m.Name,
		"--data-dir=" + dataDir,
		fmt.Sprintf("--listen-peer-urls=%s://0.0.0.0:%d", scheme(c), PeerPort),
		fmt.Sprintf("--listen-client-urls=%s://0.0.0.0:%d", scheme(c), ClientPort),
		fmt.Sprintf("--listen-metrics-urls=http://0.0.0.0:%d", MetricsPort),
		// The per-method gRPC latency histograms: without them etcd's slow-request alert
		// (etcdGRPCRequestsSlow, config/prometheus) has no data and never fires.
		"--metrics=extensive",
		"--advertise-client-urls=" + ClientURL(c, m.Name),
		"--initial-advertise-peer-urls=" + PeerURL(c, m.Name),
		"--initial-cluster=" + m.InitialCluster,
		"--initial-cluster-state=" + m.State,
		// The cluster's UID: two clusters of the same name, one deleted and one new, can
		// never mistake each other's members for their own.
		"--initial-cluster-token=" + string(c.UID),
	}
	if m.ForceNewCluster {
		args = append(args, "--force-new-cluster")
	}
	args = append(args, tlsArgs(c)...)
	args = append(args, "--quota-backend-bytes="+strconv.FormatInt(QuotaBackendBytes(c), 10))
	if t.AutoCompactionMode != "" {
		args = append(args, "--auto-compaction-mode="+t.AutoCompactionMode)
	}
	if t.AutoCompactionRetention != "" {
		args = append(args, "--auto-compaction-retention="+t.AutoCompactionRetention)
	}
	if t.SnapshotCount > 0 {
		args = append(args, "--snapshot-count="+strconv.FormatInt(t.SnapshotCount, 10))
	}
	if t.HeartbeatIntervalMillis > 0 {
		args = append(args, "--heartbeat-interval="+strconv.Itoa(int(t.HeartbeatIntervalMillis)))
	}
	if t.ElectionTimeoutMillis > 0 {
		args = append(args, "--election-timeout="+strconv.Itoa(int(t.ElectionTimeoutMillis)))
	}
	if c.Spec.CorruptionCheck.Policy != etcdv1alpha1.CorruptionCheckDisabled {
		args = append(args, CorruptionCheckArgs(m.Version)...)
	}
	return args
}

// CorruptionCheckArgs turn on etcd's own corruption checks in the spelling the version takes:
// the initial check (a starting member compares its keyspace hash with its peers' at its
// revision and refuses to start on a mismatch) and the compaction hash check (the leader
// compares the members' hashes at each compaction and raises CORRUPT for a member that
// differs). 3.6 made both feature gates and 3.7 removed the --experimental-* flags; 3.5 has
// the compaction check from 3.5.5. A version this cannot read gets the newest spelling.
func CorruptionCheckArgs(version string) []string {
	major, minor, patch, ok := splitVersion(version)
	switch {
	case !ok || major > 3 || minor >= 6:
		return []string{"--feature-gates=InitialCorruptCheck=true,CompactHashCheck=true"}
	case minor == 5 && patch >= 5:
		return []string{"--experimental-initial-corrupt-check=true", "--experimental-compact-hash-check-enabled=true"}
	default:
		return []string{"--experimental-initial-corrupt-check=true"}
	}
}

// splitVersion reads MAJOR.MINOR.PATCH.
func splitVersion(version string) (major, minor, patch int, ok bool) {
	parts := strings.Split(version, ".")
	if len(parts) != 3 {
		return 0, 0, 0, false
	}
	var nums [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0, 0, 0, false
		}
		nums[i] = n
	}
	return nums[0], nums[1], nums[2], true
}

func dataVolumeSource(c *etcdv1alpha1.EtcdCluster, member string) corev1.Volume {
	if c.Spec.Storage.Ephemeral {
		return corev1.Volume{Name: dataVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: c.Spec.Storage.Size},
		}}
	}
	return corev1.Volume{Name: dataVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: PVCName(member)},
	}}
}

// MemberPVC is the claim of one member. It is made only together with the member: a claim
// that goes missing later is never silently recreated, because an empty volume under an
// existing member ID would break raft's guarantees.
func MemberPVC(c *etcdv1alpha1.EtcdCluster, m MemberSpec) *corev1.PersistentVolumeClaim {
	size := MemberStorageSize(c)
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:            PVCName(m.Name),
			Namespace:       c.Namespace,
			Labels:          MemberLabels(c, m.Name),
			OwnerReferences: ClaimOwners(c),
			Annotations: map[string]string{
				AnnotationInitialCluster: m.InitialCluster,
				AnnotationClusterState:   m.State,
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: c.Spec.Storage.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// QuorumRecoveryClaim holds the copy of the survivor's data a quorum-loss recovery keeps: as
// large as a member's claim, which that data fits, and kept or deleted with the cluster as the
// members' claims are. It never carries LabelMember: it is no member's.
func QuorumRecoveryClaim(c *etcdv1alpha1.EtcdCluster) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      QuorumRecoveryClaimName(c.Name),
			Namespace: c.Namespace,
			Labels: map[string]string{
				LabelCluster:   c.Name,
				LabelManagedBy: managerName,
				LabelName:      managerName + "-quorum-recovery",
			},
			OwnerReferences: ClaimOwners(c),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: c.Spec.Storage.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: MemberStorageSize(c)}},
		},
	}
}

// BackupClaim is the claim a backup's destination.pvc.provision asks for. It has no owner, so
// that the snapshots on it outlive the EtcdBackup, and never LabelCluster nor LabelMember:
// those mark a member's data, which no snapshot is written onto. LabelBackup names the
// EtcdBackup it was made for.
func BackupClaim(b *etcdv1alpha1.EtcdBackup) *corev1.PersistentVolumeClaim {
	dest := b.Spec.Destination.PVC
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      dest.ClaimName,
			Namespace: b.Namespace,
			Labels: map[string]string{
				LabelManagedBy: managerName,
				LabelName:      managerName + "-backups",
				LabelBackup:    b.Name,
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: dest.Provision.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: dest.Provision.Size}},
		},
	}
}

// ClaimOwners are the owner references of a member's claim, and of the quorum-recovery claim:
// the cluster, as controller, only
// when spec.storage.retentionPolicy.whenDeleted is Delete, so that by default a cluster deleted
// by mistake leaves its data behind.
func ClaimOwners(c *etcdv1alpha1.EtcdCluster) []metav1.OwnerReference {
	if c.Spec.Storage.RetentionPolicy.WhenDeleted != etcdv1alpha1.DeletePVC {
		return nil
	}
	return []metav1.OwnerReference{*metav1.NewControllerRef(c, etcdv1alpha1.GroupVersion.WithKind("EtcdCluster"))}
}

// PeerService is the headless Service behind the members' DNS names. It publishes members
// before they are ready, because a member must be reachable by its peers to become ready.
func PeerService(c *etcdv1alpha1.EtcdCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: PeerServiceName(c.Name), Namespace: c.Namespace, Labels: ClusterLabels(c)},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 Selector(c),
			Ports: []corev1.ServicePort{
				{Name: "client", Port: ClientPort, TargetPort: intstr.FromInt32(ClientPort), Protocol: corev1.ProtocolTCP},
				{Name: "peer", Port: PeerPort, TargetPort: intstr.FromInt32(PeerPort), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// Fenced: the pod was taken out of the client Service's selection by a quorum recovery, for good.
func Fenced(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[AnnotationFenced]
	return ok && pod.Labels[LabelServesClients] != "true"
}

// ClientService is what clients connect to: ready voting members whose pods no quorum recovery
// fenced (ClientEndpointSelector).
func ClientService(c *etcdv1alpha1.EtcdCluster) *corev1.Service {
	var annotations map[string]string
	if user := c.Spec.ClientService.Annotations; len(user) > 0 {
		annotations = maps.Clone(user)
		annotations[AnnotationUserAnnotations] = strings.Join(slices.Sorted(maps.Keys(user)), ",")
	}
	serviceType := c.Spec.ClientService.Type
	if serviceType == "" {
		serviceType = corev1.ServiceTypeClusterIP
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: ClientServiceName(c.Name), Namespace: c.Namespace, Labels: ClusterLabels(c), Annotations: annotations,
		},
		Spec: corev1.ServiceSpec{
			Type:     serviceType,
			Selector: ClientEndpointSelector(c),
			Ports: []corev1.ServicePort{
				{Name: "client", Port: ClientPort, TargetPort: intstr.FromInt32(ClientPort), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// ClientServiceUpdate is current, the client Service as it is, brought to desired
// (ClientService): its selector, its type and the annotations from the spec, the ones that
// left the spec removed. The rest is left as it is: the cluster IP, the node ports the API
// server allocated, annotations and fields others set. changed is false when nothing differs.
//
// On a change of type to ClusterIP, the API server drops the node ports it had allocated.
func ClientServiceUpdate(current, desired *corev1.Service) (updated *corev1.Service, changed bool) {
	updated = current.DeepCopy()
	updated.Spec.Selector = desired.Spec.Selector
	updated.Spec.Type = desired.Spec.Type

	annotations := maps.Clone(updated.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	if previous := annotations[AnnotationUserAnnotations]; previous != "" {
		for _, key := range strings.Split(previous, ",") {
			delete(annotations, key)
		}
	}
	delete(annotations, AnnotationUserAnnotations)
	maps.Copy(annotations, desired.Annotations)
	if len(annotations) == 0 {
		annotations = nil
	}
	updated.Annotations = annotations

	changed = !maps.Equal(current.Spec.Selector, updated.Spec.Selector) || current.Spec.Type != updated.Spec.Type ||
		!maps.Equal(current.Annotations, updated.Annotations)
	return updated, changed
}

// PodDisruptionBudget allows at most one voluntary disruption, and none that would leave
// fewer than a quorum: minAvailable = max(voters-1, voters/2+1), where voters is how many
// voting members etcd has — not spec.size, which during a scale-down or while a member is
// being replaced is smaller than the quorum etcd actually needs. A one-member cluster
// therefore blocks eviction; scale it up before draining its node. It selects the pods of
// voters only (LabelVoter): a learner's Ready pod counted as available would let a drain take
// one voter more than quorum can spare.
func PodDisruptionBudget(c *etcdv1alpha1.EtcdCluster, voters int) *policyv1.PodDisruptionBudget {
	minAvailable := max(voters-1, voters/2+1)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, Labels: ClusterLabels(c)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt(minAvailable)),
			Selector:     &metav1.LabelSelector{MatchLabels: VoterSelector(c)},
			// A member that is not ready (crash-looping, catching up) may be evicted: that
			// cannot cost quorum, and it unblocks drains of broken nodes, and lets the operator
			// replace a member that is down.
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}
