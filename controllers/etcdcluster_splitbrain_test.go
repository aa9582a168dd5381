package controllers

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// onLostNode puts member's pod on a node that stopped answering: the taint eviction controller
// deleted it (DisruptionTarget, DeletionByTaintManager) and no kubelet confirms its end. Its etcd
// stops answering the operator; nothing says it stopped serving.
func (a *scriptedCluster) onLostNode(t *testing.T, member string) {
	t.Helper()
	pod, ok := a.pod(t, member)
	if !ok {
		t.Fatalf("member %s has no pod", member)
	}
	pod.Finalizers = []string{"test/held-by-a-kubelet-that-never-answers"}
	pod.Spec.NodeName = "a-node-that-stopped-answering"
	if err := a.k8s.Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "DeletionByTaintManager", LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))})
	if err := a.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if err := a.k8s.Delete(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	delete(a.etcd.Statuses, resources.ClientURL(a.cluster, member))
}

// annotateCluster sets key=value on the cluster, as a person would.
func (a *scriptedCluster) annotateCluster(t *testing.T, key, value string) {
	t.Helper()
	c := &etcdv1alpha1.EtcdCluster{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), c); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[key] = value
	if err := a.k8s.Patch(t.Context(), c, patch); err != nil {
		t.Fatal(err)
	}
}

// nodesOfTwoStoppedAnswering is a 3-member cluster under policy ForceNewCluster whose members b and
// c are on nodes that stopped answering, the quorum lost for 10 hours: the survivor is the first.
func nodesOfTwoStoppedAnswering(t *testing.T) (a *scriptedCluster, survivor, b, c string) {
	t.Helper()
	a = newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryForceNewCluster, After: &metav1.Duration{Duration: 2 * time.Minute}}
	}, nil)
	a.reconcile(t, 1)
	survivor, b, c = a.members[0], a.members[1], a.members[2]
	a.onLostNode(t, b)
	a.onLostNode(t, c)
	a.etcd.NoQuorum = true
	a.quorumLostFor(t, 10*time.Hour)
	return a, survivor, b, c
}

