package controllers

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-database/etcd-operator/internal/agent"
)

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
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, fmt.Errorf("list pods of Job %s: %w", job.Name, err)
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		pod := &pods.Items[i]
		if metav1.IsControlledBy(pod, job) && (newest == nil || newest.CreationTimestamp.Before(&pod.CreationTimestamp)) {
			newest = pod
		}
	}
	out := map[string]corev1.ContainerStateTerminated{}
	if newest == nil {
		return out, nil
	}
	for _, st := range append(newest.Status.InitContainerStatuses, newest.Status.ContainerStatuses...) {
		if st.State.Terminated != nil {
			out[st.Name] = *st.State.Terminated
		}
	}
	return out, nil
}

func ptrTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t)
	return &mt
}
