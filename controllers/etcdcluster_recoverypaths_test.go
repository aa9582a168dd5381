package controllers

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Paths of the quorum-loss recovery that the model of the world (internal/membership's
// TestModelQuorumLossRecovery) found, each through whole reconciles.

func forceNewClusterAfter(after time.Duration) func(*etcdv1alpha1.EtcdCluster) {
	return func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryForceNewCluster, After: &metav1.Duration{Duration: after}}
	}
}

// setStatus changes the cluster's status as an earlier reconcile left it.
func (a *scriptedCluster) setStatus(t *testing.T, change func(*etcdv1alpha1.EtcdClusterStatus)) {
	t.Helper()
	c := &etcdv1alpha1.EtcdCluster{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), c); err != nil {
		t.Fatal(err)
	}
	change(&c.Status)
	if err := a.k8s.Status().Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

// deletePod deletes a member's pod, which is gone at once (its kubelet answers).
func (a *scriptedCluster) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := a.k8s.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	delete(a.etcd.Statuses, resources.ClientURL(a.cluster, name))
}

// pendingForAnHour makes a member's pod again as one that has found no node for an hour: its
// volume's node is gone (volume node affinity conflict).
func (a *scriptedCluster) pendingForAnHour(t *testing.T, name string) {
	t.Helper()
	a.deletePod(t, name)
	pending := resources.MemberPod(a.cluster, resources.MemberSpec{Name: name, Version: "3.6.16", Voter: true}, resources.EtcdImages{Repository: "registry.test/etcd"}, resources.PodSettings{})
	pending.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	if err := a.k8s.Create(t.Context(), pending); err != nil {
		t.Fatal(err)
	}
	pending.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/2 nodes are available: 2 node(s) had volume node affinity conflict"}}
	if err := a.k8s.Status().Update(t.Context(), pending); err != nil {
		t.Fatal(err)
	}
}

// answers makes a member answer its status call with raftIndex, as one running without a
// quorum does.
func (a *scriptedCluster) answers(name string, raftIndex uint64) {
	url := resources.ClientURL(a.cluster, name)
	st := a.etcd.Statuses[url]
	st.RaftIndex, st.RaftAppliedIndex, st.LeaderID = raftIndex, raftIndex, 0
	a.etcd.Statuses[url] = st
}

