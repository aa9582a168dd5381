package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcd/etcdfake"
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
//
// Against a kube-apiserver of its own, where only this reconciler runs (the suite's manager
// would reconcile the same cluster, with a real etcd client that reaches nothing); etcd is the
// scripted fake, and the test plays the kubelet, starting pods and their etcd members.
func TestRefusedWritesLeaveNothingHalfDoneAndConvergeAfter(t *testing.T) {
	f := newRefusedWritesFixture(t)

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

type refusedWritesFixture struct {
	k8s      client.Client
	cluster  *etcdv1alpha1.EtcdCluster
	etcd     *etcdfake.Cluster
	r        *EtcdClusterReconciler
	recorder *events.FakeRecorder
}

func newRefusedWritesFixture(t *testing.T) *refusedWritesFixture {
	t.Helper()
	k8s := startAPIServer(t)
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "refused"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns.Name},
		Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16"},
	}
	if err := k8s.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	f := &refusedWritesFixture{
		k8s: k8s, cluster: cluster,
		etcd:     &etcdfake.Cluster{ID: 1, Statuses: map[string]etcd.MemberStatus{}},
		recorder: events.NewFakeRecorder(1000),
	}
	// A formed cluster of three, as the operator made it: the first member leads.
	for i := range 3 {
		name := fmt.Sprintf("c-m%04d", i)
		initial := resources.InitialCluster(cluster, []string{"c-m0000", "c-m0001", "c-m0002"})
		spec := resources.MemberSpec{Name: name, Version: "3.6.16", InitialCluster: initial, State: "new"}
		if err := k8s.Create(ctx, resources.MemberPVC(cluster, spec)); err != nil {
			t.Fatal(err)
		}
		pod := resources.MemberPod(cluster, spec, resources.EtcdImages{Repository: "registry.test/etcd"}, nil)
		if err := ctrl.SetControllerReference(cluster, pod, k8s.Scheme()); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		f.etcd.Members = append(f.etcd.Members, etcd.Member{ID: uint64(i + 1), PeerURLs: []string{resources.PeerURL(cluster, name)}})
	}
	f.runPods(t)
	f.r = &EtcdClusterReconciler{Client: k8s, APIReader: k8s, Etcd: etcd.NewCacheWith(f.etcd.Dial), Recorder: f.recorder,
		DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"}}
	f.converge(t, 3)
	f.etcd.Calls = nil
	return f
}

// runPods plays the kubelet and etcd: every member pod that has not started runs and is
// Ready, and its member, if etcd lists it, has started and answers.
func (f *refusedWritesFixture) runPods(t *testing.T) {
	t.Helper()
	pods := &corev1.PodList{}
	if err := f.k8s.List(t.Context(), pods, client.InNamespace(f.cluster.Namespace)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Status.PodIP != "" {
			continue
		}
		ip := fmt.Sprintf("10.0.0.%d", i+1+len(f.etcd.Members))
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := f.k8s.Status().Update(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		name := pod.Labels[resources.LabelMember]
		for j := range f.etcd.Members {
			m := &f.etcd.Members[j]
			if !slices.Contains(m.PeerURLs, resources.PeerURL(f.cluster, name)) {
				continue
			}
			url := resources.ClientURL(f.cluster, name)
			m.Name, m.ClientURLs = name, []string{url}
			f.etcd.Statuses[url] = etcd.MemberStatus{MemberID: m.ID, LeaderID: 1, Version: "3.6.16", RaftIndex: 10, RaftAppliedIndex: 10,
				DBSizeBytes: 1 << 20, DBSizeInUseBytes: 1 << 20}
		}
	}
}

func (f *refusedWritesFixture) reconcile(t *testing.T) error {
	t.Helper()
	_, err := f.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.cluster)})
	return err
}

// converge reconciles, playing the kubelet between reconciles, until etcd has exactly voters
// voting members, no learner, and each member exactly one pod and one claim, and status says
// so of the current generation.
func (f *refusedWritesFixture) converge(t *testing.T, voters int) {
	t.Helper()
	var problem error
	for range 20 {
		err := f.reconcile(t)
		f.runPods(t)
		if problem = f.converged(t, voters); err == nil && problem == nil {
			return
		} else if problem == nil {
			problem = err
		}
	}
	t.Fatalf("not converged to %d voters: %v\netcd calls: %v\nevents:\n%s", voters, problem, f.etcd.Calls, f.events())
}

