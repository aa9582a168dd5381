package controllers

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

const (
	multiAttach    = `Multi-Attach error for volume "pvc-6f1c2a" Volume is already exclusively attached to one node and can't be attached to another`
	kubeletTimeout = "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data]: timed out waiting for the condition"
)

// stuckOnNode makes the member's pod one the scheduler placed on node-b at placed, whose
// container the kubelet has not started: as a member's pod made again after its node died.
func (a *scriptedCluster) stuckOnNode(t *testing.T, member string, placed time.Time) *corev1.Pod {
	t.Helper()
	pod, ok := a.pod(t, member)
	if !ok {
		t.Fatalf("no pod %s", member)
	}
	pod.Spec.NodeName = "node-b"
	if err := a.k8s.Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(placed)}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "etcd", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}},
	}
	if err := a.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// warningAbout is a Warning event about pod, named name, first seen four minutes before seen.
func warningAbout(pod *corev1.Pod, name, reason, message string, seen time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name + "." + name, Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID},
		Type: corev1.EventTypeWarning, Reason: reason, Message: message, Count: 1,
		FirstTimestamp: metav1.NewTime(seen.Add(-4 * time.Minute)), LastTimestamp: metav1.NewTime(seen),
	}
}

// A formed cluster whose member's pod was placed on a node where its volume cannot be attached:
// not named while it may still be starting; then Degraded and the member's entry in status
// name the member and the cause the events give, one Warning event says it, and the events
// recurring (the kubelet's "timed out" last each time) change nothing. The steps taken are those
// of the same cluster with no events to read: what is read is reported, never decided on.
func TestAMemberPodStuckOnItsNodeIsReportedOnceWithTheCauseItsEventsGive(t *testing.T) {
	start := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	a, twin := newScriptedCluster(t, 3, nil, nil), newScriptedCluster(t, 3, nil, nil)
	clock := start
	a.r.Clock, twin.r.Clock = func() time.Time { return clock }, func() time.Time { return clock }
	member := a.members[1]
	pod := a.stuckOnNode(t, member, start.Add(-time.Minute))
	twin.stuckOnNode(t, member, start.Add(-time.Minute))
	attach := warningAbout(pod, "attach", "FailedAttachVolume", multiAttach, start.Add(-50*time.Second))
	waiting := warningAbout(pod, "wait", "FailedMount", kubeletTimeout, start.Add(-10*time.Second))
	for _, e := range []*corev1.Event{attach, waiting} {
		if err := a.k8s.Create(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	reconcileBoth := func() *etcdv1alpha1.EtcdCluster {
		t.Helper()
		c, without := a.reconcile(t, 1), twin.reconcile(t, 1)
		// The two reconciles may fall either side of a second: LastTransitionTime is not compared.
		progressing := func(c *etcdv1alpha1.EtcdCluster) string {
			p := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing)
			if p == nil {
				return fmt.Sprintf("%+v no Progressing", c.Status.Operation)
			}
			return fmt.Sprintf("%+v %s %s %s: %s", c.Status.Operation, p.Type, p.Status, p.Reason, p.Message)
		}
		if progressing(c) != progressing(without) || fmt.Sprint(a.etcd.Members) != fmt.Sprint(twin.etcd.Members) ||
			!maps.Equal(a.podVersions(t), twin.podVersions(t)) {
			t.Fatalf("the events changed a step: %s, etcd members %+v, pods %v; without them %s, %+v, %v",
				progressing(c), a.etcd.Members, a.podVersions(t), progressing(without), twin.etcd.Members, twin.podVersions(t))
		}
		return c
	}

	c := reconcileBoth()
	if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); strings.Contains(d.Message, "Multi-Attach") {
		t.Errorf("a pod placed a minute ago is reported stuck: %q", d.Message)
	}

	clock = start.Add(90 * time.Second)
	c = reconcileBoth()
	d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	want := member + ": ContainerCreating for over 2m0s on node node-b; FailedAttachVolume: " + multiAttach
	if d.Reason != etcdv1alpha1.ReasonMembersNotRunning || !strings.Contains(d.Message, want) {
		t.Fatalf("Degraded = %s: %q, want %s naming %q", d.Reason, d.Message, etcdv1alpha1.ReasonMembersNotRunning, want)
	}
	for _, m := range c.Status.Members {
		if m.Name == member && (m.Healthy || len(m.Errors) != 1 || !strings.Contains(m.Errors[0], "FailedAttachVolume: "+multiAttach)) {
			t.Errorf("status.members[%s] = %+v, want unhealthy with the cause", member, m)
		}
	}
	if posted := a.events(); strings.Count(posted, "Multi-Attach") != 1 || !strings.Contains(posted, "Warning "+etcdv1alpha1.ReasonMembersNotRunning) {
		t.Errorf("events posted:\n%s\nwant one Warning %s naming the cause", posted, etcdv1alpha1.ReasonMembersNotRunning)
	}

	for i := range 4 {
		clock = clock.Add(time.Minute)
		attach.LastTimestamp, attach.Count = metav1.NewTime(clock.Add(-40*time.Second)), attach.Count+1
		waiting.LastTimestamp, waiting.Count = metav1.NewTime(clock.Add(-time.Second)), waiting.Count+1
		if err := errors.Join(a.k8s.Update(t.Context(), attach), a.k8s.Update(t.Context(), waiting)); err != nil {
			t.Fatal(err)
		}
		again := reconcileBoth()
		if got := meta.FindStatusCondition(again.Status.Conditions, etcdv1alpha1.ConditionDegraded); got.Message != d.Message {
			t.Fatalf("recurrence %d: Degraded says %q, was %q", i, got.Message, d.Message)
		}
	}
	if posted := a.events(); strings.Contains(posted, "Multi-Attach") {
		t.Errorf("the cause was posted again as its events recurred:\n%s", posted)
	}
}