// After the force, the survivor serves alone and is restarted without --force-new-cluster: while
// its pod restarts etcd answers nothing, and the members the recovery did without, their claims
// still labelled, must not be made again. Restarted on their data, two of them are a quorum of
// the old membership, serving the old data beside the survivor.
func TestMembersARecoveryDidWithoutAreNeverRestartedOnTheirData(t *testing.T) {
	a := newScriptedCluster(t, 3, forceNewClusterAfter(2*time.Minute), nil)
	a.reconcile(t, 1)
	survivor, b, c := a.members[0], a.members[1], a.members[2]
	// The recovery has forced the survivor; b's and c's pods went with their node, their
	// claims are there.
	for _, name := range a.members {
		a.deletePod(t, name)
	}
	forced := resources.MemberPod(a.cluster, resources.MemberSpec{Name: survivor, Version: "3.6.16", ForceNewCluster: true, Voter: true}, resources.EtcdImages{Repository: "registry.test/etcd"}, resources.PodSettings{})
	forced.Status = corev1.PodStatus{PodIP: "10.0.0.1", Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := a.k8s.Create(t.Context(), forced); err != nil {
		t.Fatal(err)
	}
	if err := a.k8s.Status().Update(t.Context(), forced); err != nil {
		t.Fatal(err)
	}
	a.setStatus(t, func(s *etcdv1alpha1.EtcdClusterStatus) {
		now := metav1.Now()
		s.QuorumLostTime = &metav1.Time{Time: now.Add(-time.Hour)}
		s.QuorumRecovery = &etcdv1alpha1.QuorumRecoveryStatus{Member: survivor, LostMembers: []string{b, c}, Trigger: "spec.quorumLossRecovery.policy ForceNewCluster",
			StartTime: now, PreservedData: &etcdv1alpha1.PreservedDataStatus{ClaimName: "x"}, ForcedTime: &now}
	})
	url := resources.ClientURL(a.cluster, survivor)
	a.etcd.Statuses[url] = etcd.MemberStatus{MemberID: 1, LeaderID: 1, Version: "3.6.16", RaftIndex: 10, RaftAppliedIndex: 10}
	a.etcd.Members = a.etcd.Members[:1]

	cluster := a.reconcile(t, 1)
	if cluster.Status.QuorumRecovery.ServedTime == nil {
		t.Fatalf("servedTime not recorded: %+v", cluster.Status.QuorumRecovery)
	}
	if _, ok := a.pod(t, survivor); ok {
		t.Fatalf("the forced survivor serves but is not restarted without the flag")
	}
	a.etcd.NoQuorum = true // its pod restarts: nothing answers
	a.reconcile(t, 2)
	if _, ok := a.pod(t, survivor); !ok {
		t.Fatalf("the survivor is not restarted on its data")
	}
	for _, name := range []string{b, c} {
		if _, ok := a.pod(t, name); ok {
			t.Errorf("member %s, which the recovery did without, was restarted on its data: with the other, a quorum of the old membership", name)
		}
	}
}

// A member counted lost that answers its status call holds the recovery: declared lost by a
// person while it runs, it may hold the furthest log. Before the recovery begins, and once under
// way: it is not fenced.
func TestADeclaredLostMemberThatAnswersItsStatusHoldsTheRecovery(t *testing.T) {
	a := newScriptedCluster(t, 3, forceNewClusterAfter(0), nil)
	a.reconcile(t, 1)
	survivor, declared := a.members[0], a.members[1]
	a.loseForGood(t, a.members[2:])
	a.answers(survivor, 100)
	a.answers(declared, 150)
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	a.annotateCluster(t, etcdv1alpha1.AnnotationLostMembers, declared)

	cluster := a.reconcile(t, 2)
	if qr := cluster.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began from %s while %s, declared lost, answers with a longer log: %+v", qr.Member, declared, qr)
	}
	if d := conditionMessage(cluster, etcdv1alpha1.ConditionDegraded); !strings.Contains(d, "member "+declared+" answered its status call (raft index 150)") {
		t.Errorf("Degraded says %q: it must name the member that answers", d)
	}

	// Under way already (begun when it did not answer): it holds the fence too.
	a.setStatus(t, func(s *etcdv1alpha1.EtcdClusterStatus) {
		s.QuorumRecovery = &etcdv1alpha1.QuorumRecoveryStatus{Member: survivor, LostMembers: []string{declared, a.members[2]},
			Trigger: "spec.quorumLossRecovery.policy ForceNewCluster", StartTime: metav1.Now(), PreservedData: &etcdv1alpha1.PreservedDataStatus{ClaimName: "x"}}
	})
	declaredPod, _ := a.pod(t, declared)
	a.reconcile(t, 2)
	if pod, ok := a.pod(t, declared); !ok || pod.UID != declaredPod.UID || !pod.DeletionTimestamp.IsZero() {
		t.Fatalf("member %s was fenced while it answers its status call", declared)
	}
}

// A claim being deleted keeps its data while its pod runs (pvc-protection): its member, serving
// on it and answering, is not counted lost and fenced with its newer writes.
func TestAMemberWhoseClaimIsBeingDeletedIsNotFencedWhileItAnswers(t *testing.T) {
	a := newScriptedCluster(t, 3, forceNewClusterAfter(0), nil)
	a.reconcile(t, 1)
	survivor, leaving := a.members[0], a.members[1]
	a.loseForGood(t, a.members[2:])
	a.answers(survivor, 100)
	a.answers(leaving, 150)
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	claim := &corev1.PersistentVolumeClaim{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(leaving)}, claim); err != nil {
		t.Fatal(err)
	}
	claim.Finalizers = []string{"kubernetes.io/pvc-protection"}
	if err := a.k8s.Update(t.Context(), claim); err != nil {
		t.Fatal(err)
	}
	if err := a.k8s.Delete(t.Context(), claim); err != nil {
		t.Fatal(err)
	}
	leavingPod, _ := a.pod(t, leaving)

	cluster := a.reconcile(t, 4)
	if qr := cluster.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began from %s while %s answers on its claim being deleted: %+v", qr.Member, leaving, qr)
	}
	if pod, ok := a.pod(t, leaving); !ok || pod.UID != leavingPod.UID || !pod.DeletionTimestamp.IsZero() {
		t.Fatalf("member %s was stopped while it answers", leaving)
	}
	if d := conditionMessage(cluster, etcdv1alpha1.ConditionDegraded); !strings.Contains(d, "its claim being deleted while its pod runs on it") {
		t.Errorf("Degraded says %q: it must say the member answers on a claim being deleted", d)
	}
}

