package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// Labels of the agent Jobs.
const (
	// LabelBackup names the EtcdBackup a Job runs for.
	LabelBackup = "etcd.database.dev/backup"
	// LabelRestore names the EtcdRestore a Job, or a member's pod that restores its data,
	// runs for.
	LabelRestore = "etcd.database.dev/restore"
	// LabelQuorumRecovery names the cluster whose quorum-loss recovery a Job runs for.
	LabelQuorumRecovery = "etcd.database.dev/quorum-recovery"
	// AnnotationScheduledFor is the run time a backup Job was started for (RFC 3339).
	AnnotationScheduledFor = "etcd.database.dev/scheduled-for"
	// AnnotationClusterUID is the UID of the EtcdCluster a backup Job was made for, recorded
	// with its snapshot.
	AnnotationClusterUID = "etcd.database.dev/cluster-uid"

	// BackupContainer is the agent container of a backup Job.
	BackupContainer = "agent"
	agentUID        = 65532
)

// Bounds of an agent Job. A transient failure (a member restarting, the store briefly
// unreachable) is retried by the Job controller with its exponential backoff; a permanent one
// exits jobspec.ExitPermanent and fails the Job at once.
const (
	agentRetries = 2
	// agentDeadline stops a run that hangs (a store that accepts bytes and never answers), so
	// that it cannot hold up the next scheduled run forever.
	agentDeadline = 2 * time.Hour
	// agentJobTTL removes finished Jobs the operator could not (it deletes them itself as
	// soon as their outcome is recorded).
	agentJobTTL = 24 * time.Hour
)

// BackupJobName is the Job of the run of backup scheduled for the given time: one name per
// run, so that a stale cache can never start the same run twice.
func BackupJobName(backup string, scheduledFor time.Time) string {
	return jobName(backup, "-"+scheduledFor.UTC().Format("20060102t150405"))
}

// jobName is base+suffix, with base shortened and a hash of it added where the whole would pass
// the 63 characters of a label value (Jobs label their pods with their name).
func jobName(base, suffix string) string {
	if len(base)+len(suffix) <= 63 {
		return base + suffix
	}
	h := sha256.Sum256([]byte(base))
	return base[:63-len(suffix)-9] + "-" + hex.EncodeToString(h[:])[:8] + suffix
}

// BackupJob is the Job that runs one backup of cluster with the operator's agent image. Its
// retention never deletes the snapshot b's status.lastBackup names: b must be as last written,
// not as changed in memory since.
func BackupJob(b *etcdv1alpha1.EtcdBackup, c *etcdv1alpha1.EtcdCluster, image string, scheduledFor time.Time, pods PodSettings) (*batchv1.Job, error) {
	cfg := seriesConfig(b, c)
	if last := b.Status.LastBackup; last != nil {
		cfg.LastBackup = last.URI
	}
	if r := b.Spec.Retention; r != nil {
		if r.MaxCount != nil {
			cfg.MaxCount = int(*r.MaxCount)
		}
		if r.MaxAge != nil {
			cfg.MaxAge = r.MaxAge.Duration
		}
	}
	env, volumes, mounts, err := seriesAgentMounts(b, c, cfg, pods)
	if err != nil {
		return nil, err
	}
	podLabels := agentPodLabels(LabelBackup, b.Name)
	spec := agentJobSpec(c, podLabels, corev1.Container{
		Name:         BackupContainer,
		Image:        image,
		Args:         []string{"agent", "backup"},
		Env:          env,
		VolumeMounts: mounts,
	}, volumes, pods)
	spec.Template.Spec.ServiceAccountName = storageServiceAccount(b.Spec.Destination)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:        BackupJobName(b.Name, scheduledFor),
			Namespace:   b.Namespace,
			Labels:      agentJobLabels(podLabels, c),
			Annotations: map[string]string{AnnotationScheduledFor: scheduledFor.UTC().Format(time.RFC3339), AnnotationClusterUID: string(c.UID)},
		},
		Spec: spec,
	}, nil
}

