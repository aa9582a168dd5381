package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A finished run is written to status before its Job, the only other record of it, is
// deleted: a status write that conflicts leaves the Job for the next reconcile, which records
// the run. Before, the Job was deleted first and the conflicting write dropped: the snapshot
// went unrecorded, and a one-shot backup, with no history, would have run again.
func TestFinishedRunIsRecordedBeforeItsJobIsDeleted(t *testing.T) {
	finished := time.Now().Add(-time.Minute)
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "ns", UID: "backup-uid", CreationTimestamp: metav1.NewTime(finished.Add(-time.Minute))},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c",
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "once-run", Namespace: "ns", UID: "job-uid", Labels: map[string]string{resources.LabelBackup: "once"},
			Annotations: map[string]string{resources.AnnotationClusterUID: "cluster-uid"}},
		Status: batchv1.JobStatus{CompletionTime: ptrTime(finished),
			Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}},
	}
	if err := ctrl.SetControllerReference(backup, job, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	report := agent.Report{Backup: &agent.BackupResult{URI: "pvc://backups/ns/c/once_backup-uid/x.db", SizeBytes: 10, SHA256: "abc", Revision: 7,
		Keyspace: &etcdv1alpha1.SnapshotKeyspace{Revision: 7, HashKV: 12345, CompactRevision: 3, KeyCount: 4}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "once-run-pod", Namespace: "ns", Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: resources.BackupContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(report.Encode())}}}}},
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	conflicts := 1
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(backup, job, pod).WithStatusSubresource(backup).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if conflicts > 0 {
				conflicts--
				return apierrors.NewConflict(schema.GroupResource{Group: "etcd.database.dev", Resource: "etcdbackups"}, obj.GetName(), nil)
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}}).Build()
	r := &EtcdBackupReconciler{Client: k8s, Now: time.Now}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}

	if _, err := r.Reconcile(t.Context(), req); err == nil {
		t.Fatal("a reconcile whose record was refused reported success")
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(job), &batchv1.Job{}); err != nil {
		t.Fatalf("the Job of an unrecorded run is gone: %v", err)
	}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	got := &etcdv1alpha1.EtcdBackup{}
	if err := k8s.Get(t.Context(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.LastBackup == nil || got.Status.LastBackup.URI != report.Backup.URI || len(got.Status.History) != 1 {
		t.Fatalf("status after the retry: last %+v, history %+v", got.Status.LastBackup, got.Status.History)
	}
	if uid := got.Status.LastBackup.ClusterUID; uid != "cluster-uid" {
		t.Errorf("status records the snapshot's cluster UID as %q, the Job was made for cluster-uid", uid)
	}
	if k := got.Status.LastBackup.Keyspace; k == nil || *k != *report.Backup.Keyspace {
		t.Fatalf("status records the snapshot's keyspace as %+v, the agent reported %+v", k, report.Backup.Keyspace)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the recorded run's Job: %v, want it deleted", err)
	}
}

// A run's record says whether etcd had authentication on when its snapshot was taken, as the
// Job found it; a report without it (an agent before it was reported) records it unknown.
func TestARunRecordsWhetherItsSnapshotHasAuthentication(t *testing.T) {
	on := true
	for name, tc := range map[string]struct {
		reported *bool
		want     string
	}{"reported on": {&on, "true"}, "not reported": {nil, "unknown"}} {
		t.Run(name, func(t *testing.T) {
			b := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "ns"}}
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once-run", Namespace: "ns"},
				Status: batchv1.JobStatus{CompletionTime: ptrTime(time.Now())}}
			report := agent.Report{Backup: &agent.BackupResult{URI: "pvc://backups/x.db", SHA256: "abc", Revision: 7, AuthEnabled: tc.reported}}
			(&EtcdBackupReconciler{Now: time.Now}).record(b, job, true, report)
			got := "unknown"
			if a := b.Status.LastBackup; a != nil && a.AuthEnabled != nil {
				got = fmt.Sprint(*a.AuthEnabled)
			}
			if got != tc.want {
				t.Fatalf("the snapshot's record says authentication %s, want %s", got, tc.want)
			}
		})
	}
}

// The Succeeded condition names how the run found the destination to hold its snapshot, as
// the agent said; a report without it, from an agent that always read its snapshot back,
// says that.
func TestTheSucceededConditionNamesTheCheck(t *testing.T) {
	for check, want := range map[string]string{
		"sha256 checked by the store":                               "revision 7, sha256 checked by the store",
		"read back (the store returned no checksum for the object)": "revision 7, read back (the store returned no checksum for the object)",
		"": "revision 7, sha256 read back from the destination",
	} {
		b := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "ns"}}
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once-run", Namespace: "ns"}}
		r := &EtcdBackupReconciler{Now: time.Now}
		r.record(b, job, true, agent.Report{Backup: &agent.BackupResult{URI: "s3://b/x.db", SizeBytes: 10, SHA256: "abc", Revision: 7, Check: check}})
		cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
		if cond == nil || !strings.HasSuffix(cond.Message, want) {
			t.Errorf("check %q: condition %+v, want a message ending %q", check, cond, want)
		}
	}
}