// Reporting does not stop the reconcile: events that cannot be read are said to be so.
func TestEventsThatCannotBeReadAreSaidToBe(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	// No field indexes: the fake client refuses the List, as an API server would without RBAC.
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	r := &EtcdClusterReconciler{Client: k8s, APIReader: k8s, Clock: func() time.Time { return now }}
	pod := placedPod("m", now.Add(-10*time.Minute), "ContainerCreating")
	obs := &observation{pods: map[string]*corev1.Pod{"m": pod}}
	obs.diagnosePods()
	r.diagnoseStuckPods(t.Context(), obs)
	if got := obs.stuckPods["m"]; !strings.Contains(got, "its events could not be read") || !strings.Contains(got, "kubectl describe pod m") {
		t.Errorf("stuck pod reported as %q", got)
	}
}

func placedPod(name string, placed time.Time, waiting string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(placed.Add(-time.Second))},
		Spec:       corev1.PodSpec{NodeName: "node-b"},
		Status: corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(placed)}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "etcd", State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}},
		},
	}
}

func TestStartingSinceIsWhenAPlacedPodBeganWaitingToStart(t *testing.T) {
	placed := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	unplaced := placedPod("m", placed, "ContainerCreating")
	unplaced.Spec.NodeName, unplaced.Status.Conditions = "", nil
	terminating := placedPod("m", placed, "ContainerCreating")
	terminating.DeletionTimestamp = &metav1.Time{Time: placed}
	initializing := placedPod("m", placed, "PodInitializing")
	initializing.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	unrecorded := placedPod("m", placed, "ContainerCreating")
	unrecorded.Status.Conditions = nil
	restarted := placedPod("m", placed, "ContainerCreating")
	restarted.Status.Conditions = append(restarted.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady,
		Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(placed.Add(48 * time.Hour))})
	running := placedPod("m", placed, "")
	running.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		since  time.Time
		reason string
	}{
		{"placed, creating", placedPod("m", placed, "ContainerCreating"), placed, "ContainerCreating"},
		{"init containers not started", initializing, placed, "PodInitializing"},
		{"no PodScheduled condition: since it was made", unrecorded, placed.Add(-time.Second), "ContainerCreating"},
		{"ran, and starts again after its node restarted: since its containers stopped", restarted, placed.Add(48 * time.Hour), "ContainerCreating"},
		{"not placed: the scheduler's problem (Unschedulable)", unplaced, time.Time{}, ""},
		{"going away", terminating, time.Time{}, ""},
		{"pulling failed: the pod shows it (ImagePullBackOff)", placedPod("m", placed, "ImagePullBackOff"), time.Time{}, ""},
		{"running", running, time.Time{}, ""},
	} {
		since, waiting := startingSince(tc.pod)
		if !since.Equal(tc.since) || waiting != tc.reason {
			t.Errorf("%s: startingSince = %v, %q; want %v, %q", tc.name, since, waiting, tc.since, tc.reason)
		}
	}
}