// seriesConfig is the configuration of an agent that reads cluster c and writes b's series
// (a backup run, the archiver): the cluster's endpoint and how to reach it, the series its
// objects are named in, where they go, and the members never to read from.
func seriesConfig(b *etcdv1alpha1.EtcdBackup, c *etcdv1alpha1.EtcdCluster) jobspec.JobConfig {
	cfg := jobspec.JobConfig{
		Cluster:   c.Name,
		Namespace: b.Namespace,
		Backup:    b.Name,
		BackupUID: string(b.UID),
		Endpoints: []string{ClientEndpoint(c)},
		TLS:       c.Spec.TLS != nil,
		Auth:      c.Spec.Auth != nil,
		Storage:   b.Spec.Destination,
		// The keys are mounted (storageVolumes); the configuration names their Secret.
		Encryption: b.Spec.Encryption,
	}
	for _, cm := range c.Status.CorruptMembers {
		if cm.ID != "" {
			cfg.SkipMembers = append(cfg.SkipMembers, cm.ID)
		}
	}
	return cfg
}

// seriesAgentMounts are the environment, volumes and mounts of an agent configured with cfg
// (seriesConfig) that reads cluster c as root and writes b's series: its configuration and
// storage credentials, the root password of a cluster with auth and no TLS or the client
// certificate of one with TLS, the destination and the encryption keys.
func seriesAgentMounts(b *etcdv1alpha1.EtcdBackup, c *etcdv1alpha1.EtcdCluster, cfg jobspec.JobConfig, pods PodSettings) ([]corev1.EnvVar, []corev1.Volume, []corev1.VolumeMount, error) {
	env, err := agentEnv(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if cfg.Auth && !cfg.TLS {
		// The password etcd has, which differs from the user's Secret while it is rotated.
		env = append(env, secretEnv(jobspec.EtcdPasswordEnv, RootCredentialsSecretName(c.Name), RootPasswordKey, false))
	}
	env = append(env, pods.Env...)
	volumes, mounts := storageVolumes(b.Spec.Destination, b.Spec.Encryption)
	if cfg.TLS {
		volumes = append(volumes, tlsSecretVolume(c, "etcd-tls", TLSSecrets(c).Client))
		mounts = append(mounts, corev1.VolumeMount{Name: "etcd-tls", MountPath: jobspec.EtcdTLSDir, ReadOnly: true})
	}
	return env, volumes, mounts, nil
}

// RestoreSource is the snapshot a restore Job fetches.
type RestoreSource struct {
	Storage etcdv1alpha1.StorageLocation `json:"storage"`
	// Encryption is the Secret of keys that decrypts the snapshot, if it is encrypted.
	Encryption *etcdv1alpha1.SnapshotEncryption `json:"encryption,omitempty"`
	// Key after the storage's prefix.
	Key    string `json:"key"`
	SHA256 string `json:"sha256,omitempty"`
	// Fallbacks are restored instead, the first that exists, should Key no longer exist.
	Fallbacks []jobspec.Snapshot `json:"fallbacks,omitempty"`
	// RevisionBump is how far past the snapshot's revision the restored data starts, every
	// revision below compacted (etcdutl's --bump-revision and --mark-compacted); 0 for none.
	RevisionBump int64 `json:"revisionBump,omitempty"`
	// WatermarkDir is where the watermarks of the snapshot's series are, after the storage's
	// prefix; empty for the snapshot's own directory.
	WatermarkDir string `json:"watermarkDir,omitempty"`
}

// Containers of a restore Job, in order.
const (
	RestoreFetchContainer   = "fetch"
	RestoreEtcdutlContainer = "etcdutl"
	RestoreInstallContainer = "install"
)

// RestoreJobName is the Job preparing the data of the restore's member at index in its
// members (resources.RestoreMemberNames); the first's keeps the name it had when a restore
// prepared one member alone.
func RestoreJobName(restore string, index int) string {
	if index == 0 {
		return jobName(restore, "-restore")
	}
	return jobName(restore, fmt.Sprintf("-restore-%d", index))
}

// RestoreMember is the member a restore Job prepares, among those the restored cluster starts
// with.
type RestoreMember struct {
	Name string
	// Index of Name in Members.
	Index int
	// Members are the restored cluster's first members, each prepared from the same snapshot
	// by a Job of its own: its --initial-cluster.
	Members []string
}

// RestoreJob prepares the data of one of the members a restored cluster starts with, on its
// claim: the agent fetches and checks the snapshot, the etcdutl of the cluster's own etcd
// image restores it as a member of a cluster of all of them (every member's Job writes the
// same membership, cluster ID and revision), and the agent moves the result into the data
// directory.
func RestoreJob(r *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, m RestoreMember, src RestoreSource, agentImage string, images EtcdImages, pods PodSettings) (*batchv1.Job, error) {
	member := m.Name
	env, err := restoreFetchEnv(c, src, pods.Env)
	if err != nil {
		return nil, err
	}
	volumes, mounts := storageVolumes(src.Storage, src.Encryption)
	volumes = append(volumes, corev1.Volume{Name: dataVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: PVCName(member)},
	}})
	data := corev1.VolumeMount{Name: dataVolume, MountPath: dataMount}

	podLabels := agentPodLabels(LabelRestore, r.Name)
	fetch := agentContainer(corev1.Container{
		Name: RestoreFetchContainer, Image: agentImage, Args: []string{"agent", "restore-fetch"},
		Env: env, VolumeMounts: append(mounts, data),
	})
	restore := agentContainer(corev1.Container{
		Name:  RestoreEtcdutlContainer,
		Image: Image(c, images, c.Spec.Version),
		// The etcd image of the version the cluster will run: its etcdutl writes the data
		// directory in the format that version expects.
		Command:      []string{etcdutlPath},
		Args:         etcdutlRestoreArgs(c, m, src.RevisionBump),
		VolumeMounts: []corev1.VolumeMount{data},
	})
	// etcdutl writes no termination message: its last log lines say why it failed.
	restore.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	install := agentContainer(corev1.Container{
		Name: RestoreInstallContainer, Image: agentImage, Args: []string{"agent", "restore-install"},
		VolumeMounts: []corev1.VolumeMount{data},
	})
	spec := agentJobSpec(c, podLabels, install, volumes, pods)
	spec.Template.Spec.InitContainers = []corev1.Container{fetch, restore}
	spec.Template.Spec.ServiceAccountName = storageServiceAccount(src.Storage)
	withMembersPriority(&spec, c)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: RestoreJobName(r.Name, m.Index), Namespace: r.Namespace, Labels: agentJobLabels(podLabels, c),
			Annotations: map[string]string{AnnotationRevisionBump: strconv.FormatInt(src.RevisionBump, 10)},
		},
		Spec: spec,
	}, nil
}