// A second loss while the recovery before it has served but the cluster has not grown back is
// recovered: a new record replaces the one that served, begun once, not again at every look.
func TestASecondLossBeforeTheClusterGrewBackIsRecovered(t *testing.T) {
	a := newScriptedCluster(t, 3, forceNewClusterAfter(0), nil)
	a.reconcile(t, 1)
	survivor := a.members[0]
	a.underwayQuorumRecovery(t, survivor, []string{"c-gone1", "c-gone2"})
	// c-gone1's claim is still the cluster's; c-gone2's is gone.
	if err := a.k8s.Create(t.Context(), resources.MemberPVC(a.cluster, resources.MemberSpec{Name: "c-gone1"})); err != nil {
		t.Fatal(err)
	}
	a.loseForGood(t, a.members[1:])
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	a.events()

	cluster := a.reconcile(t, 1)
	qr := cluster.Status.QuorumRecovery
	if qr == nil || qr.ServedTime != nil || qr.Member != survivor {
		t.Fatalf("status.quorumRecovery = %+v: want a new recovery from %s on record", qr, survivor)
	}
	if want := slices.Concat(a.members[1:], []string{"c-gone1"}); !slices.Equal(qr.LostMembers, want) {
		t.Errorf("lostMembers %v, want %v: the members lost now, and those of the earlier recovery whose claims must stay kept", qr.LostMembers, want)
	}
	a.reconcile(t, 2)
	if _, ok := a.pod(t, survivor); ok {
		t.Errorf("the survivor is not stopped for its copy: the new recovery does not go on")
	}
	if events := a.events(); strings.Count(events, "BeginRecovery") != 1 {
		t.Errorf("want one BeginRecovery event; got:\n%s", events)
	}
}

// A loss long after a recovery completed records only the members its own recovery does
// without: the earlier recovery's members, their claims gone, are not lost again (the record
// names the loss the user is asked about, and a restore from a backup is checked against it).
func TestALossAfterACompletedRecoveryRecordsOnlyTheMembersLostNow(t *testing.T) {
	a := newScriptedCluster(t, 3, forceNewClusterAfter(0), nil)
	a.reconcile(t, 1)
	a.setStatus(t, func(s *etcdv1alpha1.EtcdClusterStatus) {
		now := metav1.Now()
		s.QuorumRecovery = &etcdv1alpha1.QuorumRecoveryStatus{Member: a.members[0], LostMembers: []string{"c-old1", "c-old2"},
			Trigger: "spec.quorumLossRecovery.policy ForceNewCluster", StartTime: now, ForcedTime: &now, ServedTime: &now, CompletionTime: &now}
	})
	a.loseForGood(t, a.members[1:])
	a.quorumLostFor(t, membership.MinRecoveryAfter)

	qr := a.reconcile(t, 1).Status.QuorumRecovery
	if qr == nil || qr.CompletionTime != nil || qr.Member != a.members[0] {
		t.Fatalf("status.quorumRecovery = %+v: want a new recovery from %s on record", qr, a.members[0])
	}
	if !slices.Equal(qr.LostMembers, a.members[1:]) {
		t.Errorf("lostMembers %v, want %v: the members of a completed recovery, their claims gone, are not lost again", qr.LostMembers, a.members[1:])
	}
}

// A recovery whose member's data is gone before it served is given up, and the loss decided
// afresh: a cluster restored in place since (its members named anew) is not held by it at its
// next loss.
func TestARecoveryThatCannotBeCarriedThroughIsGivenUp(t *testing.T) {
	a := newScriptedCluster(t, 3, forceNewClusterAfter(0), nil)
	a.reconcile(t, 1)
	a.setStatus(t, func(s *etcdv1alpha1.EtcdClusterStatus) {
		s.QuorumRecovery = &etcdv1alpha1.QuorumRecoveryStatus{Member: "c-old", LostMembers: []string{"c-old1", "c-old2"},
			Trigger: "spec.quorumLossRecovery.policy ForceNewCluster", StartTime: metav1.NewTime(time.Now().Add(-time.Hour))}
	})
	cluster := a.reconcile(t, 1)
	qr := cluster.Status.QuorumRecovery
	if qr == nil || qr.CompletionTime == nil || !strings.Contains(qr.Abandoned, "serves again without member c-old") {
		t.Fatalf("status.quorumRecovery = %+v: the cluster serves without the recovery's member, which is given up", qr)
	}
	if events := a.events(); !strings.Contains(events, "QuorumRecoveryAbandoned") {
		t.Errorf("no QuorumRecoveryAbandoned event:\n%s", events)
	}

	a.loseForGood(t, a.members[1:])
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	cluster = a.reconcile(t, 1)
	if qr := cluster.Status.QuorumRecovery; qr == nil || qr.Member != a.members[0] || qr.CompletionTime != nil {
		t.Fatalf("status.quorumRecovery = %+v: the next loss is not recovered", qr)
	}
}

