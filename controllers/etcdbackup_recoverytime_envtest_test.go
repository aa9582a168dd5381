package controllers_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A verification drill measures how long its snapshot took to serve again, from the reports its
// Job's containers leave, into status.lastVerified; spec.verify.maxRecoveryTime holds it to a
// bound: above it, the RecoveryTimeWithinBound condition turns False and a Warning event says by
// how much and what to do, while the snapshot stays verified; a later drill within the bound
// clears it, and without a bound there is no condition. No kubelet runs here: the test plays
// the verify Jobs' pods, as the kubelet and the agent would leave them.
func TestVerificationDrillsHoldTheRecoveryTimeToItsBound(t *testing.T) {
	c := newCluster(t, "drilled")
	b := newBackup(t, c.Namespace, c.Name, func(b *etcdv1alpha1.EtcdBackup) {
		b.Spec.Schedule = "@yearly"
		b.Spec.Verify = &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyAlways, MaxRecoveryTime: &metav1.Duration{Duration: 5 * time.Second}}
	})

	first := recordCompletedRun(t, b, "drill-1")
	playVerifyJob(t, b, "drill-1", 7*time.Second)
	v := waitVerified(t, b, first)
	steps := v.RecoverySteps
	if v.RecoveryTime == nil || v.RecoveryTime.Duration != 7*time.Second || v.SizeBytes != drillSnapshotSize ||
		steps == nil || steps.Fetch == nil || steps.Fetch.Duration != 500*time.Millisecond ||
		steps.Restore == nil || steps.Restore.Duration != time.Second || steps.StartUp == nil || steps.StartUp.Duration != 5*time.Second {
		t.Fatalf("lastVerified %+v, steps %+v; want a recovery time of 7s (fetch 500ms, restore 1s, start-up 5s) for %d bytes", v, steps, drillSnapshotSize)
	}
	if cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionVerified); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Verified condition %+v, want True: a snapshot slower to restore than the bound still restores", cond)
	}
	bound := waitRecoveryCondition(t, b, metav1.ConditionFalse, etcdv1alpha1.ReasonRecoveryTimeExceeded)
	for _, want := range []string{first, "in 7s", "maxRecoveryTime 5s", "still verified", "defragment", "raise maxRecoveryTime"} {
		if !strings.Contains(bound.Message, want) {
			t.Errorf("RecoveryTimeWithinBound message %q does not say %q", bound.Message, want)
		}
	}
	expectEvent(t, b, corev1.EventTypeWarning, etcdv1alpha1.ReasonRecoveryTimeExceeded, "in 7s (fetch 500ms, restore 1s, start-up 5s), above spec.verify.maxRecoveryTime 5s")

	second := recordCompletedRun(t, b, "drill-2")
	playVerifyJob(t, b, "drill-2", 3*time.Second)
	if v := waitVerified(t, b, second); v.RecoveryTime == nil || v.RecoveryTime.Duration != 3*time.Second {
		t.Fatalf("lastVerified %+v, want a recovery time of 3s", v)
	}
	bound = waitRecoveryCondition(t, b, metav1.ConditionTrue, etcdv1alpha1.ReasonRecoveryTimeWithinBound)
	if !strings.Contains(bound.Message, second) || !strings.Contains(bound.Message, "in 3s") {
		t.Errorf("RecoveryTimeWithinBound message %q, want it to name %s and its 3s", bound.Message, second)
	}

	// A bound lowered below the last drill applies at once, as the alert on the two series does;
	// no bound, no condition.
	setMaxRecoveryTime(t, b, &metav1.Duration{Duration: 2 * time.Second})
	waitRecoveryCondition(t, b, metav1.ConditionFalse, etcdv1alpha1.ReasonRecoveryTimeExceeded)
	setMaxRecoveryTime(t, b, nil)
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionRecoveryTimeWithinBound); cond != nil {
			return fmt.Errorf("without a bound, condition %+v", cond)
		}
		return nil
	})
}

// drillSnapshotSize is the size of the snapshots the drills restore.
const drillSnapshotSize = 20512