// A majority of members whose nodes stopped answering the API server is never forced out, however
// long: their etcd may still serve the clients on their side of a partition. Status says what the
// operator waits for and the annotation that declares them lost; once a person declares them, the
// recovery goes on, and the pods of the members it does without are stopped before the survivor is
// forced.
func TestMembersWhoseNodesStoppedAnsweringAreNeverForcedOut(t *testing.T) {
	a, survivor, b, c := nodesOfTwoStoppedAnswering(t)
	survivorPod, _ := a.pod(t, survivor)

	cluster := a.reconcile(t, 3)
	if qr := cluster.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began from %s while %s and %s may still serve a majority: %+v", qr.Member, b, c, qr)
	}
	if pod, ok := a.pod(t, survivor); !ok || pod.UID != survivorPod.UID {
		t.Fatalf("the survivor was touched")
	}
	declare := etcdv1alpha1.AnnotationLostMembers + "=" + b + "," + c
	if d := conditionMessage(cluster, etcdv1alpha1.ConditionDegraded); !strings.Contains(d, "stopped answering the API server, and their etcd may still be serving a majority") || !strings.Contains(d, declare) {
		t.Errorf("Degraded says %q: it must say what the operator waits for and name %s", d, declare)
	}
	for _, want := range []string{b, c} {
		if !slices.Contains(a.probed, resources.MemberHostPort(a.cluster, want, resources.ClientPort)) {
			t.Errorf("member %s was not probed at its client address %s (probed %v)", want, resources.MemberHostPort(a.cluster, want, resources.ClientPort), a.probed)
		}
	}

	// A person checked the machines of b and c are down. c's node is gone and its pod, made
	// again, waits for a node that will not come: it is stopped before the survivor is forced.
	a.annotateCluster(t, etcdv1alpha1.AnnotationLostMembers, b+","+c)
	if err := a.k8s.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: c}}); err != nil {
		t.Fatal(err)
	}
	held, _ := a.pod(t, c)
	held.Finalizers = nil
	if err := a.k8s.Update(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	pending := resources.MemberPod(a.cluster, resources.MemberSpec{Name: c, Version: "3.6.16"}, resources.EtcdImages{Repository: "registry.test/etcd"}, resources.PodSettings{})
	if err := a.k8s.Create(t.Context(), pending); err != nil {
		t.Fatal(err)
	}

	cluster = a.reconcile(t, 1)
	qr := cluster.Status.QuorumRecovery
	if qr == nil || qr.Member != survivor || !slices.Equal(qr.LostMembers, []string{b, c}) {
		t.Fatalf("status.quorumRecovery = %+v, want a recovery from %s without %s and %s, declared lost", qr, survivor, b, c)
	}
	a.reconcile(t, 2) // the survivor stopped, its copy's Job made
	a.finishPreserveJob(t, survivor, true, `{"preserved":{"member":"`+survivor+`","path":"`+survivor+`","sizeBytes":4096,"dbSHA256":"abc","raftIndex":10,"revision":7,"completionTime":"2026-11-23T00:00:00Z"}}`)
	a.reconcile(t, 1) // the copy on record
	a.reconcile(t, 1)
	if _, ok := a.pod(t, c); ok {
		t.Fatalf("member %s's pod is left: it must be stopped before the survivor is forced", c)
	}
	if forced, ok := a.pod(t, survivor); ok && slices.Contains(forced.Spec.Containers[0].Args, "--force-new-cluster") {
		t.Fatalf("the survivor was forced in the reconcile that fenced %s: the fence comes first", c)
	}
	// b's pod stays Terminating on the node that stopped answering, its etcd perhaps running
	// there: it is out of the client Service's selection before the survivor is forced.
	clientService := &corev1.Service{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.ClientServiceName(a.cluster.Name)}, clientService); err != nil {
		t.Fatal(err)
	}
	selects := func(pod *corev1.Pod) bool {
		return labels.SelectorFromSet(clientService.Spec.Selector).Matches(labels.Set(pod.Labels))
	}
	if held, ok := a.pod(t, b); !ok || held.DeletionTimestamp.IsZero() {
		t.Fatalf("member %s's pod on the lost node should still be Terminating", b)
	} else if selects(held) {
		t.Fatalf("member %s's pod, on a node that stopped answering, is still selected by the client Service (labels %v, selector %v) as the survivor is about to be forced",
			b, held.Labels, clientService.Spec.Selector)
	}
	a.reconcile(t, 1)
	forced, ok := a.pod(t, survivor)
	if !ok || !slices.Contains(forced.Spec.Containers[0].Args, "--force-new-cluster") {
		t.Fatalf("the survivor is not forced once the members done without are fenced")
	}
	if !selects(forced) {
		t.Errorf("the forced survivor is not selected by the client Service (labels %v, selector %v)", forced.Labels, clientService.Spec.Selector)
	}
	if events := a.events(); !strings.Contains(events, "FenceMembers") {
		t.Errorf("no FenceMembers event:\n%s", events)
	}
}

