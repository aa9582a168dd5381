package controllers

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
)

func TestLowestVersionComparesNumbers(t *testing.T) {
	members := []etcdv1alpha1.MemberStatus{{Version: "3.10.0"}, {Version: "3.9.2"}, {}, {Version: "3.9.10"}}
	if got := lowestVersion(members); got != "3.9.2" {
		t.Fatalf("lowestVersion = %q, want 3.9.2", got)
	}
}

func TestConditionsTellQuorumLossAndWhatTheDecisionSaysOfIt(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{}
	c.Status.ClusterID = "abc"
	c.Status.Members = []etcdv1alpha1.MemberStatus{{Name: "a"}, {Name: "b"}, {Name: "c", Healthy: true}}
	c.Status.ReadyMembers = 1
	manual := "quorum is lost for good (members a, b lost their data); member c has the most recent data. To recover from it, annotate"
	setConditions(c, &observation{}, 3, membership.Step{Action: membership.Wait, Member: "c", Operation: membership.OpQuorumLost, Reason: manual}, nil)

	available := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionAvailable)
	if available.Status != "False" || available.Reason != etcdv1alpha1.ReasonQuorumLost || !strings.Contains(available.Message, manual) {
		t.Errorf("Available = %+v", available)
	}
	if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d.Status != "True" || d.Reason != etcdv1alpha1.ReasonQuorumLost || !strings.Contains(d.Message, manual) {
		t.Errorf("Degraded = %+v: its event must name the survivor and the command", d)
	}
	if p := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing); p.Status != "False" {
		t.Errorf("Progressing = %+v: waiting for members to come back is not progress", p)
	}

	recovering := membership.Step{Action: membership.PreserveData, Member: "c", Operation: membership.OpRecoveringQuorum, Reason: "stopping member c and keeping a copy"}
	setConditions(c, &observation{}, 3, recovering, nil)
	if p := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing); p.Status != "True" || p.Reason != etcdv1alpha1.ReasonRecoveringQuorum {
		t.Errorf("Progressing = %+v: a recovery is under way", p)
	}
}

func TestAlarmsMakeTheClusterDegradedNotUnavailable(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{}
	c.Status.ClusterID = "abc"
	for _, name := range []string{"a", "b", "c"} {
		c.Status.Members = append(c.Status.Members, etcdv1alpha1.MemberStatus{Name: name, Healthy: true, Errors: []string{"alarm: NOSPACE"}})
	}
	c.Status.ReadyMembers = 3
	setConditions(c, withPods(&observation{reachable: true}, readyPod("a"), readyPod("b"), readyPod("c")), 3,
		membership.Step{Action: membership.Defragment, Operation: membership.OpDefragmenting}, nil)
	if !meta.IsStatusConditionTrue(c.Status.Conditions, etcdv1alpha1.ConditionAvailable) {
		t.Error("a NOSPACE cluster still serves reads: it must stay Available")
	}
	if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d.Reason != etcdv1alpha1.ReasonAlarm || !strings.Contains(d.Message, "NOSPACE") {
		t.Errorf("Degraded = %+v", d)
	}
}

func withPods(obs *observation, pods ...*corev1.Pod) *observation {
	obs.pods = map[string]*corev1.Pod{}
	for _, p := range pods {
		obs.pods[p.Name] = p
	}
	obs.diagnosePods()
	return obs
}

func readyPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
		Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}}
}

func waitingPod(name, reason, message string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
		Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "etcd", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message},
		}}},
	}}
}

func unschedulablePod(name, message string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
		Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: message}},
	}}
}

// Seen as a new user would: a version with no image, a StorageClass that does not exist, and
// requests no node can meet all left the cluster "Degraded=False: every member is healthy"
// while it never formed. Status must name the member and the cause, during bootstrap too.
func TestMembersThatCannotRunAreNamedWithTheirCause(t *testing.T) {
	pending := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-c"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	obs := withPods(&observation{},
		waitingPod("a", "ImagePullBackOff", `Back-off pulling image "etcd:v3.6.99"`),
		unschedulablePod("b", "0/1 nodes are available: 1 Insufficient cpu."),
		unschedulablePod("c", `0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.`),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
	)
	obs.pvcs = map[string]*corev1.PersistentVolumeClaim{"c": pending}
	obs.diagnosePods()
	c := &etcdv1alpha1.EtcdCluster{}
	setConditions(c, obs, 0, membership.Step{Action: membership.Wait, Operation: membership.OpBootstrapping, Reason: "waiting"}, nil)

	d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	if d == nil || d.Status != metav1.ConditionTrue || d.Reason != etcdv1alpha1.ReasonMembersNotRunning {
		t.Fatalf("Degraded = %+v, want True/MembersNotRunning", d)
	}
	for _, part := range []string{"a: ImagePullBackOff", "etcd:v3.6.99", "b: Unschedulable", "Insufficient cpu", "c: Unschedulable", "claim data-c is Pending"} {
		if !strings.Contains(d.Message, part) {
			t.Errorf("Degraded message %q does not say %q", d.Message, part)
		}
	}
	if strings.Contains(d.Message, "d: ") {
		t.Errorf("a pod merely starting is reported as a problem: %q", d.Message)
	}
}

