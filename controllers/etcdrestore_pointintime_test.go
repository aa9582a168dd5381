package controllers

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/internal/restoreplan"
)

// archivedNightly is nightlyWithThreeSnapshots archiving continuously: revisions 1 to 40 in
// one lineage, a gap, then 60 to 90 in the next; the archive last saw the cluster at 95.
func archivedNightly() *etcdv1alpha1.EtcdBackup {
	b, _ := nightlyWithThreeSnapshots()
	b.Spec.Schedule = "@hourly"
	b.Spec.Continuous = &etcdv1alpha1.ContinuousArchive{}
	b.Status.Archive = &etcdv1alpha1.BackupArchiveStatus{
		EarlierRanges:    []etcdv1alpha1.ArchiveRange{{Lineage: "a", First: etcdv1alpha1.ArchivePoint{Revision: 1}, Last: etcdv1alpha1.ArchivePoint{Revision: 40}}},
		RecoverableRange: &etcdv1alpha1.ArchiveRange{Lineage: "b", First: etcdv1alpha1.ArchivePoint{Revision: 60}, Last: etcdv1alpha1.ArchivePoint{Revision: 90}},
		HighestRevision:  95,
	}
	return b
}

func pointInTimeRestore(name string, pit etcdv1alpha1.PointInTimeSource) *etcdv1alpha1.EtcdRestore {
	rs := inPlaceRestore(name)
	rs.Spec.Source = etcdv1alpha1.RestoreSource{PointInTime: &pit}
	return rs
}

// pointInTimeJobOf is the Job building rs's point, and the configuration its agent reads.
func pointInTimeJobOf(t *testing.T, k8s client.Client, rs *etcdv1alpha1.EtcdRestore) (*batchv1.Job, jobspec.JobConfig) {
	t.Helper()
	job := &batchv1.Job{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: rs.Namespace, Name: resources.PointInTimeJobName(rs.Name)}, job); err != nil {
		t.Fatalf("no point-in-time Job: %v", err)
	}
	return job, jobConfig(t, job)
}

// finishPointInTimeJob ends job as the Job controller and the kubelet would: its container
// name terminated with exit code and report, the Job Complete or Failed.
func finishPointInTimeJob(t *testing.T, k8s client.Client, job *batchv1.Job, container string, exitCode int32, report agent.Report) {
	t.Helper()
	condition := batchv1.JobComplete
	if exitCode != 0 {
		condition = batchv1.JobFailed
	}
	job.Status = batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: condition, Status: corev1.ConditionTrue}}}
	if err := k8s.Status().Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	status := corev1.ContainerStatus{Name: container, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, Message: string(report.Encode())}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x", Namespace: job.Namespace,
			Labels: map[string]string{batchv1.JobNameLabel: job.Name, resources.LabelManagedBy: "etcd-operator"}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{status}},
	}
	if container == resources.PointInTimeFetchContainer {
		pod.Status.Phase, pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses = corev1.PodFailed, nil, []corev1.ContainerStatus{status}
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// A point-in-time restore first has a Job build the keyspace at its point (the revision before
// the one named, inclusive false), touching nothing meanwhile; once the Job has saved it, the
// restore restores that snapshot like any other, bumping past the highest revision the
// archive saw the cluster serve.
func TestPointInTimeRestoreRestoresTheSnapshotItsJobBuilt(t *testing.T) {
	backup := archivedNightly()
	rs := pointInTimeRestore("undo", etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: ptr.To[int64](75), Inclusive: ptr.To(false)})
	c := formedCluster(nil)
	r, k8s := restoreReconciler(t, rs, c, backup)

	got := reconcileRestore(t, r, rs)
	job, cfg := pointInTimeJobOf(t, k8s, rs)
	if cfg.TargetRevision != 74 || cfg.TargetTime != nil || cfg.RestoreUID != string(rs.UID) || len(cfg.Recorded) != 3 {
		t.Errorf("the Job builds revision %d (time %v) for %q from %d recorded snapshots; want revision 74, the one before 75, for %q from 3",
			cfg.TargetRevision, cfg.TargetTime, cfg.RestoreUID, len(cfg.Recorded), rs.UID)
	}
	if got.Status.Phase != etcdv1alpha1.RestorePending || !strings.Contains(failureOf(got), "just before revision 75") || got.Status.Replaced != nil {
		t.Fatalf("phase %s (%s), replaced %+v: want Pending while the point is built, the cluster untouched", got.Status.Phase, failureOf(got), got.Status.Replaced)
	}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: rs.Namespace, Name: resources.RestoreJobName(rs.Name, 0)}, &batchv1.Job{}); err == nil {
		t.Fatal("a restore Job was made before the point was built")
	}

	built := "ns/c/nightly_backup-uid/pitr/" + string(rs.UID) + "-r74.db"
	finishPointInTimeJob(t, k8s, job, resources.PointInTimeReplayContainer, 0, agent.Report{PointInTime: &agent.PointInTimeResult{
		Key: built, SHA256: strings.Repeat("e", 64), SizeBytes: 1, Revision: 74, BaseKey: "ns/c/nightly_backup-uid/20260301T020000Z-r2.db", BaseRevision: 60,
		Lineage: "b", ReplayedRevisions: 14,
	}})
	got = reconcileRestore(t, r, got)
	pit := got.Status.PointInTime
	if pit == nil || pit.Revision != 74 || pit.BaseRevision != 60 || pit.ReplayedRevisions != 14 || pit.Lineage != "b" || got.Status.SnapshotURI != "pvc://backups/"+built {
		t.Fatalf("status.pointInTime %+v, snapshotURI %s; want what the Job built recorded", pit, got.Status.SnapshotURI)
	}
	got = reconcileRestore(t, r, got)
	restoreJob := restoreJobOf(t, k8s, got)
	restoreCfg := jobConfig(t, restoreJob)
	if restoreCfg.Key != built || restoreCfg.SHA256 != strings.Repeat("e", 64) {
		t.Errorf("the restore Job fetches %s (sha256 %s), want the built snapshot %s", restoreCfg.Key, restoreCfg.SHA256, built)
	}
	want, _ := restoreplan.RevisionBump(restoreplan.BumpAuto, restoreplan.Revision{Snapshot: 74, HighestSeen: 95})
	if jobRevisionBump(restoreJob) != want {
		t.Errorf("bump %d, want %d: past the highest revision the archive saw the cluster serve", jobRevisionBump(restoreJob), want)
	}
	if restoreCfg.RevisionBump != want || restoreCfg.WatermarkDir != "ns/c/nightly_backup-uid/" {
		t.Errorf("the fetch checks bump %d against the watermarks in %q, want %d against the series' directory's", restoreCfg.RevisionBump, restoreCfg.WatermarkDir, want)
	}
}