// etcdutlPath is where etcd images hold etcdutl.
const etcdutlPath = "/usr/local/bin/etcdutl"

// etcdutlRestoreArgs restore the staged snapshot as member m of a cluster of m.Members: every
// member's restore writes the same membership, cluster ID and revision.
func etcdutlRestoreArgs(c *etcdv1alpha1.EtcdCluster, m RestoreMember, bump int64) []string {
	args := []string{
		"snapshot", "restore", jobspec.StagedSnapshot,
		"--data-dir=" + jobspec.StagedDataDir,
		"--name=" + m.Name,
		"--initial-cluster=" + InitialCluster(c, m.Members),
		"--initial-advertise-peer-urls=" + PeerURL(c, m.Name),
		"--initial-cluster-token=" + string(c.UID),
	}
	if bump > 0 {
		// etcdutl requires the one with the other: the revisions skipped are compacted, so a
		// watch from any of them ends with a compaction error instead of replaying nothing.
		args = append(args, fmt.Sprintf("--bump-revision=%d", bump), "--mark-compacted")
	}
	return args
}

// Containers of a verify Job, in order: two init containers, the restored member as a native
// sidecar, and the agent's check.
const (
	VerifyFetchContainer   = "fetch"
	VerifyEtcdutlContainer = "etcdutl"
	VerifyEtcdContainer    = "etcd"
	VerifyContainer        = "verify"
	// LabelVerify marks a backup's verify Jobs (apart from its runs' Jobs) with the run whose
	// snapshot they verify.
	LabelVerify = "etcd.database.dev/verify"
	// AnnotationSnapshotURI is the snapshot a verify Job verifies.
	AnnotationSnapshotURI = "etcd.database.dev/snapshot-uri"
)