// A member counted lost that answers a probe at any of its addresses holds every step of a
// recovery: before it begins, and once under way.
func TestALostMemberThatAnswersHoldsTheRecovery(t *testing.T) {
	a := lostMajority(t, etcdv1alpha1.QuorumLossRecoveryForceNewCluster)
	survivor, answering := a.members[0], a.members[1]
	a.listening[resources.MemberHostPort(a.cluster, answering, resources.PeerPort)] = true

	c := a.reconcile(t, 2)
	if qr := c.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began while %s answers: %+v", answering, qr)
	}
	if d := conditionMessage(c, etcdv1alpha1.ConditionDegraded); !strings.Contains(d, "member "+answering+" at "+resources.MemberHostPort(a.cluster, answering, resources.PeerPort)) {
		t.Errorf("Degraded says %q: it must name the member that answered and where", d)
	}

	a.listening = map[string]bool{}
	c = a.reconcile(t, 1)
	if qr := c.Status.QuorumRecovery; qr == nil || qr.Member != survivor {
		t.Fatalf("status.quorumRecovery = %+v: the recovery must begin once nothing answers", qr)
	}
	survivorPod, _ := a.pod(t, survivor)
	a.listening["10.0.0.2:2379"] = true // its old pod's IP: the probe of a pod's address is by name too
	a.listening[resources.MemberHostPort(a.cluster, answering, resources.ClientPort)] = true
	a.reconcile(t, 2)
	if pod, ok := a.pod(t, survivor); !ok || pod.UID != survivorPod.UID {
		t.Fatalf("the survivor was stopped for its copy while %s answers", answering)
	}
}

// The wait of spec.quorumLossRecovery.after counts from when the operator found the quorum lost,
// not from when Available last turned false, which it does for other reasons too.
func TestTheRecoveryWaitCountsFromTheLossObserved(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryForceNewCluster, After: &metav1.Duration{Duration: 2 * time.Minute}}
	}, nil)
	a.reconcile(t, 1)
	c := &etcdv1alpha1.EtcdCluster{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), c); err != nil {
		t.Fatal(err)
	}
	// Unavailable for an hour already, for another reason (a member down, then a roll-out).
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == etcdv1alpha1.ConditionAvailable {
			c.Status.Conditions[i].Status = metav1.ConditionFalse
			c.Status.Conditions[i].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Hour))
		}
	}
	if err := a.k8s.Status().Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	a.loseForGood(t, a.members[1:])

	c = a.reconcile(t, 2)
	if qr := c.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began at once: %+v; the loss was found just now", qr)
	}
	if c.Status.QuorumLostTime == nil || time.Since(c.Status.QuorumLostTime.Time) > time.Minute {
		t.Fatalf("status.quorumLostTime = %v, want the time the loss was found", c.Status.QuorumLostTime)
	}
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	if c = a.reconcile(t, 1); c.Status.QuorumRecovery == nil {
		t.Fatalf("no recovery once the quorum has been lost for %s", membership.MinRecoveryAfter)
	}
	a.etcd.NoQuorum = false
	if c = a.reconcile(t, 1); c.Status.QuorumLostTime != nil {
		t.Errorf("status.quorumLostTime = %v with a quorum serving", c.Status.QuorumLostTime)
	}
}

// A person's leave holds for the loss it was given for only: on a cluster with a quorum it is
// removed, with an event saying why; given before the loss was observed, it is removed too, and
// nothing is recovered on it.
func TestLeavesThatNoLongerHoldAreRemoved(t *testing.T) {
	t.Run("a quorum serves", func(t *testing.T) {
		a := newScriptedCluster(t, 3, nil, nil)
		a.reconcile(t, 1)
		a.annotateCluster(t, etcdv1alpha1.AnnotationRecoverFrom, a.members[0])
		a.annotateCluster(t, etcdv1alpha1.AnnotationLostMembers, a.members[1])
		c := a.reconcile(t, 1)
		for _, key := range leaveAnnotations {
			if _, ok := c.Annotations[key]; ok {
				t.Errorf("annotation %s kept on a cluster with a quorum", key)
			}
		}
		if events := a.events(); strings.Count(events, "AnnotationIgnored") != 2 || !strings.Contains(events, "the cluster has a quorum") {
			t.Errorf("want an AnnotationIgnored event for each, saying why; got:\n%s", events)
		}
	})
	t.Run("given before the loss was observed", func(t *testing.T) {
		lostAt := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
		c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{etcdv1alpha1.AnnotationRecoverFrom: "c-m0000"}},
			Status: etcdv1alpha1.EtcdClusterStatus{QuorumLostTime: &metav1.Time{Time: lostAt}}}
		setAt(t, c, "kubectl-annotate", etcdv1alpha1.AnnotationRecoverFrom, lostAt.Add(-time.Hour))
		setAt(t, c, "manager", "etcd.database.dev/unrelated", lostAt.Add(time.Hour)) // another manager's later write says nothing of it
		if why := staleLeaves(c, false)[etcdv1alpha1.AnnotationRecoverFrom]; !strings.Contains(why, "before the quorum loss was observed at 2026-11-25T12:00:00Z") {
			t.Errorf("staleLeaves says %q: a recover-from set an hour before the loss must be dropped, saying why", why)
		}
		setAt(t, c, "kubectl-annotate-again", etcdv1alpha1.AnnotationRecoverFrom, lostAt.Add(time.Minute))
		if stale := staleLeaves(c, false); len(stale) != 0 {
			t.Errorf("staleLeaves = %v: a leave set again after the loss holds", stale)
		}
	})
}