// A bootstrap where nothing is wrong yet is not Degraded, and does not claim health either.
func TestAFormingClusterDoesNotClaimHealthyMembers(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{}
	setConditions(c, withPods(&observation{}, readyPod("a")), 0, membership.Step{Action: membership.Wait, Operation: membership.OpBootstrapping, Reason: "waiting"}, nil)
	d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	if d.Status != metav1.ConditionFalse || strings.Contains(d.Message, "every member is healthy") {
		t.Errorf("Degraded = %+v", d)
	}
}

// Available means a client can be served: etcd's quorum is not enough while the client Service
// has fewer than a quorum of Ready member pods to send clients to.
func TestAvailableWaitsForReadyMemberPods(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{}
	c.Status.ClusterID = "abc"
	for _, name := range []string{"a", "b", "c"} {
		c.Status.Members = append(c.Status.Members, etcdv1alpha1.MemberStatus{Name: name, Healthy: true})
	}
	c.Status.ReadyMembers = 3
	notReady := func(name string) *corev1.Pod { p := readyPod(name); p.Status.Conditions = nil; return p }
	setConditions(c, withPods(&observation{reachable: true}, readyPod("a"), notReady("b"), notReady("c")), 3, membership.Step{Action: membership.Wait}, nil)
	if a := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionAvailable); a.Status != metav1.ConditionFalse || a.Reason != etcdv1alpha1.ReasonMembersNotReady {
		t.Errorf("Available = %+v with one Ready member pod of three", a)
	}
	setConditions(c, withPods(&observation{reachable: true}, readyPod("a"), readyPod("b"), notReady("c")), 3, membership.Step{Action: membership.Wait}, nil)
	if !meta.IsStatusConditionTrue(c.Status.Conditions, etcdv1alpha1.ConditionAvailable) {
		t.Error("two Ready member pods of three serve clients: Available must be True")
	}
}

// etcd answered a linearizable member list, so a quorum is serving, even while no member pod is
// Ready yet: just after a cluster forms, or a restored one starts. Status said "quorum is lost"
// for that second or two, with a Warning event, on every new cluster.
func TestAClusterWhoseEtcdAnswersHasNotLostItsQuorum(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{}
	c.Status.ClusterID = "abc"
	for _, name := range []string{"a", "b", "c"} {
		c.Status.Members = append(c.Status.Members, etcdv1alpha1.MemberStatus{Name: name, Errors: []string{"pod not ready"}})
	}
	notReady := func(name string) *corev1.Pod { p := readyPod(name); p.Status.Conditions = nil; return p }
	setConditions(c, withPods(&observation{reachable: true}, notReady("a"), notReady("b"), notReady("c")), 3, membership.Step{Action: membership.Wait}, nil)
	for _, condType := range []string{etcdv1alpha1.ConditionAvailable, etcdv1alpha1.ConditionDegraded} {
		if cond := meta.FindStatusCondition(c.Status.Conditions, condType); cond.Reason == etcdv1alpha1.ReasonQuorumLost || strings.Contains(cond.Message, "quorum is lost") {
			t.Errorf("%s = %+v while etcd answers", condType, cond)
		}
	}
	if a := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionAvailable); a.Status != metav1.ConditionFalse || a.Reason != etcdv1alpha1.ReasonMembersNotReady {
		t.Errorf("Available = %+v with no member healthy and Ready", a)
	}
	if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d.Reason != etcdv1alpha1.ReasonMembersUnhealthy || !strings.Contains(d.Message, "a (pod not ready)") {
		t.Errorf("Degraded = %+v: it must name the members and why", d)
	}

	// Once etcd stops answering, the quorum is lost.
	setConditions(c, withPods(&observation{}, notReady("a"), notReady("b"), notReady("c")), 3, membership.Step{Action: membership.Wait}, nil)
	for _, condType := range []string{etcdv1alpha1.ConditionAvailable, etcdv1alpha1.ConditionDegraded} {
		if cond := meta.FindStatusCondition(c.Status.Conditions, condType); cond.Reason != etcdv1alpha1.ReasonQuorumLost {
			t.Errorf("%s = %+v while etcd does not answer", condType, cond)
		}
	}
}

