package controllers

import (
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcd-database/etcd-operator/internal/etcd"
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
