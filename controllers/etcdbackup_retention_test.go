package controllers

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// retentionFixture is a scheduled EtcdBackup, hourly, whose Jobs are played by a destination
// of its own: each run writes its snapshot there and applies retention as the agent does,
// from the configuration its Job was given.
type retentionFixture struct {
	*scheduleFixture
	created time.Time
	// snapshots in the destination, by URI, with the time their names carry.
	snapshots map[string]time.Time
}

func newRetentionFixture(t *testing.T, retention etcdv1alpha1.BackupRetention) *retentionFixture {
	t.Helper()
	created := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	f := &retentionFixture{scheduleFixture: newScheduleFixture(t, "@every 1h", created), created: created, snapshots: map[string]time.Time{}}
	b := f.get(t)
	b.Spec.Retention = &retention
	if err := f.k8s.Update(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	return f
}

// series is the fixture's EtcdBackup as its snapshots' names carry it.
var series = backupplan.Series{Namespace: "ns", Cluster: "c", Backup: "sched", UID: "backup-uid"}

// runJob starts run n (at n hours after the EtcdBackup's creation) and plays its Job: the
// snapshot is written, retention applied, and the Job completes. With reported, its pod leaves
// the agent's report, the pruned snapshots listed only if listed (else counted, as when the
// list does not fit a termination message); without, the report is lost. It returns the
// Job's configuration and the snapshot.
func (f *retentionFixture) runJob(t *testing.T, n int, reported, listed bool) (jobspec.JobConfig, string) {
	t.Helper()
	at := f.created.Add(time.Duration(n) * time.Hour)
	f.runAt(t, at)
	job := &batchv1.Job{}
	if err := f.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.BackupJobName("sched", at)}, job); err != nil {
		t.Fatalf("run %d: %v", n, err)
	}
	cfg := jobConfig(t, job)

	uri := backupplan.ObjectName("pvc://backups/", series, at, int64(n))
	f.snapshots[uri] = at
	var listing []backupplan.Snapshot
	for key, when := range f.snapshots {
		listing = append(listing, backupplan.Snapshot{Key: key, Time: when})
	}
	pruned := backupplan.ToPrune(listing, cfg.MaxCount, cfg.MaxAge, at, []string{uri, cfg.LastBackup})
	for _, key := range pruned {
		delete(f.snapshots, key)
	}

	pod := &corev1.Pod{}
	if err := f.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: job.Name + "-pod"}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded}
	if reported {
		res := agent.BackupResult{URI: uri, SizeBytes: 10, SHA256: "abc", Revision: int64(n), StartTime: at, CompletionTime: at.Add(time.Second), Pruned: pruned}
		if !listed {
			res.Pruned, res.PrunedCount = nil, len(pruned)
		}
		report := agent.Report{Backup: &res}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: resources.BackupContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(report.Encode())}}}}
	}
	job.Status = batchv1.JobStatus{StartTime: ptrTime(at), CompletionTime: ptrTime(at.Add(time.Second)),
		Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
	if err := f.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if err := f.k8s.Status().Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	return cfg, uri
}

// record reconciles after run n's Job has ended, past the wait for a report that is lost.
func (f *retentionFixture) record(t *testing.T, n int) {
	t.Helper()
	f.runAt(t, f.created.Add(time.Duration(n)*time.Hour+reportGrace+time.Minute))
	if b := f.get(t); len(b.Status.History) == 0 || b.Status.History[0].Job != resources.BackupJobName("sched", f.created.Add(time.Duration(n)*time.Hour)) {
		t.Fatalf("run %d is not recorded: history %+v", n, b.Status.History)
	}
}

// missingLastBackup is status.lastBackup's URI if the destination does not hold it.
func (f *retentionFixture) missingLastBackup(b *etcdv1alpha1.EtcdBackup) string {
	if last := b.Status.LastBackup; last != nil {
		if _, ok := f.snapshots[last.URI]; !ok {
			return last.URI
		}
	}
	return ""
}