// VerifyJobName is the Job verifying the snapshot of the backup run whose Job was run.
func VerifyJobName(run string) string { return jobName(run, "-verify") }

// VerifySnapshot is the snapshot a verify Job checks: where it is and what was recorded of it.
type VerifySnapshot struct {
	Storage etcdv1alpha1.StorageLocation
	// Encryption is the Secret of keys that decrypts it, if it is encrypted.
	Encryption *etcdv1alpha1.SnapshotEncryption
	// Key after the storage's prefix.
	Key      string
	Artifact etcdv1alpha1.BackupArtifact
	// Run is the Job of the backup run that wrote it.
	Run string
}

// VerifyJob proves the snapshot of one of b's runs restorable in a pod of its own: the agent
// fetches it into an emptyDir, checking its sha256; the etcdutl of the cluster's own etcd
// image restores it there (checking the snapshot's own hash: never --skip-hash-check); that
// etcd serves it alone on the pod's loopback as a native sidecar; and the agent compares what
// it serves with what the backup recorded. Nothing is written outside the pod.
func VerifyJob(b *etcdv1alpha1.EtcdBackup, c *etcdv1alpha1.EtcdCluster, snap VerifySnapshot, agentImage string, images EtcdImages, pods PodSettings) (*batchv1.Job, error) {
	enc := snap.Encryption
	if snap.Artifact.EncryptionKeyID == "" {
		enc = nil // a snapshot stored in plain needs no keys
	}
	env, err := agentEnv(jobspec.JobConfig{
		Cluster: c.Name, Storage: snap.Storage, Encryption: enc, Key: snap.Key, SHA256: snap.Artifact.SHA256,
		Endpoints: []string{jobspec.VerifyClientURL}, Revision: snap.Artifact.Revision, Keyspace: snap.Artifact.Keyspace,
	})
	if err != nil {
		return nil, err
	}
	env = append(env, pods.Env...)
	volumes, mounts := storageVolumes(snap.Storage, enc)
	readOnly(mounts) // verifying never writes to the destination
	fetch := agentContainer(corev1.Container{
		Name: VerifyFetchContainer, Image: agentImage, Args: []string{"agent", "verify-fetch"}, Env: env, VolumeMounts: mounts,
	})
	verify := agentContainer(corev1.Container{
		// Root's client certificate for the restored member, made by the fetch, is all it reads.
		Name: VerifyContainer, Image: agentImage, Args: []string{"agent", "verify"}, Env: env[:1],
	})

	podLabels := agentPodLabels(LabelBackup, b.Name)
	podLabels[LabelVerify] = snap.Run
	spec := scratchMemberJobSpec(c, images, podLabels, fetch, verify, volumes, pods)
	spec.Template.Spec.ServiceAccountName = storageServiceAccount(snap.Storage)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: VerifyJobName(snap.Run), Namespace: b.Namespace, Labels: agentJobLabels(podLabels, c),
			Annotations: map[string]string{AnnotationSnapshotURI: snap.Artifact.URI},
		},
		Spec: spec,
	}, nil
}

// readOnly mounts every one of mounts read-only.
func readOnly(mounts []corev1.VolumeMount) {
	for i := range mounts {
		mounts[i].ReadOnly = true
	}
}

