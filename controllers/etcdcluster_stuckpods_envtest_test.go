package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// A member pod placed on a node where its volume cannot be attached waits in ContainerCreating
// for ever, and the pod itself says nothing more: only the events about it say why (here the
// attach-detach controller's Multi-Attach error, which a member's pod meets when its node died
// and the volume is still attached there). Status must name the member and that cause, and one
// Warning event on the cluster say it. Before, Degraded said nothing of it: the member was not
// running, and no one said why.
func TestAPodStuckBeforeRunningIsNamedWithTheCauseItsEventsGive(t *testing.T) {
	c := newCluster(t, "stuck")
	pods := waitForPods(t, c, 3)
	stuck := &pods[0]
	now := time.Now()

	// What the attach-detach controller and the kubelet would post about the pod; and an event
	// about an earlier pod of the same name, seen last, which is not about this one.
	attach := podEvent(stuck, "FailedAttachVolume", `Multi-Attach error for volume "pvc-6f1c2a" Volume is already exclusively attached to one node and can't be attached to another`, now.Add(-20*time.Second))
	attach.Source.Component = "attachdetach-controller"
	kubelet := podEvent(stuck, "FailedMount", "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data]: timed out waiting for the condition", now.Add(-5*time.Second))
	earlier := podEvent(stuck, "FailedMount", `MountVolume.SetUp failed for volume "data": an earlier pod's trouble`, now)
	earlier.InvolvedObject.UID = "an-earlier-pod"
	for _, e := range []*corev1.Event{attach, kubelet, earlier} {
		if err := k8sClient.Create(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}

	// As the scheduler places the pod, and the kubelet reports it, placed five minutes ago.
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: stuck.Name, Namespace: stuck.Namespace},
		Target: corev1.ObjectReference{Kind: "Node", Name: "node-b"}}
	if err := k8sClient.SubResource("binding").Create(t.Context(), stuck, binding); err != nil {
		t.Fatalf("bind pod %s: %v", stuck.Name, err)
	}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(stuck), stuck); err != nil {
		t.Fatal(err)
	}
	stuck.Status.Phase = corev1.PodPending
	stuck.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(now.Add(-5 * time.Minute))}}
	stuck.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", Image: stuck.Spec.Containers[0].Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	if err := k8sClient.Status().Update(t.Context(), stuck); err != nil {
		t.Fatal(err)
	}

	waitDegraded(t, c, etcdv1alpha1.ReasonMembersNotRunning, stuck.Name+": ContainerCreating", "on node node-b",
		"FailedAttachVolume: Multi-Attach error for volume", "already exclusively attached")
	degraded := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded).Message
	if strings.Contains(degraded, "an earlier pod") {
		t.Errorf("Degraded quotes an event about an earlier pod of the same name: %q", degraded)
	}
	for _, p := range pods[1:] {
		if strings.Contains(degraded, p.Name) {
			t.Errorf("member %s, not placed on a node, is named: %q", p.Name, degraded)
		}
	}

	// The cluster keeps being reconciled (every 5 s while it waits to form); the event is not
	// posted again.
	time.Sleep(6 * time.Second)
	events := &eventsv1.EventList{}
	if err := k8sClient.List(t.Context(), events, client.InNamespace(c.Namespace)); err != nil {
		t.Fatal(err)
	}
	var posted []string
	for _, e := range events.Items {
		if e.Regarding.Name == c.Name && strings.Contains(e.Note, "Multi-Attach") {
			posted = append(posted, fmt.Sprintf("%s %s (series %+v)", e.Type, e.Reason, e.Series))
			if e.Type != corev1.EventTypeWarning || e.Series != nil {
				t.Errorf("event %s %s posted more than once: series %+v", e.Type, e.Reason, e.Series)
			}
		}
	}
	if len(posted) != 1 {
		t.Errorf("events naming the cause: %q, want one", posted)
	}
}

// podEvent is a Warning event about pod, as the components that watch pods post them (the core
// Events API), last seen at seen.
func podEvent(pod *corev1.Pod, reason, message string, seen time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID},
		Type: corev1.EventTypeWarning, Reason: reason, Message: message, Count: 3,
		Source:         corev1.EventSource{Component: "kubelet", Host: "node-b"},
		FirstTimestamp: metav1.NewTime(seen.Add(-4 * time.Minute)), LastTimestamp: metav1.NewTime(seen),
	}
}
