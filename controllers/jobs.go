package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
)

// setUpJobRunner registers a reconciler of kind that runs agent Jobs and follows an
// EtcdCluster, whose changes ofCluster maps to the objects of kind they concern: the backup
// and restore reconcilers. With podLabel, the Jobs' pods are followed too, each for the object
// of kind the label names.
func setUpJobRunner(mgr ctrl.Manager, name string, kind client.Object, ofCluster handler.MapFunc, r reconcile.Reconciler, podLabel string) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(kind).
		Owns(&batchv1.Job{}).
		Watches(&etcdv1alpha1.EtcdCluster{}, handler.EnqueueRequestsFromMapFunc(ofCluster))
	if podLabel != "" {
		labelled := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[podLabel] != "" })
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetLabels()[podLabel]}}}
		}), builder.WithPredicates(labelled))
	}
	return b.Named(name).Complete(r)
}

// jobOutcome says whether an agent Job has finished and, if so, whether it succeeded.
func jobOutcome(job *batchv1.Job) (succeeded, finished bool) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true
		case batchv1.JobFailed:
			return false, true
		}
	}
	return false, false
}

// jobFinishTime is when a finished Job finished.
func jobFinishTime(job *batchv1.Job) time.Time {
	if job.Status.CompletionTime != nil {
		return job.Status.CompletionTime.Time
	}
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return job.CreationTimestamp.Time
}

// agentStartDeadline bounds how long an agent Job's pod may take to start running. Past it the
// run is failed, naming what holds the pod: a Job left Pending (unschedulable, an image that
// cannot be pulled, a claim attached to another node) would otherwise hold the next run and OLM
// upgrades back until the Job's own two-hour deadline.
const agentStartDeadline = 10 * time.Minute

// jobNotStarting says why an unfinished Job has not got going within agentStartDeadline: its
// newest pod (or, before it has one, the Job) has not started running since it was made, or a
// container of that pod has waited that long for its image. A pod that has started may still
// wait for one: a restore or verify pod runs the cluster's etcd image only after the agent's
// fetch. While either may still come right, it says how soon to look again. A pod that runs and
// fails is the Job's retries' business, not this.
func jobNotStarting(ctx context.Context, c client.Client, job *batchv1.Job, now time.Time) (string, time.Duration, error) {
	pods, err := jobPods(ctx, c, job)
	if err != nil {
		return "", 0, err
	}
	since, why := job.CreationTimestamp.Time, fmt.Sprintf("Job %s did not start running within %s: the Job created no pod", job.Name, agentStartDeadline)
	if len(pods) > 0 {
		newest := &pods[len(pods)-1]
		pull, waitingSince := imagePullFailure(newest)
		switch {
		case pull != "":
			since, why = waitingSince, fmt.Sprintf("Job %s: %s for %s; check that the image exists and, for a private repository, "+
				"that the EtcdCluster's spec.podTemplate.imagePullSecrets names its pull secret", job.Name, pull, agentStartDeadline)
		case podStarted(newest):
			return "", 0, nil
		default:
			since, why = newest.CreationTimestamp.Time, fmt.Sprintf("Job %s did not start running within %s: %s", job.Name, agentStartDeadline, podPendingReason(newest))
		}
	}
	if left := agentStartDeadline - now.Sub(since); left > 0 {
		return "", left, nil
	}
	return why, 0, nil
}

// imagePullFailure names the container of pod whose image cannot be pulled, the image and the
// kubelet's reason, and says since when it has waited for it: since the last of the pod's
// containers started or ended, or else since the pod was made, as the kubelet starts each init
// container when the one before has ended, and the containers once all have.
func imagePullFailure(pod *corev1.Pod) (string, time.Time) {
	statuses := slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses)
	for _, st := range statuses {
		if w := st.State.Waiting; w != nil && slices.Contains(imagePullReasons, w.Reason) {
			return fmt.Sprintf("container %s of pod %s could not pull image %q (%s: %s)", st.Name, pod.Name, st.Image, w.Reason, w.Message),
				lastContainerChange(pod, statuses)
		}
	}
	return "", time.Time{}
}

// lastContainerChange is when the last of the pod's containers started or ended, or, before
// any did, when the pod was made.
func lastContainerChange(pod *corev1.Pod, statuses []corev1.ContainerStatus) time.Time {
	last := pod.CreationTimestamp.Time
	for _, st := range statuses {
		if r := st.State.Running; r != nil && r.StartedAt.After(last) {
			last = r.StartedAt.Time
		}
		if t := st.State.Terminated; t != nil && t.FinishedAt.After(last) {
			last = t.FinishedAt.Time
		}
	}
	return last
}

// podStarted: a container of the pod (an init container included) runs or has run.
func podStarted(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	return slices.ContainsFunc(append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...), func(st corev1.ContainerStatus) bool {
		return st.State.Running != nil || st.State.Terminated != nil
	})
}

// podPendingReason is what a pending pod's status says holds it.
func podPendingReason(pod *corev1.Pod) string {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			return fmt.Sprintf("pod %s is not scheduled (%s): %s", pod.Name, cond.Reason, cond.Message)
		}
	}
	for _, st := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if w := st.State.Waiting; w != nil && (w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" || w.Message != "") {
			return fmt.Sprintf("container %s of pod %s is waiting (%s): %s", st.Name, pod.Name, w.Reason, w.Message)
		}
	}
	return fmt.Sprintf("pod %s is still being created; `kubectl describe pod %s` shows its events (a volume attached to another node shows as FailedAttachVolume Multi-Attach)", pod.Name, pod.Name)
}

// agentReport reads the report an agent container of the Job's last pod left as its
// termination message.
func agentReport(ctx context.Context, c client.Client, job *batchv1.Job, container string) (agent.Report, bool, error) {
	terminated, err := lastPodTerminations(ctx, c, job)
	if err != nil {
		return agent.Report{}, false, err
	}
	t, ok := terminated[container]
	if !ok || t.Message == "" {
		return agent.Report{}, false, nil
	}
	report, err := agent.DecodeReport(t.Message)
	if err != nil {
		return agent.Report{Error: fmt.Sprintf("the agent of Job %s left an unreadable report: %v", job.Name, err)}, true, nil
	}
	return report, true, nil
}

// lastPodTerminations are the terminated containers, init containers included, of the Job's
// newest pod, by name.
func lastPodTerminations(ctx context.Context, c client.Client, job *batchv1.Job) (map[string]corev1.ContainerStateTerminated, error) {
	pods, err := jobPods(ctx, c, job)
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.ContainerStateTerminated{}
	if len(pods) == 0 {
		return out, nil
	}
	newest := pods[len(pods)-1]
	for _, st := range append(newest.Status.InitContainerStatuses, newest.Status.ContainerStatuses...) {
		if st.State.Terminated != nil {
			out[st.Name] = *st.State.Terminated
		}
	}
	return out, nil
}

// jobPods are the pods of the Job, oldest first.
func jobPods(ctx context.Context, c client.Client, job *batchv1.Job) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, fmt.Errorf("list pods of Job %s: %w", job.Name, err)
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !metav1.IsControlledBy(&p, job) })
	slices.SortStableFunc(pods, func(x, y corev1.Pod) int { return x.CreationTimestamp.Compare(y.CreationTimestamp.Time) })
	return pods, nil
}

func ptrTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t)
	return &mt
}
