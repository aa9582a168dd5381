package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// refusal is the message the test's admission policies deny with: an error that names it came
// from the API server's refusal.
const refusal = "refused by the fault test"

// The API server refuses the operator's writes for a while — an admission policy denies them —
// in the middle of a scale-up (the learner is in etcd, its claim and pod are not yet made) and
// of a scale-down (the member is out of etcd, its pod not yet deleted). While refused, however
// often it reconciles, the operator repeats no membership change and deletes no pod of a member
// etcd lists, and says why it is stuck; once the policy goes, it converges.
// Against a kube-apiserver of its own (envCluster).
func TestRefusedWritesLeaveNothingHalfDoneAndConvergeAfter(t *testing.T) {
	f := newEnvCluster(t, "refused")

	// Scale 3 → 4 while claims and pods cannot be written.
	lift := f.refuse(t, "member-objects", f.memberObjectRules(), f.probeMemberObjects)
	f.setSize(t, 4)
	for i := range 5 {
		err := f.reconcile(t)
		if err == nil || !strings.Contains(err.Error(), refusal) {
			t.Fatalf("scale-up reconcile %d while refused: error %v, want the refusal", i, err)
		}
		f.checkScaleUpHeld(t)
	}
	c := f.get(t)
	progressing := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing)
	if progressing == nil || progressing.Status != metav1.ConditionTrue || !strings.Contains(progressing.Message, refusal) {
		t.Errorf("Progressing while the claim is refused: %+v, want True naming the refusal", progressing)
	}
	if c.Status.Operation == nil || c.Status.Operation.Type != etcdv1alpha1.ReasonScalingUp {
		t.Errorf("status.operation %+v, want the scale-up under way", c.Status.Operation)
	}
	if events := f.events(); !strings.Contains(events, "Warning StepFailed") || !strings.Contains(events, refusal) {
		t.Errorf("no Warning event names the refusal:\n%s", events)
	}
	lift(t)
	f.converge(t, 4)
	if adds := f.calls("AddLearner"); adds != 1 {
		t.Errorf("%d learners added for one scale-up", adds)
	}

	// Scale 4 → 3 while claims and pods, and the cluster's status too, cannot be written.
	generation := c.Generation
	liftMembers := f.refuse(t, "member-objects", f.memberObjectRules(), f.probeMemberObjects)
	liftStatus := f.refuse(t, "cluster-status", f.statusRules(), f.probeStatus)
	before := f.get(t).Status
	f.setSize(t, 3)
	for i := range 5 {
		if err := f.reconcile(t); err == nil || !strings.Contains(err.Error(), refusal) {
			t.Fatalf("scale-down reconcile %d while refused: error %v, want the refusal", i, err)
		}
		f.checkScaleDownHeld(t)
	}
	c = f.get(t)
	if c.Status.ObservedGeneration > generation || !equality.Semantic.DeepEqual(c.Status, before) {
		t.Errorf("status changed while its writes were refused: observedGeneration %d (generation %d)", c.Status.ObservedGeneration, c.Generation)
	}
	if events := f.events(); !strings.Contains(events, "Warning StepFailed") || !strings.Contains(events, refusal) {
		t.Errorf("no Warning event names the refusal of the orphan's pod:\n%s", events)
	}
	liftStatus(t)
	liftMembers(t)
	f.converge(t, 3)
	if removes := f.calls("RemoveMember"); removes != 1 {
		t.Errorf("%d members removed for one scale-down", removes)
	}
}

// checkScaleUpHeld: one learner was added, and only one; nothing of its was made.
func (f *envCluster) checkScaleUpHeld(t *testing.T) {
	t.Helper()
	learners := slices.DeleteFunc(slices.Clone(f.etcd.Members), func(m etcd.Member) bool { return !m.IsLearner })
	if adds := f.calls("AddLearner"); adds != 1 || len(learners) != 1 || len(f.etcd.Members) != 4 {
		t.Fatalf("while refused: %d learners added, etcd lists %d learners of %d members", adds, len(learners), len(f.etcd.Members))
	}
	if f.calls("PromoteLearner") != 0 {
		t.Fatal("a learner with no pod was promoted")
	}
	if pods, claims := f.memberObjects(t); len(pods) != 3 || len(claims) != 3 {
		t.Fatalf("while refused: pods %v, claims %v", pods, claims)
	}
}

// checkScaleDownHeld: one member was removed, and only one; every member etcd lists keeps its
// pod and claim.
func (f *envCluster) checkScaleDownHeld(t *testing.T) {
	t.Helper()
	if removes := f.calls("RemoveMember"); removes != 1 || len(f.etcd.Members) != 3 {
		t.Fatalf("while refused: %d members removed, etcd lists %d", removes, len(f.etcd.Members))
	}
	pods, claims := f.memberObjects(t)
	for _, m := range f.etcd.Members {
		if !slices.Contains(pods, m.Name) || !slices.Contains(claims, m.Name) {
			t.Fatalf("member %s, which etcd lists, lost its pod or claim: pods %v, claims %v", m.Name, pods, claims)
		}
	}
	if len(pods) != 4 {
		t.Fatalf("while refused: pods %v", pods)
	}
}

func (f *envCluster) memberObjectRules() []admissionregistrationv1.NamedRuleWithOperations {
	return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "persistentvolumeclaims"}},
	}}}
}

func (f *envCluster) statusRules() []admissionregistrationv1.NamedRuleWithOperations {
	return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{etcdv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"etcdclusters/status"}},
	}}}
}

// refuse makes the API server deny, in the cluster's namespace, the writes rules match, and
// waits until it does (a policy takes effect some time after it is created); the function it
// returns lifts the refusal and waits until it is lifted.
func (f *envCluster) refuse(t *testing.T, name string, rules []admissionregistrationv1.NamedRuleWithOperations, probe func(context.Context) error) func(*testing.T) {
	t.Helper()
	ctx := t.Context()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: rules},
			Validations:      []admissionregistrationv1.Validation{{Expression: "false", Message: refusal}},
		},
	}
	if err := f.k8s.Create(ctx, policy); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: f.cluster.Namespace}}},
		},
	}
	if err := f.k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() error {
		if err := probe(ctx); err == nil || !strings.Contains(err.Error(), refusal) {
			return fmt.Errorf("policy %s not in effect yet: probe answered %w", name, err)
		}
		return nil
	})
	return func(t *testing.T) {
		t.Helper()
		if err := f.k8s.Delete(t.Context(), binding); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() error {
			if err := probe(t.Context()); err != nil {
				return fmt.Errorf("policy %s still in effect: %w", name, err)
			}
			return nil
		})
	}
}

// probeMemberObjects asks, without effect, to create a claim in the cluster's namespace.
func (f *envCluster) probeMemberObjects(ctx context.Context) error {
	pvc := resources.MemberPVC(f.cluster, resources.MemberSpec{Name: "c-probe"})
	return f.k8s.Create(ctx, pvc, client.DryRunAll)
}

// probeStatus asks, without effect, to change the cluster's status.
func (f *envCluster) probeStatus(ctx context.Context) error {
	return f.k8s.Status().Patch(ctx, f.cluster.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"leader":"probe"}}`)), client.DryRunAll)
}