func TestTheCauseIsTheNewestWarningAboutThePodThatSaysWhy(t *testing.T) {
	seen := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	pod := placedPod("m", seen.Add(-10*time.Minute), "ContainerCreating")
	warning := func(name, reason, message string, ago time.Duration) corev1.Event {
		return *warningAbout(pod, name, reason, message, seen.Add(-ago))
	}
	normal := warning("pulling", "Pulling", `Pulling image "registry.test/etcd:v3.6.16"`, 0)
	normal.Type = corev1.EventTypeNormal
	earlierPod := warning("earlier", "FailedMount", "about an earlier pod of the same name", 0)
	earlierPod.InvolvedObject.UID = "uid-earlier"
	seriesOnly := warning("series", "FailedCreatePodSandBox", "a sandbox failure recorded by the events.k8s.io API", time.Hour)
	seriesOnly.Series = &corev1.EventSeries{Count: 9, LastObservedTime: metav1.NewMicroTime(seen)}
	sandbox := warning("sandbox", "FailedCreatePodSandBox", `(combined from similar events): Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "`+
		strings.Repeat("3c", 32)+`": plugin type="calico" failed (add): connection is unauthorized`, 0)
	long := warning("long", "FailedMount", strings.Repeat("x", 400), 0)

	for _, tc := range []struct {
		name   string
		events []corev1.Event
		want   string
	}{
		{"no events", nil, ""},
		{"only Normal events: still pulling", []corev1.Event{normal}, ""},
		{"the scheduler's, from before the pod was placed", []corev1.Event{warning("sched", "FailedScheduling", "0/3 nodes are available", 0)}, ""},
		{"newest wins", []corev1.Event{warning("attach", "FailedAttachVolume", multiAttach, time.Minute), warning("mount", "FailedMount", "MountVolume.SetUp failed", 0)},
			"FailedMount: MountVolume.SetUp failed"},
		{"the kubelet's timeout gives way to the event that says why", []corev1.Event{warning("wait", "FailedMount", kubeletTimeout, 0), warning("attach", "FailedAttachVolume", multiAttach, time.Minute)},
			"FailedAttachVolume: " + multiAttach},
		{"the kubelet's timeout when it is all there is", []corev1.Event{warning("wait", "FailedMount", kubeletTimeout, 0), normal}, "FailedMount: " + kubeletTimeout},
		{"an earlier pod's events are not this one's", []corev1.Event{earlierPod, warning("attach", "FailedAttachVolume", multiAttach, time.Minute)},
			"FailedAttachVolume: " + multiAttach},
		{"seen last as a series", []corev1.Event{seriesOnly, warning("attach", "FailedAttachVolume", multiAttach, time.Minute)},
			"FailedCreatePodSandBox: a sandbox failure recorded by the events.k8s.io API"},
		{"a sandbox ID, new at each attempt, is left out", []corev1.Event{sandbox},
			`FailedCreatePodSandBox: Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "…": plugin type="calico" failed (add): connection is unauthorized`},
		{"from before it began waiting: not why it waits", []corev1.Event{warning("probe", "Unhealthy", "Readiness probe failed", 11*time.Minute)}, ""},
		{"long messages are cut", []corev1.Event{long}, "FailedMount: " + strings.Repeat("x", maxCauseLength-1) + "…"},
	} {
		if got := causeFromEvents(pod, seen.Add(-10*time.Minute), tc.events); got != tc.want {
			t.Errorf("%s: cause %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Reading a namespace's events costs the API server a read from etcd: a pod that stays stuck
// has them read again only after stuckCauseRefresh, and what is remembered does not outlive it.
func TestStuckCausesAreReadAgainOnlyAfterTheRefresh(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	var s stuckCauses
	s.put("a", "FailedMount: x", now)
	if cause, ok := s.get("a", now.Add(stuckCauseRefresh-time.Second)); !ok || cause != "FailedMount: x" {
		t.Errorf("within the refresh: %q, %t", cause, ok)
	}
	if _, ok := s.get("a", now.Add(stuckCauseRefresh)); ok {
		t.Error("remembered past the refresh")
	}
	s.put("b", "", now.Add(stuckCauseRefresh))
	if _, kept := s.read["a"]; kept || len(s.read) != 1 {
		t.Errorf("entries after the refresh: %v", s.read)
	}
	if _, ok := s.get("b", now.Add(stuckCauseRefresh)); !ok {
		t.Error("no Warning event is remembered too: it is an answer")
	}
}