// A reconcile that starts from a cache not yet holding the status the one before wrote
// computes the same Degraded again; its status patch is refused, and so must its event be.
// Announced before the patch, the same Warning was posted twice, and the event recorder, racing
// its own create of the first, kept both (seen once in
// TestAPodStuckBeforeRunningIsNamedWithTheCauseItsEventsGive under load).
func TestAStatusChangeIsAnnouncedOnceWhenWritten(t *testing.T) {
	cluster := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cluster).WithStatusSubresource(cluster).Build()
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(cluster), cluster); err != nil {
		t.Fatal(err)
	}
	recorder := events.NewFakeRecorder(10)
	r := &EtcdClusterReconciler{Client: k8s, Recorder: recorder}
	stale := cluster.DeepCopy() // as both reconciles read it
	degrade := func() *etcdv1alpha1.EtcdCluster {
		c := stale.DeepCopy()
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonMembersNotRunning, "members not running: c-abc12: Multi-Attach error")
		return c
	}
	if err := r.writeStatus(t.Context(), degrade(), stale, true); err != nil {
		t.Fatal(err)
	}
	if err := r.writeStatus(t.Context(), degrade(), stale, true); !apierrors.IsConflict(err) {
		t.Fatalf("the second write from the stale object: %v, want a conflict", err)
	}
	if n := len(recorder.Events); n != 1 {
		t.Errorf("%d events for one change of Degraded, want 1", n)
	}
}

// A two-member cluster is allowed, and status says it tolerates no failure.
func TestTwoMembersAreWarnedOf(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{Spec: etcdv1alpha1.EtcdClusterSpec{Size: 2}}
	c.Status.ClusterID = "abc"
	c.Status.Members = []etcdv1alpha1.MemberStatus{{Name: "a", Healthy: true}, {Name: "b", Healthy: true}}
	c.Status.ReadyMembers = 2
	setConditions(c, withPods(&observation{reachable: true}, readyPod("a"), readyPod("b")), 2, membership.Step{Action: membership.Wait}, nil)
	if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d.Reason != etcdv1alpha1.ReasonNoFaultTolerance {
		t.Errorf("Degraded = %+v", d)
	}
}

// A quota the volume cannot hold is reported with the fix: admission cannot refuse it without
// making clusters created under the earlier 2Gi default on smaller volumes uneditable.
func TestQuotaNotBelowTheVolumeIsReported(t *testing.T) {
	size, quota := resource.MustParse("1Gi"), resource.MustParse("2Gi")
	c := &etcdv1alpha1.EtcdCluster{Spec: etcdv1alpha1.EtcdClusterSpec{Size: 1,
		Storage: etcdv1alpha1.StorageSpec{Size: &size}, Tuning: etcdv1alpha1.EtcdTuning{QuotaBackendBytes: &quota}}}
	c.Status.ClusterID = "abc"
	c.Status.Members = []etcdv1alpha1.MemberStatus{{Name: "a", Healthy: true}}
	c.Status.ReadyMembers = 1
	setConditions(c, withPods(&observation{reachable: true}, readyPod("a")), 1, membership.Step{Action: membership.Wait}, nil)
	d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	if d.Reason != etcdv1alpha1.ReasonQuotaNotBelowStorage || !strings.Contains(d.Message, "(2Gi) is not below the member's volume (1Gi)") {
		t.Errorf("Degraded = %+v", d)
	}
	quota = resource.MustParse("768Mi")
	setConditions(c, withPods(&observation{reachable: true}, readyPod("a")), 1, membership.Step{Action: membership.Wait}, nil)
	if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d.Status != metav1.ConditionFalse {
		t.Errorf("a quota below the volume: Degraded = %+v", d)
	}
}

