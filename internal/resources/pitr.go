package resources

import (
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// Containers of a point-in-time Job, in order: the scratch member's, as a verify Job has them,
// around the replay.
const (
	PointInTimeFetchContainer   = "fetch"
	PointInTimeEtcdutlContainer = VerifyEtcdutlContainer
	PointInTimeEtcdContainer    = VerifyEtcdContainer
	PointInTimeReplayContainer  = "replay"
)

// PointInTimeJobName is the Job materializing the point in time of restore.
func PointInTimeJobName(restore string) string { return jobName(restore, "-pitr") }

// PointInTime is the keyspace a point-in-time Job materializes: a backup's series at a
// revision or at a time, for one EtcdRestore.
type PointInTime struct {
	// Restore and RestoreUID name the EtcdRestore: the Job is named after the one, the
	// materialized snapshot after the other.
	Restore, RestoreUID string
	// Revision or Time: exactly one is set.
	Revision int64
	Time     *time.Time
	// ExcludeKeys are snapshots of the series (keys after the storage prefix) never taken as
	// the base: those whose verification failed.
	ExcludeKeys []string
	// Recorded are the series' snapshots the EtcdBackup's status records, with their sha256
	// and revision.
	Recorded []jobspec.Snapshot
}

// pointInTimeReplayMemory bounds the replay, which holds one decoded segment of the archive at
// a time (the archiver closes a segment at its configured size) besides the client's buffers.
var pointInTimeReplayMemory = resource.MustParse("1Gi")

// scratchAutoCompaction keeps the scratch member's history short while the replay writes into
// it: only the keyspace at the last revision is saved, and without compaction every revision
// replayed would stay in the database until it passed the quota that the source, compacting,
// kept within.
var scratchAutoCompaction = []string{"--auto-compaction-mode=revision", "--auto-compaction-retention=1000"}

// scratchRequestLimits let the scratch member take each replayed revision as one txn, however
// large: one request at the source (a prefix deleted, a lease revoked) is a delete per key
// here, past etcd's default of 128 operations and 1.5 MiB per request. The replayer's client
// sends up to 1 GiB (internal/etcd, maxReplayRequestBytes).
var scratchRequestLimits = []string{"--max-txn-ops=100000000", "--max-request-bytes=1073741824"}

// PointInTimeJob materializes b's series at pit's revision or time in a pod of its own: the
// agent chooses the newest usable full snapshot at or before the target and fetches it into
// an emptyDir (checking its sha256, decrypting it); the etcdutl of c's etcd image restores it
// there; that etcd serves it alone on the pod's loopback as a native sidecar; and the agent
// replays the archived revisions up to the target into it, then saves a snapshot of it into
// b's destination (pitr/<restore UID>-r<revision>.db in the series' directory), encrypted as
// b's snapshots are. c gives the etcd image and version, and where the pod may run.
func PointInTimeJob(b *etcdv1alpha1.EtcdBackup, c *etcdv1alpha1.EtcdCluster, pit PointInTime, agentImage string, images EtcdImages, pods PodSettings) (*batchv1.Job, error) {
	dest, enc := b.Spec.Destination, b.Spec.Encryption
	env, err := agentEnv(jobspec.JobConfig{
		Cluster: b.Spec.ClusterName, Namespace: b.Namespace, Backup: b.Name, BackupUID: string(b.UID),
		Storage: dest, Encryption: enc, Endpoints: []string{jobspec.VerifyClientURL},
		TargetRevision: pit.Revision, TargetTime: pit.Time, ExcludeKeys: pit.ExcludeKeys, Recorded: pit.Recorded, RestoreUID: pit.RestoreUID,
	})
	if err != nil {
		return nil, err
	}
	env = append(env, pods.Env...)
	volumes, mounts := storageVolumes(dest, enc)
	fetchMounts := append([]corev1.VolumeMount(nil), mounts...)
	readOnly(fetchMounts) // the fetch only reads; the replay writes the materialized snapshot
	fetch := agentContainer(corev1.Container{
		Name: PointInTimeFetchContainer, Image: agentImage, Args: []string{"agent", "pitr-fetch"}, Env: env, VolumeMounts: fetchMounts,
	})
	replay := agentContainer(corev1.Container{
		Name: PointInTimeReplayContainer, Image: agentImage, Args: []string{"agent", "pitr-replay"}, Env: env, VolumeMounts: mounts,
	})

	podLabels := agentPodLabels(LabelRestore, pit.Restore)
	memberArgs := append([]string{"--quota-backend-bytes=" + strconv.FormatInt(QuotaBackendBytes(c), 10)}, scratchAutoCompaction...)
	memberArgs = append(memberArgs, scratchRequestLimits...)
	spec := scratchMemberJobSpec(c, images, podLabels, fetch, replay, volumes, pods, memberArgs...)
	// Set on the container as the Job has it: agentJobSpec makes its last container an agent's.
	spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = pointInTimeReplayMemory
	spec.Template.Spec.ServiceAccountName = storageServiceAccount(dest)
	// A restore waits on it as on a restore Job.
	withMembersPriority(&spec, c)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: PointInTimeJobName(pit.Restore), Namespace: b.Namespace, Labels: agentJobLabels(podLabels, c)},
		Spec:       spec,
	}, nil
}