// A point the archive cannot reach is refused before anything is made: a revision in the gap
// between two lineages by what status says, and what the Job finds (a permanent refusal of its
// fetch) as PointNotRecoverable with the Job's words.
func TestPointInTimeRestoreRefusesAPointTheArchiveCannotReach(t *testing.T) {
	t.Run("in a gap", func(t *testing.T) {
		backup := archivedNightly()
		rs := pointInTimeRestore("gap", etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: ptr.To[int64](50)})
		r, k8s := restoreReconciler(t, rs, formedCluster(nil), backup)
		got := reconcileRestore(t, r, rs)
		if got.Status.Phase != etcdv1alpha1.RestoreFailed || !strings.Contains(failureOf(got), "revision 50 lies in no recoverable range") || !strings.Contains(failureOf(got), "1 to 40, 60 to 90") {
			t.Fatalf("phase %s (%s): want Failed naming the ranges", got.Status.Phase, failureOf(got))
		}
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: rs.Namespace, Name: resources.PointInTimeJobName(rs.Name)}, &batchv1.Job{}); err == nil {
			t.Error("a point-in-time Job was made for a point in a gap")
		}
	})
	t.Run("refused by the Job", func(t *testing.T) {
		backup := archivedNightly()
		rs := pointInTimeRestore("based", etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: ptr.To[int64](70)})
		r, k8s := restoreReconciler(t, rs, formedCluster(nil), backup)
		got := reconcileRestore(t, r, rs)
		job, _ := pointInTimeJobOf(t, k8s, rs)
		finishPointInTimeJob(t, k8s, job, resources.PointInTimeFetchContainer, 1, agent.Report{Permanent: true, Error: "no snapshot of lineage b at or before revision 70 is left in the destination"})
		got = reconcileRestore(t, r, got)
		if got.Status.Phase != etcdv1alpha1.RestoreFailed || !strings.Contains(failureOf(got), "no snapshot of lineage b at or before revision 70") {
			t.Fatalf("phase %s (%s): want Failed with the Job's words", got.Status.Phase, failureOf(got))
		}
		if cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded); cond.Reason != etcdv1alpha1.ReasonPointNotRecoverable {
			t.Errorf("reason %s, want %s", cond.Reason, etcdv1alpha1.ReasonPointNotRecoverable)
		}
	})
	t.Run("past what the cluster has served", func(t *testing.T) {
		backup := archivedNightly()
		backup.Status.Archive.ObservedTime = ptrTime(time.Now().Add(time.Minute))
		rs := pointInTimeRestore("future", etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: ptr.To[int64](96)})
		rs.CreationTimestamp = metav1.Now()
		r, _ := restoreReconciler(t, rs, formedCluster(nil), backup)
		got := reconcileRestore(t, r, rs)
		if got.Status.Phase != etcdv1alpha1.RestoreFailed || !strings.Contains(failureOf(got), "revision 96 is past the highest the cluster had served, 95") {
			t.Fatalf("phase %s (%s): want Failed, the revision never served", got.Status.Phase, failureOf(got))
		}
	})
	t.Run("a backup that archives nothing", func(t *testing.T) {
		backup, _ := nightlyWithThreeSnapshots()
		rs := pointInTimeRestore("plain", etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: ptr.To[int64](2)})
		r, _ := restoreReconciler(t, rs, formedCluster(nil), backup)
		got := reconcileRestore(t, r, rs)
		if got.Status.Phase != etcdv1alpha1.RestoreFailed || !strings.Contains(failureOf(got), "spec.continuous is not set") {
			t.Fatalf("phase %s (%s): want Failed saying the backup archives nothing", got.Status.Phase, failureOf(got))
		}
	})
}

