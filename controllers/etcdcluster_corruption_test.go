package controllers

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A member etcd raised CORRUPT for is reported (Degraded, a Warning naming it and the
// evidence), taken out of the client Service with its pod left running, removed, and its claim
// kept, released from the cluster; the alarm is left raised until the replacement is healthy.
func TestACorruptMemberIsReportedFencedRemovedAndItsClaimKept(t *testing.T) {
	a := newScriptedCluster(t, 3, nil, nil)
	bad := a.members[2]
	badURL := resources.ClientURL(a.cluster, bad)
	for url, st := range a.etcd.Statuses {
		st.Alarms, st.CorruptMembers = []string{"CORRUPT"}, []uint64{3}
		a.etcd.Statuses[url] = st
	}

	got := a.reconcile(t, 1)
	if degradedReason(got) != etcdv1alpha1.ReasonCorruptMember {
		t.Fatalf("Degraded %q, want %s: %+v", degradedReason(got), etcdv1alpha1.ReasonCorruptMember, got.Status.Conditions)
	}
	if len(got.Status.CorruptMembers) != 1 || got.Status.CorruptMembers[0].Name != bad || got.Status.CorruptMembers[0].ID != "3" ||
		!strings.Contains(got.Status.CorruptMembers[0].Evidence, "CORRUPT alarm") {
		t.Fatalf("status.corruptMembers %+v", got.Status.CorruptMembers)
	}
	if events := a.events(); !strings.Contains(events, "Warning") || !strings.Contains(events, bad) || !strings.Contains(events, "CORRUPT") {
		t.Fatalf("no Warning naming %s and the evidence: %s", bad, events)
	}
	pod := &corev1.Pod{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: bad}, pod); err != nil {
		t.Fatalf("the corrupt member's pod was deleted, not fenced: %v", err)
	}
	if !resources.Fenced(pod) || pod.Labels[resources.LabelServesClients] != "" {
		t.Fatalf("the corrupt member's pod still serves clients: labels %v", pod.Labels)
	}

	a.reconcile(t, 1)
	if slices.ContainsFunc(a.etcd.Members, func(m etcd.Member) bool { return m.ID == 3 }) {
		t.Fatalf("not removed: calls %v", a.etcd.Calls)
	}
	delete(a.etcd.Statuses, badURL)
	got = a.reconcile(t, 2)
	pvc := &corev1.PersistentVolumeClaim{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(bad)}, pvc); err != nil {
		t.Fatalf("the corrupt member's claim was deleted: %v", err)
	}
	if pvc.Labels[resources.LabelCluster] != "" || pvc.Labels["etcd.database.dev/retained-from"] != "c" {
		t.Fatalf("the claim is not released from the cluster: %v", pvc.Labels)
	}
	if slices.Contains(a.etcd.Calls, "DisarmCorrupt") {
		t.Fatalf("disarmed before the replacement is healthy: %v", a.etcd.Calls)
	}
	if len(got.Status.CorruptMembers) != 1 {
		t.Fatalf("the record went while the alarm is raised: %+v", got.Status.CorruptMembers)
	}
}

// The alarm of a replaced member is cleared once every member is healthy again, and its record
// then goes.
func TestTheCorruptAlarmOfAReplacedMemberIsClearedOnceAllAreHealthy(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Status.CorruptMembers = []etcdv1alpha1.CorruptMember{{Name: "c-gone", ID: "9", Evidence: "etcd raised a CORRUPT alarm for member 9"}}
	}, nil)
	for url, st := range a.etcd.Statuses {
		st.Alarms, st.CorruptMembers = []string{"CORRUPT"}, []uint64{9}
		a.etcd.Statuses[url] = st
	}
	got := a.reconcile(t, 1)
	if !slices.Contains(a.etcd.Calls, "DisarmCorrupt") {
		t.Fatalf("not disarmed: calls %v, operation %+v", a.etcd.Calls, got.Status.Operation)
	}
	got = a.reconcile(t, 1)
	if len(got.Status.CorruptMembers) != 0 || degradedReason(got) == etcdv1alpha1.ReasonCorruptMember {
		t.Fatalf("record %+v, Degraded %q after the alarm was cleared", got.Status.CorruptMembers, degradedReason(got))
	}
}

