package controllers

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The disruption budget follows the voters etcd has, not spec.size: while a 5 -> 3 scale-down
// is in progress (etcd still has five voters) a budget computed from the spec would allow three
// evictions, and quorum with them. While etcd does not answer, the budget is left as it was.
func TestDisruptionBudgetFollowsEtcdNotTheSpec(t *testing.T) {
	cluster := staleTestCluster() // spec.size 3
	existing := resources.PodDisruptionBudget(cluster, 5)
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cluster, existing).Build()
	r := &EtcdClusterReconciler{Client: c}
	budget := func() int {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(existing), pdb); err != nil {
			t.Fatal(err)
		}
		return pdb.Spec.MinAvailable.IntValue()
	}
	voters := func(n int) []etcd.Member {
		out := make([]etcd.Member, n)
		for i := range out {
			out[i] = etcd.Member{ID: uint64(i + 1)}
		}
		return append(out, etcd.Member{ID: 99, IsLearner: true})
	}

	if err := r.ensureDisruptionBudget(t.Context(), cluster, &observation{reachable: true, members: voters(5)}); err != nil {
		t.Fatal(err)
	}
	if got := budget(); got != 4 {
		t.Fatalf("five voters in etcd, spec.size 3: minAvailable %d, want 4", got)
	}
	if err := r.ensureDisruptionBudget(t.Context(), cluster, &observation{reachable: false}); err != nil {
		t.Fatal(err)
	}
	if got := budget(); got != 4 {
		t.Fatalf("etcd not answering: minAvailable changed to %d, want it left at 4", got)
	}
	if err := r.ensureDisruptionBudget(t.Context(), cluster, &observation{reachable: true, members: voters(4)}); err != nil {
		t.Fatal(err)
	}
	if got := budget(); got != 3 {
		t.Fatalf("four voters left: minAvailable %d, want 3", got)
	}
}

// Bookkeeping steps change only what they say: the spec hash on pods made by an earlier
// operator version (no restart), and a claim's request when storage.size grew.
func TestRecordPodSpecAndExpandClaimsPatchInPlace(t *testing.T) {
	cluster := staleTestCluster()
	grown := resource.MustParse("8Gi")
	cluster.Spec.Storage.Size = &grown
	pod := resources.MemberPod(cluster, resources.MemberSpec{Name: "c-abcde", Version: "3.6.16"}, resources.EtcdImages{Repository: "etcd"}, nil)
	delete(pod.Annotations, resources.AnnotationPodSpecHash)
	pvc := resources.MemberPVC(cluster, resources.MemberSpec{Name: "c-abcde"})
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("4Gi")
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cluster, pod, pvc).Build()
	r := &EtcdClusterReconciler{Client: c}
	obs := &observation{pods: map[string]*corev1.Pod{"c-abcde": pod.DeepCopy()}, pvcs: map[string]*corev1.PersistentVolumeClaim{"c-abcde": pvc.DeepCopy()}}
	for _, action := range []membership.Action{membership.RecordPodSpec, membership.ExpandClaims} {
		if _, err := r.act(t.Context(), cluster, obs, membership.Step{Action: action, Members: []string{"c-abcde"}}); err != nil {
			t.Fatal(err)
		}
	}
	gotPod, gotPVC := &corev1.Pod{}, &corev1.PersistentVolumeClaim{}
	if err := errors.Join(c.Get(t.Context(), client.ObjectKeyFromObject(pod), gotPod), c.Get(t.Context(), client.ObjectKeyFromObject(pvc), gotPVC)); err != nil {
		t.Fatal(err)
	}
	if gotPod.Annotations[resources.AnnotationPodSpecHash] != resources.MemberPodSpecHash(cluster) || gotPod.UID != pod.UID {
		t.Errorf("pod annotations %v", gotPod.Annotations)
	}
	if got := gotPVC.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(grown) != 0 {
		t.Errorf("claim requests %s, want %s", got.String(), grown.String())
	}
}