// A member whose node stopped answering, too few to serve a majority with the others out of
// sight, is waited for until its node has been gone for spec.quorumLossRecovery.after: it may
// come back with writes the survivors lack. Then the recovery does without it, its claim kept.
func TestAMemberOnANodeLostLatelyIsWaitedForBeforeTheRecoveryDoesWithoutIt(t *testing.T) {
	a := newScriptedCluster(t, 5, forceNewClusterAfter(10*time.Minute), nil)
	a.reconcile(t, 1)
	unreachable := a.members[2]
	a.loseForGood(t, a.members[3:])
	a.answers(a.members[0], 100)
	a.answers(a.members[1], 90)
	a.onLostNode(t, unreachable)
	pod, _ := a.pod(t, unreachable)
	pod.Status.Conditions[len(pod.Status.Conditions)-1].LastTransitionTime = metav1.NewTime(time.Now().Add(-3 * time.Minute))
	if err := a.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	a.quorumLostFor(t, 10*time.Hour)

	cluster := a.reconcile(t, 2)
	if qr := cluster.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began while %s's node stopped answering 3 minutes ago: %+v", unreachable, qr)
	}
	declare := etcdv1alpha1.AnnotationLostMembers + "=" + unreachable
	if d := conditionMessage(cluster, etcdv1alpha1.ConditionDegraded); !strings.Contains(d, "stopped answering less than 10m0s") || !strings.Contains(d, declare) {
		t.Errorf("Degraded says %q: it must say what it waits for and name %s", d, declare)
	}

	pod.Status.Conditions[len(pod.Status.Conditions)-1].LastTransitionTime = metav1.NewTime(time.Now().Add(-11 * time.Minute))
	if err := a.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	cluster = a.reconcile(t, 1)
	if qr := cluster.Status.QuorumRecovery; qr == nil || qr.Member != a.members[0] || !slices.Contains(qr.LostMembers, unreachable) {
		t.Fatalf("status.quorumRecovery = %+v: want a recovery from %s doing without %s", qr, a.members[0], unreachable)
	}
}

// The user may name a survivor whose log is shorter than another's; the other survivor is then
// done without like the lost members: stopped before the force, its claim kept rather than
// deleted as an orphan's.
func TestASurvivorNotChosenKeepsItsClaim(t *testing.T) {
	a := newScriptedCluster(t, 5, forceNewClusterAfter(0), nil)
	a.reconcile(t, 1)
	named, further := a.members[0], a.members[1]
	a.loseForGood(t, a.members[2:])
	a.answers(named, 100)
	a.answers(further, 150)
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	a.annotateCluster(t, etcdv1alpha1.AnnotationRecoverFrom, named)

	cluster := a.reconcile(t, 1)
	qr := cluster.Status.QuorumRecovery
	if qr == nil || qr.Member != named {
		t.Fatalf("status.quorumRecovery = %+v, want a recovery from %s, as annotated", qr, named)
	}
	if !slices.Contains(qr.LostMembers, further) || !keptFromRecovery(cluster, further) {
		t.Errorf("lostMembers %v lacks %s, whose log reaches further: its claim would be deleted as an orphan's", qr.LostMembers, further)
	}
}

// While a quorum serves, a member whose pod has found no node for spec.quorumLossRecovery.after
// (its volume's node deleted with its machine) is removed and replaced, not waited for as long
// as that node is gone.
func TestAMemberWhosePodFindsNoNodeIsReplacedWhileAQuorumServes(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{After: &metav1.Duration{Duration: 10 * time.Minute}}
	}, nil)
	a.reconcile(t, 1)
	stranded := a.members[2]
	a.pendingForAnHour(t, stranded)

	a.reconcile(t, 1)
	if !slices.Contains(a.etcd.Calls, "RemoveMember") {
		t.Fatalf("etcd calls %v: member %s, whose pod has found no node for an hour, is not removed", a.etcd.Calls, stranded)
	}
}