// A point the archiver has not written yet (asked for seconds after a mistake) is waited for,
// touching nothing, rather than refused: a revision past the newest archived, or a time past the
// newest archived revision's until a report after that time says nothing waits in the archiver.
func TestPointInTimeRestoreWaitsForTheArchiveToReachItsPoint(t *testing.T) {
	backup := archivedNightly()
	lastSeen := time.Date(2026, 3, 1, 14, 0, 0, 0, time.UTC)
	backup.Status.Archive.RecoverableRange.Last.Time = metav1.NewTime(lastSeen)
	backup.Status.Archive.ObservedTime = ptrTime(lastSeen.Add(10 * time.Second))
	backup.Status.Archive.LagRevisions = 2
	for name, pit := range map[string]etcdv1alpha1.PointInTimeSource{
		"revision": {Backup: backup.Name, Revision: ptr.To[int64](93)},
		"time":     {Backup: backup.Name, Time: &metav1.Time{Time: lastSeen.Add(5 * time.Second)}},
	} {
		t.Run(name, func(t *testing.T) {
			rs := pointInTimeRestore("soon-"+name, pit)
			r, k8s := restoreReconciler(t, rs, formedCluster(nil), backup)
			got := reconcileRestore(t, r, rs)
			if cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded); got.Status.Phase != etcdv1alpha1.RestorePending ||
				cond == nil || cond.Reason != etcdv1alpha1.ReasonWaitingForSource || !strings.Contains(cond.Message, "so far, not yet") {
				t.Fatalf("phase %s, Succeeded %+v: want Pending, waiting for the archive", got.Status.Phase, cond)
			}
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: rs.Namespace, Name: resources.PointInTimeJobName(rs.Name)}, &batchv1.Job{}); err == nil {
				t.Error("a point-in-time Job was made before the archive held the point")
			}
		})
	}
	t.Run("a time the archiver has caught up past", func(t *testing.T) {
		caughtUp := backup.DeepCopy()
		caughtUp.Status.Archive.LagRevisions = 0
		rs := pointInTimeRestore("caught-up", etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Time: &metav1.Time{Time: lastSeen.Add(5 * time.Second)}})
		r, k8s := restoreReconciler(t, rs, formedCluster(nil), caughtUp)
		reconcileRestore(t, r, rs)
		if _, cfg := pointInTimeJobOf(t, k8s, rs); cfg.TargetTime == nil || !cfg.TargetTime.Equal(lastSeen.Add(5*time.Second)) {
			t.Errorf("the Job builds time %v, want %v", cfg.TargetTime, lastSeen.Add(5*time.Second))
		}
	})
}

// A scratch member that cannot serve the point's base (an etcd older than the one that wrote
// it, as when the source was upgraded after the target's version) exits again and again; the
// restore fails saying so, rather than waiting for it for ever. Seen in the day-two matrix: a
// cluster upgraded to 3.7, restored to a point into a 3.6 cluster, waited with "building".
func TestPointInTimeRestoreFailsWhenItsScratchMemberCannotServeTheBase(t *testing.T) {
	backup := archivedNightly()
	rs := pointInTimeRestore("older", etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: ptr.To[int64](70)})
	rs.Spec.Target = etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: "copy", Cluster: &etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16"}}
	r, k8s := restoreReconciler(t, rs, backup)
	got := reconcileRestore(t, r, rs)
	job, _ := pointInTimeJobOf(t, k8s, rs)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x", Namespace: job.Namespace,
			Labels: map[string]string{batchv1.JobNameLabel: job.Name, resources.LabelManagedBy: "etcd-operator"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{
			Name: resources.PointInTimeEtcdContainer, RestartCount: 3,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
				Message: `{"level":"fatal","msg":"discovery failed","error":"version \"3.7.0\" is not supported"}`}},
		}}},
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	got = reconcileRestore(t, r, got)
	if msg := failureOf(got); got.Status.Phase != etcdv1alpha1.RestoreFailed || !strings.Contains(msg, `version \"3.7.0\" is not supported`) ||
		!strings.Contains(msg, "written by a newer etcd than 3.6.16") {
		t.Fatalf("phase %s (%s): want Failed, saying the scratch member cannot read the base", got.Status.Phase, msg)
	}
}
