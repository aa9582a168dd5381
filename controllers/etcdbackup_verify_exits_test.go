package controllers

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A verify Job whose restored member keeps exiting (killed for memory under the members'
// limit, say) ends the verification as NotRun once it has exited verifyMemberExitLimit times,
// naming the exit and, for an OOM kill, the limit to raise: never as a failed snapshot, and
// without waiting out the verifier's minutes and the Job's retries. Before that, the backup is
// looked at again soon: a pod's restarts wake nothing. Before the check, the Job ran on with no
// outcome and no requeue.
func TestVerifyJobWhoseRestoredMemberKeepsExitingIsNotRun(t *testing.T) {
	for _, tc := range []struct {
		name         string
		restarts     int32
		wantRecorded bool
	}{
		{"exited once", 1, false},
		{"exited three times", verifyMemberExitLimit, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backup, c, job := verifyingBackup(t, "", 3*time.Minute)
			started := metav1.NewTime(time.Now().Add(-2 * time.Minute))
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x", Namespace: "ns", CreationTimestamp: started,
					Labels: map[string]string{"batch.kubernetes.io/job-name": job.Name, resources.LabelManagedBy: "etcd-operator"}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, InitContainerStatuses: []corev1.ContainerStatus{
					{Name: resources.VerifyFetchContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: started, FinishedAt: started}}},
					{Name: resources.VerifyEtcdutlContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: started, FinishedAt: started}}},
					{Name: resources.VerifyEtcdContainer, RestartCount: tc.restarts,
						State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
						LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, StartedAt: started, FinishedAt: started}}},
				}, ContainerStatuses: []corev1.ContainerStatus{
					{Name: resources.VerifyContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}},
				}},
			}
			if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
				t.Fatal(err)
			}
			got, result, _ := reconcileVerifyingBackup(t, backup, c, job, pod)
			if !tc.wantRecorded {
				if got.Status.LastVerified != nil {
					t.Fatalf("lastVerified %+v while the member may yet stay up", got.Status.LastVerified)
				}
				if result.RequeueAfter <= 0 || result.RequeueAfter > time.Minute {
					t.Errorf("requeue after %s, want within a minute: a pod's restarts wake nothing", result.RequeueAfter)
				}
				return
			}
			lv := got.Status.LastVerified
			if lv == nil || lv.Result != etcdv1alpha1.SnapshotNotVerified {
				t.Fatalf("lastVerified %+v: want NotRun, the snapshot neither proven nor failed", lv)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionVerified)
			if cond == nil || cond.Reason != etcdv1alpha1.ReasonVerificationNotRun {
				t.Fatalf("Verified condition %+v, want %s", cond, etcdv1alpha1.ReasonVerificationNotRun)
			}
			for _, want := range []string{"exited 3 times", "OOMKilled", "exit code 137", "spec.podTemplate.resources.limits.memory"} {
				if !strings.Contains(cond.Message, want) {
					t.Errorf("condition message %q does not say %q", cond.Message, want)
				}
			}
		})
	}
}