// recordCompletedRun adds to b's status a completed run of Job job, as a backup run leaves it,
// and returns its snapshot's URI.
func recordCompletedRun(t *testing.T, b *etcdv1alpha1.EtcdBackup, job string) string {
	t.Helper()
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	artifact := &etcdv1alpha1.BackupArtifact{URI: "pvc://backups/" + job + ".db", SizeBytes: drillSnapshotSize, SHA256: "abc", Revision: 51,
		EtcdVersion: "3.6.16", StartTime: now, CompletionTime: now}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		run := etcdv1alpha1.BackupRun{Phase: etcdv1alpha1.BackupCompleted, Job: job, Artifact: artifact.DeepCopy(), StartTime: &now, CompletionTime: &now}
		b.Status.History = append([]etcdv1alpha1.BackupRun{run}, b.Status.History...)
		b.Status.LastBackup = artifact.DeepCopy()
		return k8sClient.Status().Update(t.Context(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return artifact.URI
}

// playVerifyJob waits for the verify Job of run, then finishes it as the kubelet and the agent
// would: its pod's containers terminated, the fetch's and the verifier's reports in their
// termination messages, the restored member answering recovery after the fetch began. The
// fetch takes 500ms and etcdutl 1s, its container's times whole seconds as the kubelet's are.
func playVerifyJob(t *testing.T, b *etcdv1alpha1.EtcdBackup, run string, recovery time.Duration) {
	t.Helper()
	job := &batchv1.Job{}
	eventually(t, 10*time.Second, func() error {
		return k8sClient.Get(t.Context(), client.ObjectKey{Namespace: b.Namespace, Name: resources.VerifyJobName(run)}, job)
	})
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	began := t0.Add(250 * time.Millisecond)
	fetch := agent.Report{Restore: &agent.RestoreResult{URI: "pvc://backups/" + run + ".db", SizeBytes: drillSnapshotSize, SHA256: "abc", Revision: 51},
		Began: began, Ended: began.Add(500 * time.Millisecond)}
	check := agent.Report{Verify: &agent.VerifyResult{Revision: 51, AnsweredAt: began.Add(recovery)}}
	terminated := func(from, to time.Time, report *agent.Report) corev1.ContainerState {
		st := &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: metav1.NewTime(from), FinishedAt: metav1.NewTime(to)}
		if report != nil {
			st.Message = string(report.Encode())
		}
		return corev1.ContainerState{Terminated: st}
	}
	end := began.Add(recovery + time.Second)
	states := map[string]corev1.ContainerState{
		resources.VerifyFetchContainer:   terminated(t0, t0.Add(time.Second), &fetch),
		resources.VerifyEtcdutlContainer: terminated(t0.Add(time.Second), t0.Add(2*time.Second), nil),
		resources.VerifyEtcdContainer:    terminated(t0.Add(2*time.Second), end, nil),
		resources.VerifyContainer:        terminated(t0.Add(2*time.Second), end, &check),
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-pod", Namespace: job.Namespace, Labels: job.Spec.Template.Labels},
		Spec: *job.Spec.Template.Spec.DeepCopy()}
	pod.Labels[batchv1.JobNameLabel] = job.Name
	if err := controllerutil.SetControllerReference(job, pod, k8sClient.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodSucceeded
	for _, c := range pod.Spec.InitContainers {
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: states[c.Name]})
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: states[c.Name]})
	}
	job.Status = batchv1.JobStatus{StartTime: ptr.To(metav1.NewTime(t0)), CompletionTime: ptr.To(metav1.NewTime(end)), Succeeded: 1,
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(end)},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(end)},
		}}
	if err := errors.Join(k8sClient.Status().Update(t.Context(), pod), k8sClient.Status().Update(t.Context(), job)); err != nil {
		t.Fatal(err)
	}
}

// waitVerified waits for status.lastVerified to name the snapshot at uri, and returns it.
func waitVerified(t *testing.T, b *etcdv1alpha1.EtcdBackup, uri string) *etcdv1alpha1.SnapshotVerification {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if v := b.Status.LastVerified; v == nil || v.URI != uri || v.Result != etcdv1alpha1.SnapshotVerified {
			return fmt.Errorf("lastVerified %+v, want %s Verified", v, uri)
		}
		return nil
	})
	return b.Status.LastVerified
}

func waitRecoveryCondition(t *testing.T, b *etcdv1alpha1.EtcdBackup, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if cond = meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionRecoveryTimeWithinBound); cond == nil || cond.Status != status || cond.Reason != reason {
			return fmt.Errorf("RecoveryTimeWithinBound %+v, want %s %s", cond, status, reason)
		}
		return nil
	})
	return *cond
}

func setMaxRecoveryTime(t *testing.T, b *etcdv1alpha1.EtcdBackup, bound *metav1.Duration) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.Verify.MaxRecoveryTime = bound
		return k8sClient.Update(t.Context(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
}
