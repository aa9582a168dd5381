package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// etcd lists the members of the initial cluster by name from --initial-cluster before they have
// ever run; only a member that started has published its client URLs. Two bootstrap members
// formed the cluster while the operator, restarted, had made neither the third's claim nor its
// pod: the third was taken for a member that had started and lost its data, removed, and a
// fourth member added in its place (the failpoint walk's "create 3", 1 run in 4 here and in CI;
// this test failed before the fix with RemoveMember). It never ran: it is started, as planned.
func TestAnInitialMemberThatNeverRanIsStartedNotReplaced(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{Spec: etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16",
		Storage: etcdv1alpha1.StorageSpec{Size: ptr.To(resource.MustParse("256Mi"))}}}
	c.Name, c.Namespace = "c", "ns"
	plan := []string{"c-aaaaa", "c-bbbbb", "c-ccccc"}
	initial := resources.InitialCluster(c, plan)
	obs := &observation{
		access: &access{}, reachable: true, leaderID: 1,
		pods: map[string]*corev1.Pod{}, pvcs: map[string]*corev1.PersistentVolumeClaim{},
		statuses: map[uint64]etcd.MemberStatus{}, unhealthy: map[uint64]string{},
	}
	for i, name := range plan {
		id := uint64(i + 1)
		m := etcd.Member{ID: id, Name: name, PeerURLs: []string{resources.PeerURL(c, name)}}
		if i < 2 {
			// Started: the pod and claim exist, and the member published its client URLs.
			m.ClientURLs = []string{resources.ClientURL(c, name)}
			spec := resources.MemberSpec{Name: name, Version: c.Spec.Version, InitialCluster: initial, State: "new"}
			pod := resources.MemberPod(c, spec, resources.EtcdImages{Repository: "etcd"}, resources.PodSettings{})
			pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "10.0.0.1"
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			pvc := resources.MemberPVC(c, spec)
			pvc.Status.Phase = corev1.ClaimBound
			obs.pods[name], obs.pvcs[name] = pod, pvc
			obs.statuses[id] = etcd.MemberStatus{Version: "3.6.16", LeaderID: 1, RaftIndex: 10, RaftAppliedIndex: 10}
		}
		obs.members = append(obs.members, m)
	}
	obs.unhealthy = memberHealth(c, obs)

	step := membership.Next(obs.decisionInput(c, time.Now()))
	if step.Action != membership.StartMember || step.Member != "c-ccccc" {
		t.Fatalf("step %s %s (%s), want StartMember c-ccccc: the member never ran", step.Action, step.Member, step.Reason)
	}
}