// scratchMemberJobSpec is the Job of a verify or point-in-time pod: fetch (an agent container)
// downloads a snapshot into the pod's scratch emptyDir (jobspec.VerifyScratchDir); the
// etcdutl of c's own etcd image restores it there, checking its hash; that etcd serves it
// alone on the pod's loopback as a native sidecar, with memberArgs added to its flags; and
// last, the agent's work on it, reads the scratch directory (the fetch's TLS material, its
// plan) and nothing else there. Nothing is reachable from outside the pod.
func scratchMemberJobSpec(c *etcdv1alpha1.EtcdCluster, images EtcdImages, podLabels map[string]string, fetch, last corev1.Container,
	volumes []corev1.Volume, pods PodSettings, memberArgs ...string) batchv1.JobSpec {
	volumes = append(volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	scratch := corev1.VolumeMount{Name: "scratch", MountPath: jobspec.VerifyScratchDir}
	fetch.VolumeMounts = append(fetch.VolumeMounts, scratch)
	last.VolumeMounts = append(last.VolumeMounts, corev1.VolumeMount{Name: scratch.Name, MountPath: scratch.MountPath, ReadOnly: true})
	etcdImage := Image(c, images, c.Spec.Version)
	initialCluster := jobspec.VerifyMember + "=" + jobspec.VerifyPeerURL

	restore := agentContainer(corev1.Container{
		Name: VerifyEtcdutlContainer, Image: etcdImage,
		Command: []string{etcdutlPath},
		Args: []string{
			"snapshot", "restore", jobspec.VerifySnapshot,
			"--data-dir=" + jobspec.VerifyDataDir,
			"--name=" + jobspec.VerifyMember,
			"--initial-cluster=" + initialCluster,
			"--initial-advertise-peer-urls=" + jobspec.VerifyPeerURL,
		},
		VolumeMounts: []corev1.VolumeMount{scratch},
	})
	// etcdutl writes no termination message: its last log lines say why it failed.
	restore.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	member := agentContainer(corev1.Container{
		Name: VerifyEtcdContainer, Image: etcdImage,
		Command: []string{"/usr/local/bin/etcd"},
		Args: slices.Concat([]string{
			"--name=" + jobspec.VerifyMember,
			"--data-dir=" + jobspec.VerifyDataDir,
			"--listen-client-urls=" + jobspec.VerifyClientURL,
			"--advertise-client-urls=" + jobspec.VerifyClientURL,
			"--listen-peer-urls=" + jobspec.VerifyPeerURL,
			"--initial-advertise-peer-urls=" + jobspec.VerifyPeerURL,
			"--initial-cluster=" + initialCluster,
		}, jobspec.VerifyEtcdTLSArgs(jobspec.VerifyTLSDir), memberArgs),
		VolumeMounts: []corev1.VolumeMount{scratch},
		// A native sidecar: it starts before the agent's work and is stopped once that ends.
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
	})
	// etcd maps the database into memory: not the agent's limit but a member's, which a
	// namespace whose ResourceQuota demands limits admits as it admits the members.
	member.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: memberResources(c).Limits[corev1.ResourceMemory]}
	member.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError

	spec := agentJobSpec(c, podLabels, last, volumes, pods)
	spec.Template.Spec.InitContainers = []corev1.Container{fetch, restore, member}
	return spec
}

// PreserveDataContainer is the agent container of a preserve-data Job.
const PreserveDataContainer = "preserve-data"

// PreserveDataJobName is the Job copying member's data before a quorum-loss recovery.
func PreserveDataJobName(member string) string { return jobName(member, "-preserve") }

// QuorumRecoveryDir is the directory, in the recovery claim, of the copies made by the
// recovery begun at start: one per recovery, so that a later one never finds an earlier copy.
func QuorumRecoveryDir(start time.Time) string { return start.UTC().Format("20060102t150405") }