// A member whose start-up check refused to start it is found from its container's last exit.
func TestAMemberRefusedByItsStartupCheckIsFoundCorrupt(t *testing.T) {
	a := newScriptedCluster(t, 3, nil, nil)
	bad := a.members[1]
	pod := &corev1.Pod{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: bad}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", RestartCount: 3,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
			Message: `{"level":"fatal","msg":"discovery failed","error":"8e9e05c52164694d found data inconsistency with peers"}`}}}}
	pod.Status.Conditions = nil
	if err := a.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	delete(a.etcd.Statuses, resources.ClientURL(a.cluster, bad))
	got := a.reconcile(t, 1)
	if len(got.Status.CorruptMembers) != 1 || got.Status.CorruptMembers[0].Name != bad || !strings.Contains(got.Status.CorruptMembers[0].Evidence, "start-up check") {
		t.Fatalf("status.corruptMembers %+v", got.Status.CorruptMembers)
	}
	if degradedReason(got) != etcdv1alpha1.ReasonCorruptMember {
		t.Fatalf("Degraded %q", degradedReason(got))
	}
}

// The operator's comparison runs when due, and names the minority; a cluster found consistent
// is not compared again before the interval.
func TestTheConsistencyCheckRunsWhenDueAndNamesTheMinority(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.CorruptionCheck.Interval = nil
	}, nil)
	now := time.Now()
	obs := &observation{reachable: true, members: a.etcd.Members, unhealthy: map[uint64]string{}}
	if !consistencyCheckDue(a.cluster, obs, now) {
		t.Fatal("never compared: not due")
	}
	a.cluster.Status.LastConsistencyCheck = &etcdv1alpha1.ConsistencyCheck{Result: etcdv1alpha1.ConsistencyConsistent}
	a.cluster.Status.LastConsistencyCheck.Time.Time = now.Add(-3 * time.Hour)
	if consistencyCheckDue(a.cluster, obs, now) {
		t.Fatal("due 3h after the last, with the default interval of 4h")
	}
	if !consistencyCheckDue(a.cluster, obs, now.Add(time.Hour)) {
		t.Fatal("not due 4h after the last")
	}
	obs.pods = map[string]*corev1.Pod{"c-m0001": {Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "etcd",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-4 * time.Hour))}}}}}}}
	if consistencyCheckDue(a.cluster, obs, now) {
		t.Fatal("due for a member that started before the last comparison")
	}
	obs.pods["c-m0001"].Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(now.Add(-time.Minute))
	if !consistencyCheckDue(a.cluster, obs, now) {
		t.Fatal("not due for a member whose etcd started since the last comparison")
	}
	obs.pods = nil
	a.cluster.Spec.CorruptionCheck.Policy = etcdv1alpha1.CorruptionCheckDisabled
	if consistencyCheckDue(a.cluster, obs, now.Add(time.Hour)) {
		t.Fatal("due with policy Disabled")
	}
	a.cluster.Spec.CorruptionCheck.Policy = etcdv1alpha1.CorruptionCheckEnabled
	obs.unhealthy[2] = "pod not ready"
	if consistencyCheckDue(a.cluster, obs, now.Add(time.Hour)) {
		t.Fatal("due with a member unhealthy")
	}

	// A result taken by the next look: recorded, and the minority found corrupt.
	key := client.ObjectKeyFromObject(a.cluster).String()
	a.r.consistency.start(key, func() *consistencyResult {
		return &consistencyResult{Time: now, Revision: 42, Consistency: membership.Consistency{Result: etcdv1alpha1.ConsistencyDiverged,
			Diverged: []string{a.members[2]}, Message: "hash@compaction: ..."}}
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a.r.consistency.mu.Lock()
		done := len(a.r.consistency.results) > 0
		a.r.consistency.mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
	}
	got := a.reconcile(t, 1)
	if got.Status.LastConsistencyCheck == nil || got.Status.LastConsistencyCheck.Revision != 42 || got.Status.LastConsistencyCheck.Result != etcdv1alpha1.ConsistencyDiverged {
		t.Fatalf("lastConsistencyCheck %+v", got.Status.LastConsistencyCheck)
	}
	if len(got.Status.CorruptMembers) != 1 || got.Status.CorruptMembers[0].Name != a.members[2] || !strings.Contains(got.Status.CorruptMembers[0].Evidence, "revision 42") {
		t.Fatalf("status.corruptMembers %+v", got.Status.CorruptMembers)
	}
}

