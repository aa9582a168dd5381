package metrics

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
)

func backup(schedule string, history ...etcdv1alpha1.BackupRun) *etcdv1alpha1.EtcdBackup {
	b := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	b.Spec.ClusterName, b.Spec.Schedule = "etcd", schedule
	b.Status.History = history
	return b
}

func TestBackupValuesOfStatus(t *testing.T) {
	completed := func() *etcdv1alpha1.EtcdBackup {
		b := backup("@every 1h", etcdv1alpha1.BackupRun{Job: "j2", Phase: etcdv1alpha1.BackupFailed}, etcdv1alpha1.BackupRun{Job: "j1", Phase: etcdv1alpha1.BackupCompleted})
		b.Status.LastBackup = &etcdv1alpha1.BackupArtifact{SizeBytes: 4096, StartTime: metav1.NewTime(t0), CompletionTime: metav1.NewTime(t0.Add(90 * time.Second))}
		return b
	}
	suspended := completed()
	suspended.Spec.Suspend = true
	tests := []struct {
		name string
		b    *etcdv1alpha1.EtcdBackup
		want BackupValues
	}{{
		name: "a one-shot backup not run yet",
		b:    backup(""),
		want: BackupValues{Cluster: "etcd", Created: t0.Add(-time.Hour)},
	}, {
		name: "a scheduled backup whose newest run failed after one that completed",
		b:    completed(),
		want: BackupValues{Cluster: "etcd", Created: t0.Add(-time.Hour), LastSuccess: t0.Add(90 * time.Second), LastSizeBytes: 4096,
			LastDuration: 90 * time.Second, LastRunFailed: true, ScheduleInterval: time.Hour},
	}, {
		name: "suspended: no schedule to be late on",
		b:    suspended,
		want: BackupValues{Cluster: "etcd", Created: t0.Add(-time.Hour), LastSuccess: t0.Add(90 * time.Second), LastSizeBytes: 4096,
			LastDuration: 90 * time.Second, LastRunFailed: true},
	}, {
		name: "weekdays at two: the weekend is the longest wait",
		b:    backup("0 2 * * 1-5"),
		want: BackupValues{Cluster: "etcd", Created: t0.Add(-time.Hour), ScheduleInterval: 72 * time.Hour},
	}, {
		name: "a schedule that does not parse",
		b:    backup("every day"),
		want: BackupValues{Cluster: "etcd", Created: t0.Add(-time.Hour)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BackupValuesOf(tt.b, t0); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("BackupValuesOf:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestLongestIntervalOfASteadySchedule(t *testing.T) {
	sched, err := backupplan.ParseSchedule("*/15 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	if got := longestInterval(sched.Next, t0); got != 15*time.Minute {
		t.Errorf("longestInterval = %v, want 15m", got)
	}
}

func TestNewFailuresCountsFailedRunsNotSeenBefore(t *testing.T) {
	run := func(job string, phase etcdv1alpha1.BackupPhase) etcdv1alpha1.BackupRun {
		return etcdv1alpha1.BackupRun{Job: job, Phase: phase}
	}
	before := []etcdv1alpha1.BackupRun{run("j2", etcdv1alpha1.BackupFailed), run("j1", etcdv1alpha1.BackupCompleted)}
	after := append([]etcdv1alpha1.BackupRun{run("j4", etcdv1alpha1.BackupFailed), run("j3", etcdv1alpha1.BackupCompleted)}, before...)
	if got := NewFailures(before, after); got != 1 {
		t.Errorf("NewFailures = %d, want 1: j2 failed before and is counted already", got)
	}
	if got := NewFailures(after, after[:2]); got != 0 {
		t.Errorf("NewFailures over a trimmed history = %d, want 0", got)
	}
}

func TestBackupSeriesCountFailuresAndGoWithTheBackup(t *testing.T) {
	bc := newBackupCollector()
	b := backup("@every 1h")
	bc.Record(b, nil, t0)
	failedOnce := b.DeepCopy()
	failedOnce.Status.History = []etcdv1alpha1.BackupRun{{Job: "j1", Phase: etcdv1alpha1.BackupFailed}}
	bc.Record(failedOnce, b.Status.History, t0)
	bc.Record(failedOnce, failedOnce.Status.History, t0) // an idle reconcile counts nothing

	want := `
# HELP etcd_operator_backup_failures_total Runs of the backup that failed, as the operator recorded them.
# TYPE etcd_operator_backup_failures_total counter
etcd_operator_backup_failures_total{cluster="etcd",name="nightly",namespace="ns"} 1
# HELP etcd_operator_backup_last_run_failed 1 when the newest run failed, 0 otherwise.
# TYPE etcd_operator_backup_last_run_failed gauge
etcd_operator_backup_last_run_failed{cluster="etcd",name="nightly",namespace="ns"} 1
# HELP etcd_operator_backup_schedule_interval_seconds The longest wait between two runs of the backup's schedule; absent for a one-shot or suspended backup.
# TYPE etcd_operator_backup_schedule_interval_seconds gauge
etcd_operator_backup_schedule_interval_seconds{cluster="etcd",name="nightly",namespace="ns"} 3600
`
	if err := testutil.CollectAndCompare(bc, strings.NewReader(want), "etcd_operator_backup_failures_total",
		"etcd_operator_backup_last_run_failed", "etcd_operator_backup_schedule_interval_seconds", "etcd_operator_backup_last_success_timestamp_seconds"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(bc); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	bc.Forget(types.NamespacedName{Namespace: "ns", Name: "nightly"})
	if n := testutil.CollectAndCount(bc); n != 0 {
		t.Errorf("%d series of a forgotten backup remain", n)
	}
}

// A verified snapshot's recovery time and the bound it is held to are series of their own, so
// that an alert compares the two; each is absent while status or spec has none.
func TestBackupSeriesCarryTheRecoveryTimeAndItsBound(t *testing.T) {
	bc := newBackupCollector()
	b := backup("@every 1h")
	bc.Record(b, nil, t0)
	families := []string{"etcd_operator_backup_verify_recovery_seconds", "etcd_operator_backup_verify_max_recovery_seconds"}
	if err := testutil.CollectAndCompare(bc, strings.NewReader(""), families...); err != nil {
		t.Errorf("neither verified nor bounded: %v", err)
	}
	b.Spec.Verify = &etcdv1alpha1.BackupVerification{MaxRecoveryTime: &metav1.Duration{Duration: 2 * time.Minute}}
	b.Status.LastVerified = &etcdv1alpha1.SnapshotVerification{RecoveryTime: &metav1.Duration{Duration: 2500 * time.Millisecond}}
	bc.Record(b, nil, t0)
	want := `
# HELP etcd_operator_backup_verify_max_recovery_seconds The recovery time a verified snapshot may take (spec.verify.maxRecoveryTime); absent when unset.
# TYPE etcd_operator_backup_verify_max_recovery_seconds gauge
etcd_operator_backup_verify_max_recovery_seconds{cluster="etcd",name="nightly",namespace="ns"} 120
# HELP etcd_operator_backup_verify_recovery_seconds How long the last verified snapshot (status.lastVerified) took to serve again: from the start of its download to the restored etcd answering a linearizable read.
# TYPE etcd_operator_backup_verify_recovery_seconds gauge
etcd_operator_backup_verify_recovery_seconds{cluster="etcd",name="nightly",namespace="ns"} 2.5
`
	if err := testutil.CollectAndCompare(bc, strings.NewReader(want), families...); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(bc); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// A continuous archive's lag, its bound and the newest revision it holds are series of their
// own, so that an alert compares the lag with its bound; all absent without spec.continuous.
func TestBackupSeriesCarryTheArchiveLagAndItsBound(t *testing.T) {
	bc := newBackupCollector()
	b := backup("@every 1h")
	b.Status.Archive = &etcdv1alpha1.BackupArchiveStatus{LagSeconds: 3, LagRevisions: 40,
		RecoverableRange: &etcdv1alpha1.ArchiveRange{Last: etcdv1alpha1.ArchivePoint{Revision: 900}}}
	bc.Record(b, nil, t0)
	families := []string{"etcd_operator_backup_archive_lag_seconds", "etcd_operator_backup_archive_lag_revisions",
		"etcd_operator_backup_archive_max_lag_seconds", "etcd_operator_backup_archive_last_revision"}
	if err := testutil.CollectAndCompare(bc, strings.NewReader(""), families...); err != nil {
		t.Errorf("without spec.continuous: %v", err)
	}
	b.Spec.Continuous = &etcdv1alpha1.ContinuousArchive{MaxLag: &metav1.Duration{Duration: 5 * time.Minute}}
	bc.Record(b, nil, t0)
	want := `
# HELP etcd_operator_backup_archive_lag_revisions How many revisions the cluster has served that are not in the continuous archive yet.
# TYPE etcd_operator_backup_archive_lag_revisions gauge
etcd_operator_backup_archive_lag_revisions{cluster="etcd",name="nightly",namespace="ns"} 40
# HELP etcd_operator_backup_archive_lag_seconds How long the oldest revision not yet in the continuous archive has waited (status.archive.lagSeconds): what a loss of the cluster and the archiver together would lose now. Absent without spec.continuous.
# TYPE etcd_operator_backup_archive_lag_seconds gauge
etcd_operator_backup_archive_lag_seconds{cluster="etcd",name="nightly",namespace="ns"} 3
# HELP etcd_operator_backup_archive_last_revision The newest revision a point-in-time restore can reach (status.archive.recoverableRange.last).
# TYPE etcd_operator_backup_archive_last_revision gauge
etcd_operator_backup_archive_last_revision{cluster="etcd",name="nightly",namespace="ns"} 900
# HELP etcd_operator_backup_archive_max_lag_seconds The archive lag the backup is held to (spec.continuous.maxLag).
# TYPE etcd_operator_backup_archive_max_lag_seconds gauge
etcd_operator_backup_archive_max_lag_seconds{cluster="etcd",name="nightly",namespace="ns"} 300
`
	if err := testutil.CollectAndCompare(bc, strings.NewReader(want), families...); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(bc); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}