// The members out of sight are counted again before every step up to the force: a survivor
// whose node stops answering after the recovery began may, with the others out of sight, be a
// quorum of the old membership, and the force waits.
func TestMembersOutOfSightAreCountedAgainBeforeTheForce(t *testing.T) {
	a := newScriptedCluster(t, 5, forceNewClusterAfter(0), nil)
	a.reconcile(t, 1)
	survivor, other := a.members[0], a.members[1]
	a.loseForGood(t, a.members[4:])
	a.onLostNode(t, a.members[2])
	a.onLostNode(t, a.members[3])
	a.answers(survivor, 100)
	a.answers(other, 90)
	a.quorumLostFor(t, membership.MinRecoveryAfter)

	cluster := a.reconcile(t, 1)
	if qr := cluster.Status.QuorumRecovery; qr == nil || qr.Member != survivor || qr.RaftIndex != 100 {
		t.Fatalf("status.quorumRecovery = %+v, want a recovery from %s at raft index 100", qr, survivor)
	}
	a.onLostNode(t, other) // now three of five out of sight
	survivorPod, _ := a.pod(t, survivor)
	cluster = a.reconcile(t, 3)
	if pod, ok := a.pod(t, survivor); !ok || pod.UID != survivorPod.UID {
		t.Fatalf("the survivor was stopped for its copy while three members out of sight could be a quorum")
	}
	if d := conditionMessage(cluster, etcdv1alpha1.ConditionDegraded); !strings.Contains(d, "their etcd may still be serving a majority") {
		t.Errorf("Degraded says %q: it must say why the recovery waits", d)
	}
}

// A member the recovery did without that answers with a log further than its member's, before
// the force (counted lost while its pod found no node, then placed), gives the recovery up: the
// loss is decided afresh, on what is known now.
func TestAMemberDoneWithoutThatAnswersWithAFurtherLogGivesTheRecoveryUp(t *testing.T) {
	a := newScriptedCluster(t, 3, forceNewClusterAfter(0), nil)
	a.reconcile(t, 1)
	survivor, stranded := a.members[0], a.members[1]
	a.loseForGood(t, a.members[2:])
	a.answers(survivor, 100)
	a.pendingForAnHour(t, stranded)
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	cluster := a.reconcile(t, 1)
	if qr := cluster.Status.QuorumRecovery; qr == nil || qr.Member != survivor {
		t.Fatalf("status.quorumRecovery = %+v, want a recovery from %s", qr, survivor)
	}

	// Its node is back: the pod runs, and the member answers with a further log.
	placed, _ := a.pod(t, stranded)
	placed.Spec.NodeName = "node-back"
	if err := a.k8s.Update(t.Context(), placed); err != nil {
		t.Fatal(err)
	}
	placed.Status = corev1.PodStatus{PodIP: "10.0.0.2", Phase: corev1.PodRunning}
	if err := a.k8s.Status().Update(t.Context(), placed); err != nil {
		t.Fatal(err)
	}
	a.etcd.Statuses[resources.ClientURL(a.cluster, stranded)] = etcd.MemberStatus{MemberID: 2, Version: "3.6.16", RaftIndex: 150, RaftAppliedIndex: 150}
	cluster = a.reconcile(t, 1)
	qr := cluster.Status.QuorumRecovery
	if qr == nil || qr.CompletionTime == nil || !strings.Contains(qr.Abandoned, "answers with its log at 150") {
		t.Fatalf("status.quorumRecovery = %+v: the recovery must be given up while %s answers with a further log", qr, stranded)
	}
	if pod, ok := a.pod(t, stranded); !ok || !pod.DeletionTimestamp.IsZero() {
		t.Fatalf("member %s, whose log reaches further, was stopped", stranded)
	}
}