// setAt records in c's managed fields that manager set the annotation key at when, as the API
// server does for a person's kubectl annotate.
func setAt(t *testing.T, c *etcdv1alpha1.EtcdCluster, manager, key string, when time.Time) {
	t.Helper()
	fields, err := json.Marshal(map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{".": map[string]any{}, "f:" + key: map[string]any{}}}})
	if err != nil {
		t.Fatal(err)
	}
	c.ManagedFields = append(c.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: etcdv1alpha1.GroupVersion.String(), Time: &metav1.Time{Time: when}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(fields))})
}

// While a quorum serves, a member whose node stopped answering for spec.quorumLossRecovery.after
// is removed from etcd (safe with a quorum: a removed member cannot rejoin) and replaced, rather
// than waited for as long as its node is gone; its pod, which never ends, holds nothing.
func TestAMemberOnALostNodeIsReplacedWhileAQuorumServes(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{After: &metav1.Duration{Duration: 10 * time.Minute}}
	}, nil)
	a.reconcile(t, 1)
	lost := a.members[2]
	a.onLostNode(t, lost) // evicted an hour ago

	a.reconcile(t, 1)
	if !slices.Contains(a.etcd.Calls, "RemoveMember") {
		t.Fatalf("etcd calls %v: member %s, whose node has not answered for an hour, is not removed", a.etcd.Calls, lost)
	}
	c := a.reconcile(t, 2)
	if !slices.Contains(a.etcd.Calls, "AddLearner") {
		t.Errorf("etcd calls %v: no member added in its place (status %+v)", a.etcd.Calls, c.Status.Members)
	}
}

// A member whose node stopped answering keeps its pod's IP, and its etcd may serve there while its
// name resolves no more (the headless Service drops a pod that is not ready). Declared lost by a
// person, it is still probed at that IP, and answering there it holds the recovery.
func TestADeclaredLostMemberAnsweringAtItsPodIPHoldsTheRecovery(t *testing.T) {
	a, survivor, b, c := nodesOfTwoStoppedAnswering(t)
	a.annotateCluster(t, etcdv1alpha1.AnnotationLostMembers, b+","+c)
	bPod, _ := a.pod(t, b)
	a.listening[bPod.Status.PodIP+":2380"] = true
	survivorPod, _ := a.pod(t, survivor)

	cluster := a.reconcile(t, 3)
	if qr := cluster.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began while %s answers at its pod's IP %s: %+v", b, bPod.Status.PodIP, qr)
	}
	if pod, ok := a.pod(t, survivor); !ok || pod.UID != survivorPod.UID {
		t.Fatalf("the survivor was touched")
	}

	a.listening = map[string]bool{}
	if cluster = a.reconcile(t, 1); cluster.Status.QuorumRecovery == nil {
		t.Fatalf("no recovery began once nothing answered: the hold above was not the answer at the pod's IP")
	}
}
