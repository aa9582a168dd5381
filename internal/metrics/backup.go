package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
)

// BackupValues is what the series of one EtcdBackup say, all read from its spec and status.
type BackupValues struct {
	Cluster string
	Created time.Time
	// LastSuccess, LastSizeBytes and LastDuration describe status.lastBackup, when there is one.
	LastSuccess   time.Time
	LastSizeBytes int64
	LastDuration  time.Duration
	// LastRunFailed: the newest run in the history failed.
	LastRunFailed bool
	// ScheduleInterval is the longest wait between two runs of the schedule, 0 for a one-shot
	// or suspended backup, or a schedule that does not parse.
	ScheduleInterval time.Duration
	// RecoveryTime is status.lastVerified.recoveryTime, 0 when not measured; MaxRecoveryTime
	// is spec.verify.maxRecoveryTime, 0 when unset.
	RecoveryTime, MaxRecoveryTime time.Duration
	// Archiving: spec.continuous is set and the archiver has reported; then ArchiveLag and
	// ArchiveLagRevisions are status.archive's lag, ArchivedRevision the newest revision a
	// point-in-time restore can reach, and MaxArchiveLag continuous.maxLag.
	Archiving                             bool
	ArchiveLag, MaxArchiveLag             time.Duration
	ArchiveLagRevisions, ArchivedRevision int64
}

// scheduleLookahead bounds the runs walked to find a schedule's longest interval: a week
// covers schedules by weekday.
const scheduleLookahead = 7 * 24 * time.Hour

// BackupValuesOf reads the series' values from a backup's spec and status. now starts the
// walk over the schedule's next runs.
func BackupValuesOf(b *etcdv1alpha1.EtcdBackup, now time.Time) BackupValues {
	v := BackupValues{Cluster: b.Spec.ClusterName, Created: b.CreationTimestamp.Time}
	if last := b.Status.LastBackup; last != nil {
		v.LastSuccess = last.CompletionTime.Time
		v.LastSizeBytes = last.SizeBytes
		v.LastDuration = last.CompletionTime.Sub(last.StartTime.Time)
	}
	if len(b.Status.History) > 0 {
		v.LastRunFailed = b.Status.History[0].Phase == etcdv1alpha1.BackupFailed
	}
	if lv := b.Status.LastVerified; lv != nil && lv.RecoveryTime != nil {
		v.RecoveryTime = lv.RecoveryTime.Duration
	}
	if b.Spec.Verify != nil && b.Spec.Verify.MaxRecoveryTime != nil {
		v.MaxRecoveryTime = b.Spec.Verify.MaxRecoveryTime.Duration
	}
	if a := b.Status.Archive; b.Spec.Continuous != nil && a != nil {
		v.Archiving = true
		v.ArchiveLag, v.ArchiveLagRevisions = time.Duration(a.LagSeconds)*time.Second, a.LagRevisions
		if a.RecoverableRange != nil {
			v.ArchivedRevision = a.RecoverableRange.Last.Revision
		}
		if b.Spec.Continuous.MaxLag != nil {
			v.MaxArchiveLag = b.Spec.Continuous.MaxLag.Duration
		}
	}
	if b.Spec.Schedule != "" && !b.Spec.Suspend {
		if sched, err := backupplan.ParseSchedule(b.Spec.Schedule); err == nil {
			v.ScheduleInterval = longestInterval(sched.Next, now)
		}
	}
	return v
}

// longestInterval is the longest wait between two consecutive runs of a schedule within
// scheduleLookahead of now (and the first wait past it).
func longestInterval(next func(time.Time) time.Time, now time.Time) time.Duration {
	var longest time.Duration
	prev := next(now)
	for !prev.IsZero() {
		n := next(prev)
		if n.IsZero() {
			break
		}
		longest = max(longest, n.Sub(prev))
		if n.Sub(now) > scheduleLookahead {
			break
		}
		prev = n
	}
	return longest
}

// NewFailures counts the failed runs in after's history that were not in before's.
func NewFailures(before, after []etcdv1alpha1.BackupRun) int {
	n := 0
	for _, run := range after {
		known := slices.ContainsFunc(before, func(r etcdv1alpha1.BackupRun) bool { return r.Job == run.Job })
		if run.Phase == etcdv1alpha1.BackupFailed && !known {
			n++
		}
	}
	return n
}

type backupEntry struct {
	values   BackupValues
	failures float64
}

// BackupCollector emits the series of every EtcdBackup recorded and not forgotten.
type BackupCollector struct {
	entries store[backupEntry]

	created, lastSuccess, lastSize, lastDuration, lastRunFailed, scheduleInterval, failures *prometheus.Desc
	recoveryTime, maxRecoveryTime                                                           *prometheus.Desc
	archiveLag, archiveLagRevisions, maxArchiveLag, archivedRevision                        *prometheus.Desc
}