// PreserveDataJob copies the data directory of member, the survivor of a quorum lost for good,
// into the cluster's quorum-recovery claim before the member is restarted with
// --force-new-cluster. The member's claim is mounted read-only where its pod mounts it: the Job
// can read the data, never change it. The member must be stopped first (etcd locks its db
// while it runs; the agent waits for that lock, and fails while it is held).
func PreserveDataJob(c *etcdv1alpha1.EtcdCluster, member, agentImage string, pods PodSettings) (*batchv1.Job, error) {
	if c.Spec.Storage.Ephemeral {
		return nil, fmt.Errorf("cluster %s keeps its data in emptyDir volumes: member %s has no claim to preserve", c.Name, member)
	}
	cfg := jobspec.JobConfig{Cluster: c.Name, Member: member}
	if qr := c.Status.QuorumRecovery; qr != nil {
		cfg.Recovery = QuorumRecoveryDir(qr.StartTime.Time)
	}
	env, err := agentEnv(cfg)
	if err != nil {
		return nil, err
	}
	env = append(env, pods.Env...)
	dataVolume, dataMount := memberDataReadOnly(member)
	volumes := []corev1.Volume{
		dataVolume,
		{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
			ClaimName: QuorumRecoveryClaimName(c.Name),
		}}},
	}
	mounts := []corev1.VolumeMount{dataMount, {Name: "claim", MountPath: jobspec.ClaimDir}}
	podLabels := agentPodLabels(LabelQuorumRecovery, c.Name)
	spec := agentJobSpec(c, podLabels, corev1.Container{
		Name: PreserveDataContainer, Image: agentImage, Args: []string{"agent", "preserve-data"},
		Env: env, VolumeMounts: mounts,
	}, volumes, pods)
	withMembersPriority(&spec, c)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: PreserveDataJobName(member), Namespace: c.Namespace, Labels: agentJobLabels(podLabels, c)},
		Spec:       spec,
	}, nil
}

// memberDataReadOnly is member's claim, mounted read-only where its pod mounts it.
func memberDataReadOnly(member string) (corev1.Volume, corev1.VolumeMount) {
	return corev1.Volume{Name: dataVolume, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
			ClaimName: PVCName(member), ReadOnly: true,
		}}},
		corev1.VolumeMount{Name: dataVolume, MountPath: dataMount, ReadOnly: true}
}

// ReadLogContainer is the agent container of a read-log Job.
const ReadLogContainer = "read-log"

// AnnotationQuorumLostAt, on a read-log Job, is when the quorum loss it reads for began (RFC
// 3339): a log read during an earlier loss says nothing of this one.
const AnnotationQuorumLostAt = "etcd.database.dev/quorum-lost-at"

// ReadLogJobName is the Job reading how far member's raft log reaches.
func ReadLogJobName(member string) string { return jobName(member, "-read-log") }

// ReadLogJob reads how far the raft log of member, a survivor of a quorum lost for good that
// does not answer, reaches, from the WAL on its claim. The claim is mounted read-only and
// nothing is locked, so the member's pod, if it runs, runs on: the Job is placed on its node
// (node, if not empty), where a ReadWriteOnce volume can be mounted twice.
func ReadLogJob(c *etcdv1alpha1.EtcdCluster, member, node string, lostAt time.Time, agentImage string, pods PodSettings) (*batchv1.Job, error) {
	if c.Spec.Storage.Ephemeral {
		return nil, fmt.Errorf("cluster %s keeps its data in emptyDir volumes: member %s has no claim to read", c.Name, member)
	}
	env, err := agentEnv(jobspec.JobConfig{Cluster: c.Name, Member: member})
	if err != nil {
		return nil, err
	}
	volume, mount := memberDataReadOnly(member)
	podLabels := agentPodLabels(LabelQuorumRecovery, c.Name)
	spec := agentJobSpec(c, podLabels, corev1.Container{
		Name: ReadLogContainer, Image: agentImage, Args: []string{"agent", "read-log"},
		Env:          append(env, pods.Env...),
		VolumeMounts: []corev1.VolumeMount{mount},
	}, []corev1.Volume{volume}, pods)
	withMembersPriority(&spec, c)
	if node != "" {
		// The node was chosen when the member's pod was placed: of the template's placement only
		// the tolerations, which let the Job onto it, still matter. Its nodeSelector and node
		// affinity, changed since (as they may be during an outage), could exclude the node and
		// stall the recovery. A node must be both that node and of a built platform.
		spec.Template.Spec.NodeSelector = nil
		affinity := PlatformNodeAffinity()
		requireOfEveryTerm(affinity.RequiredDuringSchedulingIgnoredDuringExecution, corev1.NodeSelectorTerm{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		})
		spec.Template.Spec.Affinity.NodeAffinity = affinity
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: ReadLogJobName(member), Namespace: c.Namespace, Labels: agentJobLabels(podLabels, c),
			Annotations: map[string]string{AnnotationQuorumLostAt: lostAt.UTC().Format(time.RFC3339)},
		},
		Spec: spec,
	}, nil
}