// missingNamed are the snapshots status names (status.lastBackup, the history's artifacts) that
// the destination does not hold.
func (f *retentionFixture) missingNamed(b *etcdv1alpha1.EtcdBackup) []string {
	var missing []string
	if last := f.missingLastBackup(b); last != "" {
		missing = append(missing, "status.lastBackup "+last)
	}
	for _, run := range b.Status.History {
		if a := run.Artifact; a != nil {
			if _, ok := f.snapshots[a.URI]; !ok {
				missing = append(missing, "run "+run.Job+"'s "+a.URI)
			}
		}
	}
	return missing
}

// status.lastBackup names a snapshot that exists at every moment, the history after each
// record, and the destination holds exactly maxCount after each run (with maxCount 1, the one
// before too): each backup Job is told the snapshot status.lastBackup names as written, which
// its retention keeps while the run is under way, and recording a run takes out of the history
// the snapshots retention deleted, here found from the retention itself, as the runs' reports
// only count what they pruned. Before, a run with maxCount 1 deleted the snapshot
// status.lastBackup named until the run was recorded, and the history named every snapshot
// retention had deleted.
func TestStatusNamesOnlySnapshotsThatExist(t *testing.T) {
	for _, maxCount := range []int32{1, 2} {
		f := newRetentionFixture(t, etcdv1alpha1.BackupRetention{MaxCount: ptr.To(maxCount)})
		var last string
		for n := 1; n <= 5; n++ {
			cfg, uri := f.runJob(t, n, true, false)
			if missing := f.missingLastBackup(f.get(t)); missing != "" {
				t.Fatalf("maxCount %d: before run %d is recorded, status.lastBackup names %s, which the destination does not hold", maxCount, n, missing)
			}
			if cfg.LastBackup != last {
				t.Fatalf("maxCount %d: run %d's Job keeps %q, want %q, the snapshot status.lastBackup names", maxCount, n, cfg.LastBackup, last)
			}
			f.record(t, n)
			b := f.get(t)
			if missing := f.missingNamed(b); len(missing) > 0 {
				t.Fatalf("maxCount %d: after run %d, status names %v, which the destination does not hold", maxCount, n, missing)
			}
			if want := min(n, max(int(maxCount), 2)); len(f.snapshots) != want {
				t.Fatalf("maxCount %d: after run %d the destination holds %v, want %d", maxCount, n, slices.Sorted(maps.Keys(f.snapshots)), want)
			}
			if b.Status.LastBackup == nil || b.Status.LastBackup.URI != uri {
				t.Fatalf("maxCount %d: after run %d status.lastBackup is %+v, want %s", maxCount, n, b.Status.LastBackup, uri)
			}
			last = uri
		}
		for _, run := range f.get(t).Status.History[max(int(maxCount), 2):] {
			if run.Phase != etcdv1alpha1.BackupCompleted || run.Artifact != nil || !strings.Contains(run.Message, "retention deleted") {
				t.Errorf("maxCount %d: run %s, whose snapshot retention deleted, reads %+v", maxCount, run.Job, run)
			}
		}
	}
}

// A run whose report was lost wrote a snapshot status does not name, so retention over the
// destination deletes more than retention over what status names: the run that deletes the
// oldest named one lists it in its report, and the record takes it out of the history. Before,
// the history went on naming it.
func TestHistoryForgetsWhatARunReportsItPruned(t *testing.T) {
	f := newRetentionFixture(t, etcdv1alpha1.BackupRetention{MaxCount: ptr.To[int32](3)})
	_, first := f.runJob(t, 1, true, true)
	f.record(t, 1)
	f.runJob(t, 2, true, true)
	f.record(t, 2)
	f.runJob(t, 3, false, false) // its snapshot is written, its report lost
	f.record(t, 3)
	f.runJob(t, 4, true, true) // the 4th in the destination: the first goes
	f.record(t, 4)

	if _, ok := f.snapshots[first]; ok {
		t.Fatalf("the destination still holds %s: the scenario needs run 4 to have pruned it", first)
	}
	if missing := f.missingNamed(f.get(t)); len(missing) > 0 {
		t.Fatalf("status names %v, which the destination does not hold", missing)
	}
}