// The claim of a member found corrupt is kept when the member goes even where the reconcile that
// removes it reads a cluster whose status does not list it yet (a cache behind the status
// written a moment before, or that write lost to a conflict): the evidence is read again from
// the member, and the claim carries it from the first look.
func TestACorruptMembersClaimIsKeptWhenStatusHasNotRecordedItYet(t *testing.T) {
	a := newScriptedCluster(t, 3, nil, nil)
	bad := a.members[2]
	for url, st := range a.etcd.Statuses {
		st.Alarms, st.CorruptMembers = []string{"CORRUPT"}, []uint64{3}
		a.etcd.Statuses[url] = st
	}
	a.reconcile(t, 1) // found, fenced
	pvc := &corev1.PersistentVolumeClaim{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(bad)}, pvc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pvc.Annotations[resources.AnnotationCorruptEvidence], "CORRUPT alarm") {
		t.Fatalf("the claim does not carry the evidence: annotations %v", pvc.Annotations)
	}

	a.setStatus(t, func(s *etcdv1alpha1.EtcdClusterStatus) { s.CorruptMembers = nil })
	a.reconcile(t, 1) // removed
	if slices.ContainsFunc(a.etcd.Members, func(m etcd.Member) bool { return m.ID == 3 }) {
		t.Fatalf("not removed: calls %v", a.etcd.Calls)
	}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(bad)}, pvc); err != nil {
		t.Fatalf("the corrupt member's claim was deleted: %v", err)
	}
	if pvc.Labels[resources.LabelCluster] != "" || pvc.Labels["etcd.database.dev/retained-from"] != "c" {
		t.Fatalf("the claim is not released from the cluster: %v", pvc.Labels)
	}
}

// A claim that carries corruption evidence is kept by the orphan clean-up even when neither
// status nor this look at the cluster names its member (the member already out of etcd, its
// pod gone, the status that named it not written).
func TestAnOrphanClaimCarryingCorruptionEvidenceIsKept(t *testing.T) {
	a := newScriptedCluster(t, 3, nil, nil)
	bad := a.members[2]
	pvc := &corev1.PersistentVolumeClaim{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(bad)}, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Annotations = map[string]string{resources.AnnotationCorruptEvidence: "etcd raised a CORRUPT alarm for member 3"}
	if err := a.k8s.Update(t.Context(), pvc); err != nil {
		t.Fatal(err)
	}
	a.etcd.Members = slices.DeleteFunc(a.etcd.Members, func(m etcd.Member) bool { return m.ID == 3 })
	delete(a.etcd.Statuses, resources.ClientURL(a.cluster, bad))
	a.deletePod(t, bad)
	a.reconcile(t, 1)
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(bad)}, pvc); err != nil {
		t.Fatalf("the claim carrying corruption evidence was deleted: %v (calls %v)", err, a.etcd.Calls)
	}
	if pvc.Labels[resources.LabelCluster] != "" || pvc.Labels["etcd.database.dev/retained-from"] != "c" {
		t.Fatalf("the claim is not released from the cluster: %v", pvc.Labels)
	}
}