// agentPodLabels label an agent Job's pods with what they run for (kind is LabelBackup,
// LabelRestore or LabelQuorumRecovery), and never with LabelCluster: the member Services and the disruption budget
// select by it, and an agent pod counted as a member would let a drain evict a real one.
func agentPodLabels(kind, name string) map[string]string {
	return map[string]string{LabelName: managerName + "-agent", LabelManagedBy: managerName, kind: name}
}

// agentJobLabels are the pods' labels plus the cluster the agent serves, on the Job's (or the
// archiver's Deployment's) object only.
func agentJobLabels(podLabels map[string]string, c *etcdv1alpha1.EtcdCluster) map[string]string {
	l := maps.Clone(podLabels)
	l[LabelCluster] = c.Name
	return l
}

// agentJobSpec wraps the agent container in a Job that passes the restricted Pod Security
// profile, needs no API access, fails at once on a permanent error, and runs where c's pod
// template lets members run, pulling with its secrets.
func agentJobSpec(c *etcdv1alpha1.EtcdCluster, labels map[string]string, container corev1.Container, volumes []corev1.Volume, pods PodSettings) batchv1.JobSpec {
	template := agentPodTemplate(c, labels, container, volumes, pods)
	template.Spec.RestartPolicy = corev1.RestartPolicyNever
	return batchv1.JobSpec{
		BackoffLimit:            ptr.To[int32](agentRetries),
		ActiveDeadlineSeconds:   ptr.To(int64(agentDeadline.Seconds())),
		TTLSecondsAfterFinished: ptr.To(int32(agentJobTTL.Seconds())),
		PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				Operator: batchv1.PodFailurePolicyOnExitCodesOpIn,
				Values:   []int32{jobspec.ExitPermanent},
			},
		}}},
		Template: template,
	}
}

// agentPodTemplate is the pod of an agent container, in a Job or a Deployment: restricted,
// without API access, where c's pod template lets members run, pulling with its secrets.
func agentPodTemplate(c *etcdv1alpha1.EtcdCluster, labels map[string]string, container corev1.Container, volumes []corev1.Volume, pods PodSettings) corev1.PodTemplateSpec {
	template := corev1.PodTemplateSpec{
		// The template's annotations, as members have them (a service mesh's sidecar kept out
		// of a pod that must end, say); not its labels, which a Service the user selects
		// members with would take the agent's pod in by.
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: maps.Clone(c.Spec.PodTemplate.Metadata.Annotations)},
		Spec: corev1.PodSpec{
			Affinity:                     &corev1.Affinity{NodeAffinity: agentNodeAffinity(c)},
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext:              restrictedPod(agentUID, pods),
			Containers:                   []corev1.Container{agentContainer(container)},
			Volumes:                      volumes,
		},
	}
	applyClusterPodTemplate(&template.Spec, c)
	return template
}

// withMembersPriority gives a Job that stands in for members on the way back to a serving
// cluster (restore, preserve-data, read-log) the members' priority class: it should neither
// wait behind nor be preempted by pods a member would not, and a restore Job, the first
// consumer of a member's claim, should find room where the member will. Backup and verify Jobs
// keep the default: routine work, which should not preempt other workloads as a member may.
func withMembersPriority(spec *batchv1.JobSpec, c *etcdv1alpha1.EtcdCluster) {
	spec.Template.Spec.PriorityClassName = c.Spec.PodTemplate.PriorityClassName
}

