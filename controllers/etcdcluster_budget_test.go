package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"

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
	pod := resources.MemberPod(cluster, resources.MemberSpec{Name: "c-abcde", Version: "3.6.16"}, resources.EtcdImages{Repository: "etcd"}, resources.PodSettings{})
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

// A drain may take, at once, every Ready voter pod no budget selects (the Eviction API evicts
// such a pod unchecked) and as many of the pods the budget selects as it allows. That must not
// exceed what etcd's voters can spare, the Ready voters beyond a quorum, once the operator has
// reconciled; and no write of the operator may let a drain take more than that, or than it could
// before the operator began. Checked after each of the operator's writes, with etcd's membership
// as it is at that moment, and after the reconciles:
//   - the first reconcile of a new operator over an earlier one's cluster, whose budget selected
//     every member pod and counted a Ready learner (three voters and a learner: two disruptions
//     allowed, one more than three voters spare), and whose pods carry no voter label: the
//     selector changed before the labels would leave every voter unprotected;
//   - a learner promoted: the budget must count it before its pod is counted;
//   - a voter removed (scale 4 to 3): minAvailable is lowered only once its pod is gone.
func TestDrainsCannotTakeMoreVotersThanQuorumSpares(t *testing.T) {
	earlierBudget := func(c *etcdv1alpha1.EtcdCluster) *policyv1.PodDisruptionBudget {
		pdb := resources.PodDisruptionBudget(c, 3)
		pdb.Spec.Selector = &metav1.LabelSelector{
			MatchLabels:      resources.Selector(c),
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: resources.LabelMember, Operator: metav1.LabelSelectorOpExists}},
		}
		return pdb
	}
	for _, tc := range []struct {
		name       string
		size       int
		budget     func(*etcdv1alpha1.EtcdCluster) *policyv1.PodDisruptionBudget
		learner    bool // the last member is a learner, its pod Ready and not labelled
		unlabelled bool // no pod carries the voter label
		promote    error
		reconciles int
		want       func(t *testing.T, a *scriptedCluster)
	}{
		{name: "an earlier operator's cluster with a Ready learner", size: 4, budget: earlierBudget, learner: true, unlabelled: true,
			promote: etcd.ErrLearnerNotReady, reconciles: 2},
		{name: "a learner promoted", size: 4, learner: true, reconciles: 1, want: func(t *testing.T, a *scriptedCluster) {
			if !slices.Contains(a.etcd.Calls, "PromoteLearner") {
				t.Fatalf("etcd calls %v: no promotion", a.etcd.Calls)
			}
		}},
		{name: "a voter removed", size: 4, reconciles: 3, want: func(t *testing.T, a *scriptedCluster) {
			if len(a.etcd.Members) != 3 {
				t.Fatalf("etcd lists %d members, want the scale-down to 3 done", len(a.etcd.Members))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newScriptedCluster(t, tc.size, func(c *etcdv1alpha1.EtcdCluster) {
				if !tc.learner {
					c.Spec.Size = int32(tc.size - 1)
				}
			}, nil)
			budget := tc.budget
			if budget == nil {
				budget = func(c *etcdv1alpha1.EtcdCluster) *policyv1.PodDisruptionBudget {
					return resources.PodDisruptionBudget(c, tc.size-map[bool]int{true: 1}[tc.learner])
				}
			}
			if err := a.k8s.Create(t.Context(), budget(a.cluster)); err != nil {
				t.Fatal(err)
			}
			for i, name := range a.members {
				if tc.unlabelled || (tc.learner && i == len(a.members)-1) {
					unlabelVoter(t, a.k8s, name)
				}
			}
			if tc.learner {
				learner := &a.etcd.Members[len(a.etcd.Members)-1]
				learner.IsLearner = true
				st := a.etcd.Statuses[learner.ClientURLs[0]]
				st.IsLearner = true
				a.etcd.Statuses[learner.ClientURLs[0]] = st
			}
			a.etcd.Fail = map[string]error{"PromoteLearner": tc.promote}

			writes := 0
			before, _ := drainableVoters(t, a)
			check := func(after string, bound func(spare int) int) {
				t.Helper()
				if drainable, spare := drainableVoters(t, a); drainable > bound(spare) {
					t.Errorf("%s: a drain could take %d voters at once; the voters spare %d, and a drain could take %d before the operator began (etcd: %+v)",
						after, drainable, spare, before, a.etcd.Members)
				}
			}
			written := func(err error, verb string, obj client.Object) error {
				if err == nil {
					writes++
					check(fmt.Sprintf("after %s %T %s", verb, obj, obj.GetName()), func(spare int) int { return max(spare, before) })
				}
				return err
			}
			a.r.Client = interceptor.NewClient(a.r.Client.(client.WithWatch), interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					return written(c.Create(ctx, obj, opts...), "create", obj)
				},
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					return written(c.Patch(ctx, obj, patch, opts...), "patch", obj)
				},
				Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
					return written(c.Update(ctx, obj, opts...), "update", obj)
				},
				Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					return written(c.Delete(ctx, obj, opts...), "delete", obj)
				},
			})
			a.reconcile(t, tc.reconciles)
			check("after the reconciles", func(spare int) int { return spare })
			if writes == 0 {
				t.Error("the operator wrote nothing: the test exercises nothing")
			}
			if tc.want != nil {
				tc.want(t, a)
			}
		})
	}
}