func (f *refusedWritesFixture) converged(t *testing.T, voters int) error {
	var members []string
	for _, m := range f.etcd.Members {
		if m.IsLearner || m.Name == "" {
			return fmt.Errorf("etcd lists a member not yet voting: %+v", m)
		}
		members = append(members, m.Name)
	}
	if len(members) != voters {
		return fmt.Errorf("etcd lists %v, want %d voters", members, voters)
	}
	pods, claims := f.memberObjects(t)
	slices.Sort(members)
	if !slices.Equal(pods, members) || !slices.Equal(claims, members) {
		return fmt.Errorf("etcd lists %v; pods %v, claims %v", members, pods, claims)
	}
	c := f.get(t)
	progressing := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing)
	if c.Status.ObservedGeneration != c.Generation || c.Status.Size != int32(voters) || c.Status.ReadyMembers != int32(voters) ||
		progressing == nil || progressing.Status != metav1.ConditionFalse {
		return fmt.Errorf("status: generation %d observed %d, size %d, ready %d, progressing %+v",
			c.Generation, c.Status.ObservedGeneration, c.Status.Size, c.Status.ReadyMembers, progressing)
	}
	return nil
}

// checkScaleUpHeld: one learner was added, and only one; nothing of its was made.
func (f *refusedWritesFixture) checkScaleUpHeld(t *testing.T) {
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
func (f *refusedWritesFixture) checkScaleDownHeld(t *testing.T) {
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

// memberObjects are the names of the cluster's member pods and claims, sorted. A claim being
// deleted is not counted: nothing here removes the pvc-protection finalizer, and the operator
// too counts such a claim as gone.
func (f *refusedWritesFixture) memberObjects(t *testing.T) (pods, claims []string) {
	t.Helper()
	podList, pvcList := &corev1.PodList{}, &corev1.PersistentVolumeClaimList{}
	sel := client.MatchingLabels(resources.Selector(f.cluster))
	if err := f.k8s.List(t.Context(), podList, client.InNamespace(f.cluster.Namespace), sel); err != nil {
		t.Fatal(err)
	}
	if err := f.k8s.List(t.Context(), pvcList, client.InNamespace(f.cluster.Namespace), sel); err != nil {
		t.Fatal(err)
	}
	for _, p := range podList.Items {
		pods = append(pods, p.Labels[resources.LabelMember])
	}
	for _, p := range pvcList.Items {
		if p.DeletionTimestamp.IsZero() {
			claims = append(claims, p.Labels[resources.LabelMember])
		}
	}
	slices.Sort(pods)
	slices.Sort(claims)
	return pods, claims
}

func (f *refusedWritesFixture) calls(name string) int {
	n := 0
	for _, c := range f.etcd.Calls {
		if c == name {
			n++
		}
	}
	return n
}

func (f *refusedWritesFixture) get(t *testing.T) *etcdv1alpha1.EtcdCluster {
	t.Helper()
	c := &etcdv1alpha1.EtcdCluster{}
	if err := f.k8s.Get(t.Context(), client.ObjectKeyFromObject(f.cluster), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *refusedWritesFixture) setSize(t *testing.T, size int32) {
	t.Helper()
	c := f.get(t)
	c.Spec.Size = size
	if err := f.k8s.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

func (f *refusedWritesFixture) events() string {
	var out strings.Builder
	for {
		select {
		case e := <-f.recorder.Events:
			fmt.Fprintln(&out, e)
		default:
			return out.String()
		}
	}
}

func (f *refusedWritesFixture) memberObjectRules() []admissionregistrationv1.NamedRuleWithOperations {
	return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "persistentvolumeclaims"}},
	}}}
}

func (f *refusedWritesFixture) statusRules() []admissionregistrationv1.NamedRuleWithOperations {
	return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{etcdv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"etcdclusters/status"}},
	}}}
}

// refuse makes the API server deny, in the cluster's namespace, the writes rules match, and
// waits until it does (a policy takes effect some time after it is created); the function it
// returns lifts the refusal and waits until it is lifted.
func (f *refusedWritesFixture) refuse(t *testing.T, name string, rules []admissionregistrationv1.NamedRuleWithOperations, probe func(context.Context) error) func(*testing.T) {
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
func (f *refusedWritesFixture) probeMemberObjects(ctx context.Context) error {
	pvc := resources.MemberPVC(f.cluster, resources.MemberSpec{Name: "c-probe"})
	return f.k8s.Create(ctx, pvc, client.DryRunAll)
}

// probeStatus asks, without effect, to change the cluster's status.
func (f *refusedWritesFixture) probeStatus(ctx context.Context) error {
	return f.k8s.Status().Patch(ctx, f.cluster.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"leader":"probe"}}`)), client.DryRunAll)
}

func waitFor(t *testing.T, check func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