func newBackupCollector() *BackupCollector {
	return &BackupCollector{
		created:          desc("backup_created_timestamp_seconds", "When the EtcdBackup was created: the age a backup that never succeeded is measured from.", "cluster"),
		lastSuccess:      desc("backup_last_success_timestamp_seconds", "When the newest snapshot that completed and was found intact (status.lastBackup) finished.", "cluster"),
		lastSize:         desc("backup_last_size_bytes", "The size of the newest completed snapshot.", "cluster"),
		lastDuration:     desc("backup_last_duration_seconds", "How long the newest completed snapshot took, from its start to its upload.", "cluster"),
		lastRunFailed:    desc("backup_last_run_failed", "1 when the newest run failed, 0 otherwise.", "cluster"),
		scheduleInterval: desc("backup_schedule_interval_seconds", "The longest wait between two runs of the backup's schedule; absent for a one-shot or suspended backup.", "cluster"),
		failures:         desc("backup_failures_total", "Runs of the backup that failed, as the operator recorded them.", "cluster"),
		recoveryTime: desc("backup_verify_recovery_seconds", "How long the last verified snapshot (status.lastVerified) took to serve again: "+
			"from the start of its download to the restored etcd answering a linearizable read.", "cluster"),
		maxRecoveryTime: desc("backup_verify_max_recovery_seconds", "The recovery time a verified snapshot may take (spec.verify.maxRecoveryTime); absent when unset.", "cluster"),
		archiveLag: desc("backup_archive_lag_seconds", "How long the oldest revision not yet in the continuous archive has waited (status.archive.lagSeconds): "+
			"what a loss of the cluster and the archiver together would lose now. Absent without spec.continuous.", "cluster"),
		archiveLagRevisions: desc("backup_archive_lag_revisions", "How many revisions the cluster has served that are not in the continuous archive yet.", "cluster"),
		maxArchiveLag:       desc("backup_archive_max_lag_seconds", "The archive lag the backup is held to (spec.continuous.maxLag).", "cluster"),
		archivedRevision:    desc("backup_archive_last_revision", "The newest revision a point-in-time restore can reach (status.archive.recoverableRange.last).", "cluster"),
	}
}

// Record records a backup's status as the reconcile wrote it. historyBefore is the history in
// the status the reconcile read, to count the runs that failed since.
func (bc *BackupCollector) Record(b *etcdv1alpha1.EtcdBackup, historyBefore []etcdv1alpha1.BackupRun, now time.Time) {
	values := BackupValuesOf(b, now)
	failed := NewFailures(historyBefore, b.Status.History)
	bc.entries.update(types.NamespacedName{Namespace: b.Namespace, Name: b.Name}, func(e backupEntry) backupEntry {
		e.values = values
		e.failures += float64(failed)
		return e
	})
}

// Forget removes every series of a backup that is deleted.
func (bc *BackupCollector) Forget(key types.NamespacedName) {
	bc.entries.forget(key)
}

// Describe sends every descriptor of the family.
func (bc *BackupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{bc.created, bc.lastSuccess, bc.lastSize, bc.lastDuration, bc.lastRunFailed, bc.scheduleInterval, bc.failures,
		bc.recoveryTime, bc.maxRecoveryTime, bc.archiveLag, bc.archiveLagRevisions, bc.maxArchiveLag, bc.archivedRevision} {
		ch <- d
	}
}

// Collect sends the series of every recorded backup.
func (bc *BackupCollector) Collect(ch chan<- prometheus.Metric) {
	bc.entries.each(func(key types.NamespacedName, e backupEntry) {
		out, v := emitter{ch: ch, key: key}, e.values
		out.gauge(bc.created, unixSeconds(v.Created), v.Cluster)
		if !v.LastSuccess.IsZero() {
			out.gauge(bc.lastSuccess, unixSeconds(v.LastSuccess), v.Cluster)
			out.gauge(bc.lastSize, float64(v.LastSizeBytes), v.Cluster)
			out.gauge(bc.lastDuration, v.LastDuration.Seconds(), v.Cluster)
		}
		out.gauge(bc.lastRunFailed, boolValue(v.LastRunFailed), v.Cluster)
		if v.ScheduleInterval > 0 {
			out.gauge(bc.scheduleInterval, v.ScheduleInterval.Seconds(), v.Cluster)
		}
		out.counter(bc.failures, e.failures, v.Cluster)
		if v.RecoveryTime > 0 {
			out.gauge(bc.recoveryTime, v.RecoveryTime.Seconds(), v.Cluster)
		}
		if v.MaxRecoveryTime > 0 {
			out.gauge(bc.maxRecoveryTime, v.MaxRecoveryTime.Seconds(), v.Cluster)
		}
		if v.Archiving {
			out.gauge(bc.archiveLag, v.ArchiveLag.Seconds(), v.Cluster)
			out.gauge(bc.archiveLagRevisions, float64(v.ArchiveLagRevisions), v.Cluster)
			out.gauge(bc.maxArchiveLag, v.MaxArchiveLag.Seconds(), v.Cluster)
			out.gauge(bc.archivedRevision, float64(v.ArchivedRevision), v.Cluster)
		}
	})
}
