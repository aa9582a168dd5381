package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// envtest has no kubelet or scheduler: these tests write on the member pods what those would
// report, then check what the operator says and does, as a new user meets it.

func reportOnPods(t *testing.T, pods []corev1.Pod, report func(*corev1.Pod)) {
	t.Helper()
	for i := range pods {
		report(&pods[i])
		if err := k8sClient.Status().Update(t.Context(), &pods[i]); err != nil {
			t.Fatal(err)
		}
	}
}

// waitDegraded waits for Degraded=True with reason, its message containing every part, and a
// Warning event saying the same.
func waitDegraded(t *testing.T, c *etcdv1alpha1.EtcdCluster, reason string, parts ...string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		if d == nil || d.Status != metav1.ConditionTrue || d.Reason != reason {
			return fmt.Errorf("Degraded = %+v, want True/%s", d, reason)
		}
		for _, part := range parts {
			if !strings.Contains(d.Message, part) {
				return fmt.Errorf("Degraded message %q does not say %q", d.Message, part)
			}
		}
		events := &eventsv1.EventList{}
		if err := k8sClient.List(t.Context(), events, client.InNamespace(c.Namespace)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == reason && e.Regarding.Name == c.Name && strings.Contains(e.Note, parts[0]) {
				return nil
			}
		}
		return fmt.Errorf("no Warning event %s about %q", reason, parts[0])
	})
}

func uids(pods []corev1.Pod) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, p := range pods {
		out[p.UID] = true
	}
	return out
}

// A version with no image: the members cannot start, status says so, and correcting the version
// starts the same members on it (the cluster never formed, so nothing holds data).
func TestAVersionTypoIsReportedAndCanBeCorrected(t *testing.T) {
	c := newCluster(t, "typo", func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Version = "3.6.99" })
	pods := waitForPods(t, c, 3)
	reportOnPods(t, pods, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", Image: p.Spec.Containers[0].Image, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.test/etcd:v3.6.99"`},
		}}}
	})
	waitDegraded(t, c, etcdv1alpha1.ReasonMembersNotRunning, "ImagePullBackOff", "registry.test/etcd:v3.6.99", pods[0].Name)

	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Version = "3.6.16"
	if err := k8sClient.Patch(t.Context(), c, patch); err != nil {
		t.Fatalf("correcting the version of a cluster that never formed: %v", err)
	}
	before := uids(pods)
	eventually(t, 15*time.Second, func() error {
		pods, _ := membersOf(t, c)
		for _, p := range pods {
			if !before[p.UID] || p.Spec.Containers[0].Image != "registry.test/etcd:v3.6.16" {
				return fmt.Errorf("pod %s (new: %t) runs %s", p.Name, !before[p.UID], p.Spec.Containers[0].Image)
			}
		}
		return nil
	})
}

// Requests no node can meet: the scheduler's message reaches status, and correcting the pod
// template makes the members again from it.
func TestUnschedulableRequestsAreReportedAndCanBeCorrected(t *testing.T) {
	c := newCluster(t, "greedy", func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.PodTemplate.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	})
	pods := waitForPods(t, c, 3)
	reportOnPods(t, pods, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}
	})
	waitDegraded(t, c, etcdv1alpha1.ReasonMembersNotRunning, "Insufficient cpu")

	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.PodTemplate.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	if err := k8sClient.Patch(t.Context(), c, patch); err != nil {
		t.Fatal(err)
	}
	before := uids(pods)
	eventually(t, 20*time.Second, func() error {
		pods, _ := membersOf(t, c)
		if len(pods) != 3 {
			return fmt.Errorf("%d pods", len(pods))
		}
		for _, p := range pods {
			if before[p.UID] || p.Spec.Containers[0].Resources.Requests.Cpu().String() != "100m" {
				return fmt.Errorf("pod %s (new: %t) requests %s", p.Name, !before[p.UID], p.Spec.Containers[0].Resources.Requests.Cpu())
			}
		}
		return nil
	})
}
