package controllers

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Each test here stands in front of one destructive step's guard: delete the guard and the
// test fails (the commit that added it says how).

// setPodReady sets the Ready condition of member's pod, as the kubelet would.
func (a *scriptedCluster) setPodReady(t *testing.T, member string, ready bool) {
	t.Helper()
	pod, ok := a.pod(t, member)
	if !ok {
		t.Fatalf("member %s has no pod", member)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if err := a.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// progressing is the Progressing condition's message.
func progressing(c *etcdv1alpha1.EtcdCluster) string {
	return conditionMessage(c, etcdv1alpha1.ConditionProgressing)
}

// A scale-down that would leave fewer healthy voters than a quorum of those left waits. Five
// voters of which three are not ready, asked to be four: removing the newest (not ready) one
// leaves two healthy of four, short of three. Once one of them is ready again the removal
// keeps a quorum and goes ahead. (The decision table's "quorum at the edge" case asks for as
// many members as there are, so it never reaches the scale-down.)
func TestScaleDownThatWouldLoseQuorumWaits(t *testing.T) {
	a := newScriptedCluster(t, 5, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 4 }, nil)
	for _, name := range a.members[2:] {
		a.setPodReady(t, name, false)
	}

	c := a.reconcile(t, 3)
	if slices.Contains(a.etcd.Calls, "RemoveMember") || len(a.etcd.Members) != 5 {
		t.Fatalf("etcd calls %v, %d members: a removal leaving 2 healthy of 4 voters was made", a.etcd.Calls, len(a.etcd.Members))
	}
	if p := progressing(c); !strings.Contains(p, "removing a member now would lose quorum") {
		t.Fatalf("Progressing says %q: the scale-down was not reached, or did not say why it waits", p)
	}

	a.setPodReady(t, a.members[2], true)
	a.reconcile(t, 1)
	if !slices.Contains(a.etcd.Calls, "RemoveMember") || len(a.etcd.Members) != 4 {
		t.Fatalf("etcd calls %v, %d members: with 3 healthy of the 4 left, the member is removed", a.etcd.Calls, len(a.etcd.Members))
	}
}
