package controllers

import (
	"slices"
	"strconv"
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
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/internal/restoreplan"
)

// inPlaceRestoreUnderWay is an in-place restore that has begun (Restoring, the replaced cluster
// on record) and the formed cluster "old" it holds, before its Job was made.
func inPlaceRestoreUnderWay(name string) (*etcdv1alpha1.EtcdRestore, *etcdv1alpha1.EtcdCluster) {
	rs := inPlaceRestore(name)
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, StartTime: ptrTime(time.Now()),
		Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "old"}}
	c := formedCluster(map[string]string{resources.AnnotationRestorePending: rs.Name})
	c.Status.ClusterID = "old"
	return rs, c
}

// completeRestoreJob has job succeed, its fetch container reporting report, as the Job
// controller and the kubelet would.
func completeRestoreJob(t *testing.T, k8s client.Client, job *batchv1.Job, report agent.Report) {
	t.Helper()
	job.Status = batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
	if err := k8s.Status().Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	succeedRestorePod(t, k8s, job, report)
}

// succeedRestorePod has job's pod succeed, its fetch container reporting report, as the kubelet
// would, before the Job controller has marked the Job Complete.
func succeedRestorePod(t *testing.T, k8s client.Client, job *batchv1.Job, report agent.Report) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x", Namespace: job.Namespace,
			Labels: map[string]string{batchv1.JobNameLabel: job.Name, resources.LabelManagedBy: "etcd-operator"}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, InitContainerStatuses: []corev1.ContainerStatus{{Name: resources.RestoreFetchContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(report.Encode())}}}}},
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

func restoreJobOf(t *testing.T, k8s client.Client, rs *etcdv1alpha1.EtcdRestore) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: rs.Namespace, Name: resources.RestoreJobName(rs.Name, 0)}, job); err != nil {
		t.Fatalf("no restore Job: %v", err)
	}
	return job
}

func etcdutlArgs(job *batchv1.Job) []string {
	for _, c := range job.Spec.Template.Spec.InitContainers {
		if c.Name == resources.RestoreEtcdutlContainer {
			return c.Args
		}
	}
	return nil
}

// An in-place restore starts the restored data past the highest revision the operator saw the
// cluster reach, measured from the oldest snapshot the Job may fall back to, and records the
// bump; Kubernetes' watch caches and informers would otherwise be handed revisions again that
// they hold with other data. Before, every restore went back to the snapshot's revision.
func TestInPlaceRestoreBumpsPastTheHighestRevisionSeen(t *testing.T) {
	backup, artifacts := nightlyWithThreeSnapshots()
	rs, c := inPlaceRestoreUnderWay("bump")
	rs.Spec.Source = etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name}}
	c.Status.HighestRevision = 10_000_000
	r, k8s := restoreReconciler(t, rs, c, backup)

	reconcileRestore(t, r, rs)
	job := restoreJobOf(t, k8s, rs)
	oldest := artifacts[len(artifacts)-1].Revision
	want, _ := restoreplan.RevisionBump(restoreplan.BumpAuto, restoreplan.Revision{Snapshot: oldest, HighestSeen: 10_000_000})
	if args := etcdutlArgs(job); !slices.Contains(args, "--bump-revision="+strconv.FormatInt(want, 10)) || !slices.Contains(args, "--mark-compacted") {
		t.Fatalf("etcdutl args %v: want --bump-revision=%d --mark-compacted", args, want)
	}

	completeRestoreJob(t, k8s, job, agent.Report{Restore: &agent.RestoreResult{URI: artifacts[0].URI, SizeBytes: 1, SHA256: artifacts[0].SHA256, Revision: artifacts[0].Revision}})
	got := reconcileRestore(t, r, rs)
	if got.Status.RevisionBump != want || ptr.Deref(got.Status.RestoredRevision, 0) != artifacts[0].Revision {
		t.Errorf("status: revision %d bumped by %d, want %d bumped by %d", ptr.Deref(got.Status.RestoredRevision, 0), got.Status.RevisionBump, artifacts[0].Revision, want)
	}
}

// The old cluster serves on while the snapshot is staged. Should it reach the revision the
// restored data would start from, the cut-over is refused and nothing is touched: the restored
// cluster would hand that revision out again. Without the check the cut-over went ahead.
func TestInPlaceRestoreRefusesACutOverTheClusterWrotePast(t *testing.T) {
	rs, c := inPlaceRestoreUnderWay("overtaken")
	c.Status.HighestRevision = 500
	r, k8s := restoreReconciler(t, rs, c)

	reconcileRestore(t, r, rs)
	job := restoreJobOf(t, k8s, rs)
	completeRestoreJob(t, k8s, job, agent.Report{Restore: &agent.RestoreResult{URI: "pvc://backups/snap.db", SizeBytes: 1, SHA256: "x", Revision: 400}})
	got := reconcileRestore(t, r, rs) // records what the Job restored
	if got.Status.RevisionBump != restoreplan.MinAutoBump {
		t.Fatalf("bump %d, want %d", got.Status.RevisionBump, restoreplan.MinAutoBump)
	}
	live := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), live); err != nil {
		t.Fatal(err)
	}
	live.Status.HighestRevision = 400 + restoreplan.MinAutoBump // a very busy cluster
	if err := k8s.Status().Update(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	got = reconcileRestore(t, r, got)
	if got.Status.Phase != etcdv1alpha1.RestoreFailed || !strings.Contains(failureOf(got), "was not touched") {
		t.Errorf("phase %s (%s): want Failed, the cluster not touched", got.Status.Phase, failureOf(got))
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), live); err != nil {
		t.Fatal(err)
	}
	if _, cut := live.Annotations[resources.AnnotationRestoreSeed]; cut {
		t.Errorf("the cluster was cut over: %v", live.Annotations)
	}
}

// etcd before 3.5.10 cannot bump a restored revision: a restore that would is refused before
// anything is made, saying what to do; None restores as before.
func TestRevisionBumpNeedsEtcd3510(t *testing.T) {
	for _, tc := range []struct {
		bump   string
		failed bool
	}{{restoreplan.BumpAuto, true}, {"5000", true}, {restoreplan.BumpNone, false}} {
		rs, c := inPlaceRestoreUnderWay("old-etcd")
		rs.Spec.RevisionBump = tc.bump
		c.Spec.Version = "3.5.9"
		r, k8s := restoreReconciler(t, rs, c)
		got := reconcileRestore(t, r, rs)
		err := k8s.Get(t.Context(), client.ObjectKey{Namespace: rs.Namespace, Name: resources.RestoreJobName(rs.Name, 0)}, &batchv1.Job{})
		if failed := got.Status.Phase == etcdv1alpha1.RestoreFailed; failed != tc.failed || (failed && !strings.Contains(failureOf(got), "3.5.10")) || (err == nil) == tc.failed {
			t.Errorf("revisionBump %s on etcd 3.5.9: phase %s (%s), Job made: %t", tc.bump, got.Status.Phase, failureOf(got), err == nil)
		}
		if !tc.failed && slices.Contains(etcdutlArgs(restoreJobOf(t, k8s, rs)), "--mark-compacted") {
			t.Errorf("revisionBump None: etcdutl bumps anyway")
		}
	}
}

// failureOf is the message of a restore's Succeeded condition.
func failureOf(rs *etcdv1alpha1.EtcdRestore) string {
	if cond := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); cond != nil {
		return cond.Message
	}
	return ""
}