// agentContainer is a container of an agent Job: restricted, reporting through its
// termination message, with memory bounded, and told its memory limit, whatever a builder sets
// it to after: the downward API reads the container's own. A container it made already is
// given back as it was (a pod template builder applies it to what a Job builder made).
func agentContainer(container corev1.Container) corev1.Container {
	container.ImagePullPolicy = corev1.PullIfNotPresent
	container.Env = slices.DeleteFunc(slices.Clone(container.Env), func(e corev1.EnvVar) bool { return e.Name == jobspec.MemoryLimitEnv })
	container.Env = append(container.Env, corev1.EnvVar{Name: jobspec.MemoryLimitEnv, ValueFrom: &corev1.EnvVarSource{
		ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}})
	container.TerminationMessagePath = jobspec.TerminationMessagePath
	container.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	container.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		// The snapshot is streamed, never held: memory does not grow with the database.
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	container.SecurityContext = restrictedContainer()
	return container
}

// agentEnv is what an agent container's environment starts with: its configuration, and the
// credentials of the storage it names, if any.
func agentEnv(cfg jobspec.JobConfig) ([]corev1.EnvVar, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("agent configuration: %w", err)
	}
	return append([]corev1.EnvVar{{Name: jobspec.ConfigEnv, Value: string(raw)}}, storageEnv(cfg.Storage)...), nil
}

// restoreFetchEnv is the environment of a restore's fetch, in a Job or in a member's pod.
func restoreFetchEnv(c *etcdv1alpha1.EtcdCluster, src RestoreSource, extraEnv []corev1.EnvVar) ([]corev1.EnvVar, error) {
	env, err := agentEnv(jobspec.JobConfig{Cluster: c.Name, Storage: src.Storage, Encryption: src.Encryption, Key: src.Key, SHA256: src.SHA256, Fallbacks: src.Fallbacks,
		RevisionBump: src.RevisionBump, WatermarkDir: src.WatermarkDir})
	return append(env, extraEnv...), err
}

// storageEnv passes the S3 credentials from the user's Secret by reference, so their values
// never leave the Secret's namespace nor pass through the operator (which only checks that
// the keys exist).
func storageEnv(loc etcdv1alpha1.StorageLocation) []corev1.EnvVar {
	if loc.S3 == nil || loc.S3.CredentialsSecretName == "" {
		return nil // the pod's own AWS identity (storageServiceAccount)
	}
	secret := loc.S3.CredentialsSecretName
	return []corev1.EnvVar{
		secretEnv(jobspec.AccessKeyIDEnv, secret, jobspec.AccessKeyIDEnv, false),
		secretEnv(jobspec.SecretAccessKeyEnv, secret, jobspec.SecretAccessKeyEnv, false),
		secretEnv(jobspec.SessionTokenEnv, secret, jobspec.SessionTokenEnv, true),
	}
}

// storageServiceAccount is the ServiceAccount a Job reading or writing loc runs as: the one an
// S3 location names, bound to the IAM role whose web identity the agent takes.
func storageServiceAccount(loc etcdv1alpha1.StorageLocation) string {
	if loc.S3 == nil {
		return ""
	}
	return loc.S3.ServiceAccountName
}

func secretEnv(name, secret, key string, optional bool) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key, Optional: ptr.To(optional),
	}}}
}

// storageVolumes are the volumes a Job reading or writing snapshots at loc mounts: the claim,
// or the S3 server's CA; and the Secret of encryption keys, when enc names one. Those keys
// reach the Job as files its agent reads, as the CA does: never through the operator, never in
// the Job's spec.
func storageVolumes(loc etcdv1alpha1.StorageLocation, enc *etcdv1alpha1.SnapshotEncryption) ([]corev1.Volume, []corev1.VolumeMount) {
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	switch {
	case loc.PVC != nil:
		volumes = append(volumes, corev1.Volume{Name: "claim", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: loc.PVC.ClaimName},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: "claim", MountPath: jobspec.ClaimDir})
	case loc.S3 != nil && loc.S3.CASecretName != "":
		volumes = append(volumes, corev1.Volume{Name: "storage-ca", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: loc.S3.CASecretName},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: "storage-ca", MountPath: jobspec.StorageCADir, ReadOnly: true})
	}
	if enc != nil && enc.SecretName != "" {
		volumes = append(volumes, corev1.Volume{Name: "encryption-keys", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: enc.SecretName},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: "encryption-keys", MountPath: jobspec.EncryptionKeysDir, ReadOnly: true})
	}
	return volumes, mounts
}