// Status names every member that runs an outdated spec, not only the one being restarted: a
// podTemplate change outdates all three members, and the first reconcile restarts only one.
func TestStatusNamesEveryOutdatedMember(t *testing.T) {
	s := newScriptedCluster(t, 3, nil, nil)
	cluster := &etcdv1alpha1.EtcdCluster{}
	if err := s.k8s.Get(t.Context(), client.ObjectKeyFromObject(s.cluster), cluster); err != nil {
		t.Fatal(err)
	}
	cluster.Spec.PodTemplate.Metadata.Labels = map[string]string{"team": "storage"}
	if err := s.k8s.Update(t.Context(), cluster); err != nil {
		t.Fatal(err)
	}
	got := s.reconcile(t, 1)
	var outdated []string
	for _, m := range got.Status.Members {
		if m.Outdated {
			outdated = append(outdated, m.Name)
		}
	}
	if len(outdated) != 3 {
		t.Fatalf("outdated members in status: %v, want all three (members %+v)", outdated, got.Status.Members)
	}
	if p := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionProgressing); p == nil || p.Reason != etcdv1alpha1.ReasonRollingOut {
		t.Fatalf("Progressing %+v, want RollingOut", p)
	}
}

// status.operation says what is under way and since when: its start stays while the operation
// does, a new one starts afresh, and a steady cluster shows none. Before, nothing wrote it,
// although the API documented it.
func TestStatusReportsTheOperationUnderWayAndSinceWhen(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{}
	c.Status.ClusterID = "abc"
	obs := &observation{reachable: true, access: &access{}}
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		step      membership.Step
		at        time.Time
		wantType  string
		wantSince time.Time
	}{
		{membership.Step{Action: membership.AddLearner, Member: "c-d", Operation: membership.OpScalingUp}, t0, membership.OpScalingUp, t0},
		{membership.Step{Action: membership.PromoteLearner, Member: "c-d", Operation: membership.OpScalingUp}, t0.Add(time.Minute), membership.OpScalingUp, t0},
		{membership.Step{Action: membership.RollMember, Member: "c-a", Operation: membership.OpUpgrading}, t0.Add(2 * time.Minute), membership.OpUpgrading, t0.Add(2 * time.Minute)},
		{membership.Step{Action: membership.Wait, Operation: membership.OpNone}, t0.Add(3 * time.Minute), "", time.Time{}},
	}
	for i, s := range steps {
		report(c, obs, s.step, nil, s.at)
		op := c.Status.Operation
		if s.wantType == "" {
			if op != nil {
				t.Fatalf("step %d: a steady cluster reports operation %+v", i, op)
			}
			continue
		}
		if op == nil || op.Type != s.wantType || !op.StartTime.Time.Equal(s.wantSince) || op.Action != string(s.step.Action) || len(op.Members) != 1 || op.Members[0] != s.step.Member {
			t.Fatalf("step %d: operation %+v, want %s %s on %s since %s", i, op, s.wantType, s.step.Action, s.step.Member, s.wantSince)
		}
	}
}

// When the operator cannot reach etcd (credentials refused, TLS material unusable), Available
// is Unknown, not the last value it saw: status says only what was observed. Before, a cluster
// last seen Available stayed True however long the operator was locked out.
func TestLockedOutOperatorDoesNotClaimTheClusterAvailable(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{}
	setCondition(c, etcdv1alpha1.ConditionAvailable, metav1.ConditionTrue, etcdv1alpha1.ReasonQuorumHealthy, "3 of 3")
	setAccessError(c, &accessError{reason: etcdv1alpha1.ReasonCredentialsRejected, err: errors.New("etcd refuses the root password")})
	available := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionAvailable)
	if available.Status != metav1.ConditionUnknown || available.Reason != etcdv1alpha1.ReasonCredentialsRejected {
		t.Fatalf("Available = %+v, want Unknown CredentialsRejected", available)
	}
}

// status.highestRevision is a high-water mark: the highest revision any member answered with,
// kept while no member answers and when a restore takes the keyspace back.
func TestHighestRevisionNeverGoesDown(t *testing.T) {
	var highest int64
	looks := []struct {
		revisions []int64
		want      int64
	}{
		{[]int64{90, 120, 100}, 120},
		{nil, 120},               // quorum lost: nobody answers
		{[]int64{7, 8}, 120},     // restored to an older revision without a bump
		{[]int64{130, 125}, 130}, // writes go on
	}
	for i, look := range looks {
		obs := &observation{statuses: map[uint64]etcd.MemberStatus{}}
		for j, rev := range look.revisions {
			obs.statuses[uint64(j+1)] = etcd.MemberStatus{Revision: rev}
		}
		if highest = highestRevision(highest, obs); highest != look.want {
			t.Errorf("look %d (members at %v): highestRevision %d, want %d", i, look.revisions, highest, look.want)
		}
	}
}
