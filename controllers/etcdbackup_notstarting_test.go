package controllers

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A backup Job whose pod never starts (here its claim is attached to another node, which the
// pod's status shows only as ContainerCreating) fails its run after agentStartDeadline, naming
// what holds it, instead of holding the next run and OLM upgrades back for the Job's two
// hours. Before, the run stayed Running, with no requeue, until the Job's own deadline.
func TestBackupJobWhosePodNeverStartsFailsItsRun(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name       string
		podAge     time.Duration
		waiting    corev1.ContainerStateWaiting
		wantFailed string
	}{
		{"attached elsewhere", agentStartDeadline + time.Minute, corev1.ContainerStateWaiting{Reason: "ContainerCreating"}, "FailedAttachVolume Multi-Attach"},
		{"secret missing", agentStartDeadline + time.Minute, corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "s3" not found`}, `CreateContainerConfigError): secret "s3" not found`},
		{"still starting", time.Minute, corev1.ContainerStateWaiting{Reason: "ContainerCreating"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			created := metav1.NewTime(now.Add(-tc.podAge))
			backup := &etcdv1alpha1.EtcdBackup{
				ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "ns", UID: "backup-uid", CreationTimestamp: created},
				Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c",
					Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
			}
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once-run", Namespace: "ns", UID: "job-uid", CreationTimestamp: created,
				Labels: map[string]string{resources.LabelBackup: "once"}}}
			if err := ctrl.SetControllerReference(backup, job, testScheme(t)); err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "once-run-pod", Namespace: "ns", CreationTimestamp: created, Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
				Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: resources.BackupContainer,
					State: corev1.ContainerState{Waiting: &tc.waiting}}}},
			}
			if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
				t.Fatal(err)
			}
			k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(backup, job, pod).WithStatusSubresource(backup).Build()
			r := &EtcdBackupReconciler{Client: k8s, Now: func() time.Time { return now }}

			result, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)})
			if err != nil {
				t.Fatal(err)
			}
			got := &etcdv1alpha1.EtcdBackup{}
			if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(backup), got); err != nil {
				t.Fatal(err)
			}
			jobErr := k8s.Get(t.Context(), client.ObjectKeyFromObject(job), &batchv1.Job{})
			if tc.wantFailed == "" {
				if got.Status.Phase != etcdv1alpha1.BackupRunning || jobErr != nil {
					t.Fatalf("a pod within its start deadline: phase %s, Job %v; want Running with its Job", got.Status.Phase, jobErr)
				}
				// Timestamps keep whole seconds.
				if want := agentStartDeadline - tc.podAge; result.RequeueAfter < want-time.Second || result.RequeueAfter > want {
					t.Fatalf("requeue after %s, want %s: nothing else wakes the reconciler if the pod never starts", result.RequeueAfter, want)
				}
				return
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
			if len(got.Status.History) != 1 || got.Status.History[0].Phase != etcdv1alpha1.BackupFailed || cond == nil || cond.Reason != etcdv1alpha1.ReasonJobNotStarting {
				t.Fatalf("history %+v, condition %+v: want one failed run, reason %s", got.Status.History, cond, etcdv1alpha1.ReasonJobNotStarting)
			}
			if msg := got.Status.History[0].Message; !strings.Contains(msg, tc.wantFailed) {
				t.Errorf("run message %q does not say %q", msg, tc.wantFailed)
			}
			if got.Status.Phase != etcdv1alpha1.BackupFailed || got.Status.ActiveJob != "" {
				t.Errorf("phase %s, active Job %q: want a one-shot backup Failed with no Job running", got.Status.Phase, got.Status.ActiveJob)
			}
			if !apierrors.IsNotFound(jobErr) {
				t.Errorf("the failed run's Job: %v, want it deleted once recorded", jobErr)
			}
		})
	}
}