// A member that answers its status and follows a leader holds the recovery: etcd answered the
// operator no member list, yet a quorum leads somewhere it does not reach.
func TestAMemberFollowingALeaderHoldsTheRecovery(t *testing.T) {
	a := lostMajority(t, etcdv1alpha1.QuorumLossRecoveryForceNewCluster)
	survivor := a.members[0]
	a.etcd.LeaderWithoutQuorum = true
	st := a.etcd.Statuses[resources.ClientURL(a.cluster, survivor)]
	st.LeaderID = 7
	a.etcd.Statuses[resources.ClientURL(a.cluster, survivor)] = st

	cluster := a.reconcile(t, 2)
	if qr := cluster.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began while %s follows a leader: %+v", survivor, qr)
	}
	if d := conditionMessage(cluster, etcdv1alpha1.ConditionDegraded); !strings.Contains(d, "member "+survivor+" follows a leader (ID 7)") {
		t.Errorf("Degraded says %q: it must name the member that follows a leader", d)
	}
	a.etcd.LeaderWithoutQuorum = false
	if cluster = a.reconcile(t, 1); cluster.Status.QuorumRecovery == nil {
		t.Fatalf("no recovery once no member follows a leader")
	}
}

// A leave already on the cluster when its quorum loss is first observed was given before that
// loss: it is removed, with an event, and nothing is recovered on it, whatever the managed fields
// say of its time (a field manager's time is that of its last write of any field).
func TestALeaveGivenBeforeTheLossIsObservedIsRemoved(t *testing.T) {
	a := newScriptedCluster(t, 3, forceNewClusterAfter(0), nil)
	a.reconcile(t, 1)
	a.loseForGood(t, a.members[1:])
	a.annotateCluster(t, etcdv1alpha1.AnnotationRecoverFrom, a.members[0])
	a.events()

	cluster := a.reconcile(t, 2) // the removal, then the loss on record
	if _, ok := cluster.Annotations[etcdv1alpha1.AnnotationRecoverFrom]; ok {
		t.Fatalf("recover-from, set before the loss was observed, is kept")
	}
	if qr := cluster.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began on a leave given before the loss: %+v", qr)
	}
	if events := a.events(); !strings.Contains(events, "AnnotationIgnored") || !strings.Contains(events, "set before this quorum loss was observed") {
		t.Errorf("want an AnnotationIgnored event saying why; got:\n%s", events)
	}
	a.annotateCluster(t, etcdv1alpha1.AnnotationRecoverFrom, a.members[0])
	if cluster = a.reconcile(t, 1); cluster.Status.QuorumRecovery == nil {
		t.Fatalf("no recovery on a leave given once the loss was observed: %s", conditionMessage(cluster, etcdv1alpha1.ConditionDegraded))
	}
}

// With authentication on, the operator's password login needs a quorum (etcd issues its
// token through raft): once the members' tokens of before are gone (they restarted), no
// survivor answered the operator, and a recovery with two survivors first read their logs from
// their data, with a Job each. A TLS member takes the operator's client certificate, root's,
// without a login: the survivors answer their status, and the recovery builds on the one
// whose log reaches furthest at once.
func TestWithoutAQuorumATLSClusterWithAuthAnswersByRootsCertificate(t *testing.T) {
	rootSecret := func() []client.Object {
		return []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "ns"}, Data: map[string][]byte{"password": []byte("secret")}}}
	}
	a := newScriptedCluster(t, 5, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.TLS = &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderOperator}
		c.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: "root"}
		forceNewClusterAfter(0)(c)
	}, rootSecret)
	a.etcd.AuthEnabled, a.etcd.RootUser, a.etcd.RootPassword = true, true, "secret"
	a.reconcile(t, 2)
	a.loseForGood(t, a.members[2:])
	a.answers(a.members[0], 20)
	a.answers(a.members[1], 30)
	a.r.Etcd.Forget(client.ObjectKeyFromObject(a.cluster).String()) // the survivors restarted: the token of before is gone
	a.quorumLostFor(t, membership.MinRecoveryAfter)

	c := a.reconcile(t, 1)
	if qr := c.Status.QuorumRecovery; qr == nil || qr.Member != a.members[1] || qr.RaftIndex != 30 {
		t.Fatalf("status.quorumRecovery %+v: want a recovery from %s, whose log reaches 30, the survivors' status answered by root's certificate", qr, a.members[1])
	}
	jobs := &batchv1.JobList{}
	if err := a.k8s.List(t.Context(), jobs); err != nil || len(jobs.Items) != 0 {
		t.Errorf("Jobs %d (%v): none needed to read logs the survivors report themselves", len(jobs.Items), err)
	}
}