// drainableVoters is how many of etcd's voters a drain could take at once, as the Eviction API
// and the disruption controller would let it: every Ready voter pod the budget does not select,
// and of the Ready pods it selects, voters or not, as many as exceed minAvailable, voters
// first. spare is how many Ready voters are beyond a quorum of etcd's voters.
func drainableVoters(t *testing.T, a *scriptedCluster) (drainable, spare int) {
	t.Helper()
	var voters []string
	for _, m := range a.etcd.Members {
		if !m.IsLearner {
			voters = append(voters, m.Name)
		}
	}
	selector, minAvailable := labels.Nothing(), 0
	pdb := &policyv1.PodDisruptionBudget{}
	switch err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), pdb); {
	case err == nil:
		s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		selector, minAvailable = s, pdb.Spec.MinAvailable.IntValue()
	case !apierrors.IsNotFound(err):
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := a.k8s.List(t.Context(), pods); err != nil {
		t.Fatal(err)
	}
	unselectedVoters, selectedHealthy, selectedVoters, readyVoters := 0, 0, 0, 0
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !podReady(pod) {
			continue
		}
		voter := slices.Contains(voters, pod.Labels[resources.LabelMember])
		if voter {
			readyVoters++
		}
		switch {
		case !selector.Matches(labels.Set(pod.Labels)):
			if voter {
				unselectedVoters++
			}
		default:
			selectedHealthy++
			if voter {
				selectedVoters++
			}
		}
	}
	return unselectedVoters + min(max(0, selectedHealthy-minAvailable), selectedVoters),
		max(0, readyVoters-membership.Quorum(len(voters)))
}

// Which of the operator's pod removals are voluntary disruptions of a serving member, asked of
// the budget through the Eviction API, and which are deletes: one place decides, for every step.
func TestOnlyDisruptionsOfServingVotersAreEvicted(t *testing.T) {
	c := staleTestCluster()
	voter := func(name string) etcd.Member {
		return etcd.Member{ID: uint64(len(name)), Name: name, PeerURLs: []string{resources.PeerURL(c, name)}}
	}
	serving := func(voters int) *observation {
		obs := &observation{reachable: true}
		for i := range voters {
			obs.members = append(obs.members, voter(fmt.Sprintf("c-%s", strings.Repeat("v", i+1))))
		}
		obs.members = append(obs.members, etcd.Member{ID: 99, Name: "c-learner", IsLearner: true})
		return obs
	}
	roll := membership.Step{Action: membership.RollMember, Member: "c-v", Operation: membership.OpRollingOut}
	for _, tc := range []struct {
		name   string
		obs    *observation
		step   membership.Step
		member string
		evict  bool
	}{
		{"a roll-out's restart of a voter", serving(3), roll, "c-v", true},
		{"an upgrade's restart of a voter", serving(5), membership.Step{Action: membership.UpgradeMember, Member: "c-vvv", Operation: membership.OpUpgrading}, "c-vvv", true},
		{"a restart of the one member down, which the budget lets go", serving(3),
			membership.Step{Action: membership.RollMember, Member: "c-vv", Operation: membership.OpRollingOut}, "c-vv", true},
		{"a learner's pod", serving(3), membership.Step{Action: membership.StopMembers, Members: []string{"c-learner"}, Operation: membership.OpPromoting}, "c-learner", false},
		{"the pod of a member etcd no longer lists", serving(3), membership.Step{Action: membership.DeleteOrphans, Members: []string{"c-gone"}}, "c-gone", false},
		{"the pod of the member the step has just removed", serving(3), membership.Step{Action: membership.RemoveMember, Member: "c-vvv"}, "c-vvv", false},
		{"an in-place restore's stop", serving(3), membership.Step{Action: membership.StopMembers, Members: []string{"c-v"}, Operation: membership.OpRestoring}, "c-v", false},
		{"a cluster of two", serving(2), roll, "c-v", false},
		{"the forced member of a quorum recovery, a cluster of one", serving(1),
			membership.Step{Action: membership.RollMember, Member: "c-v", Operation: membership.OpRecoveringQuorum}, "c-v", false},
		{"fencing while quorum is lost", &observation{}, membership.Step{Action: membership.FenceMembers, Members: []string{"c-v"}, Operation: membership.OpRecoveringQuorum}, "c-v", false},
		{"a cluster that never formed", &observation{}, membership.Step{Action: membership.StopMembers, Members: []string{"c-v"}, Operation: membership.OpBootstrapping}, "c-v", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evict, why := disruptionOf(c, tc.obs, tc.step, tc.member)
			if evict != tc.evict || why == "" {
				t.Errorf("evict %t (%s), want %t", evict, why, tc.evict)
			}
		})
	}
}

// Only a refusal for a disruption budget holds a step: the API server also answers 429 when it
// sheds load, and that is an error to retry with backoff, not a drain to wait for.
func TestOnlyABudgetsRefusalHoldsTheStep(t *testing.T) {
	byBudget := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	byBudget.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget c does not allow evicting pods currently"}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused for the budget", fmt.Errorf("evict: %w", byBudget), true},
		{"the API server sheds load", apierrors.NewTooManyRequests("the server has received too many requests and has asked us to try again later", 1), false},
		{"another error", apierrors.NewInternalError(errors.New("boom")), false},
		{"no error", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if cause, refused := budgetRefusal(tc.err); refused != tc.want || (refused && !strings.Contains(cause, "does not allow evicting")) {
				t.Errorf("refused %t (cause %q), want %t", refused, cause, tc.want)
			}
		})
	}
}
