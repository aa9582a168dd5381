package controllers

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The PodDisruptionBudget counts voters only, and the operator's own disruptions of serving
// members are evictions that the API server weighs against it. Against a kube-apiserver of its
// own (envCluster), whose Eviction API enforces the budget as any does; no disruption controller
// runs there, so the test writes the budget's status (countDisruptions).

// A learner's Ready pod does not count in the budget: counted, three voters and a Ready learner
// would allow two disruptions (minAvailable 2 of four healthy pods), one more than three voters
// can spare. The voter label follows etcd: it goes on the learner's pod once etcd has promoted
// it, and the budget then counts one voter more.
func TestALearnerDoesNotCountInTheDisruptionBudget(t *testing.T) {
	f := newEnvCluster(t, "learner")
	f.etcd.Fail = map[string]error{"PromoteLearner": etcd.ErrLearnerNotReady}
	f.setSize(t, 4)
	learner := ""
	for range 10 {
		if err := f.reconcile(t); err != nil {
			t.Fatal(err)
		}
		f.runPods(t)
		if m := f.etcd.Members; len(m) == 4 && m[3].IsLearner && m[3].Name != "" {
			learner = m[3].Name
			break
		}
	}
	if learner == "" {
		t.Fatalf("no learner started: etcd lists %+v", f.etcd.Members)
	}
	if err := f.reconcile(t); err != nil { // the learner answers, its pod Ready
		t.Fatal(err)
	}
	pods := f.pods(t)
	selector, minAvailable := f.budget(t)
	for _, pod := range pods {
		name := pod.Labels[resources.LabelMember]
		if counted := selector.Matches(labels.Set(pod.Labels)); counted == (name == learner) {
			t.Errorf("the budget counts the pod of %s (the learner: %t): %t; its labels %v", name, name == learner, counted, pod.Labels)
		}
	}
	if minAvailable != 2 {
		t.Errorf("minAvailable %d, want 2 of three voters", minAvailable)
	}

	// The Eviction API, with the budget allowing no disruption now, lets the learner's pod go and
	// refuses every voter's.
	f.countDisruptions(t, ptr.To[int32](0))
	for _, pod := range pods {
		name := pod.Labels[resources.LabelMember]
		eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}}
		switch err := f.k8s.SubResource("eviction").Create(t.Context(), &pod, eviction); {
		case name == learner && err != nil:
			t.Errorf("evicting the learner's pod: %v, want it let go", err)
		case name != learner && !apierrors.IsTooManyRequests(err):
			t.Errorf("evicting voter %s's pod: %v, want it refused for the budget", name, err)
		}
	}

	// Promoted: its pod is labelled in the reconcile that promotes it, and minAvailable counts it.
	f.etcd.Fail = nil
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(f.etcd.Calls, "PromoteLearner") || f.etcd.Members[3].IsLearner {
		t.Fatalf("the learner was not promoted: calls %v", f.etcd.Calls)
	}
	selector, minAvailable = f.budget(t)
	for _, pod := range f.pods(t) {
		if !selector.Matches(labels.Set(pod.Labels)) {
			t.Errorf("the budget does not count the pod of voter %s; its labels %v", pod.Name, pod.Labels)
		}
	}
	if minAvailable != 3 {
		t.Errorf("minAvailable %d, want 3 of four voters", minAvailable)
	}
}

// The operator's own disruptions of serving members go through the Eviction API. While the
// budget allows none (a drain has taken what it allowed), a roll-out's restart and an upgrade's
// wait, saying why, and delete or change no pod; once it allows one, they take it, and the API
// server counts it against the budget as it would a drain's.
func TestOperatorDisruptionsWaitForTheBudget(t *testing.T) {
	f := newEnvCluster(t, "disruptions")

	// A roll-out: the pod template changes.
	f.countDisruptions(t, ptr.To[int32](0))
	before := f.podUIDs(t)
	c := f.get(t)
	c.Spec.PodTemplate.Metadata.Annotations = map[string]string{"example.com/rolled": "yes"}
	if err := f.k8s.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	f.checkHeld(t, before, etcdv1alpha1.ReasonRollingOut)

	f.countDisruptions(t, nil)
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	after := f.podUIDs(t)
	var evicted []string
	for name, uid := range before {
		if after[name] != uid {
			evicted = append(evicted, name)
		}
	}
	if len(evicted) != 1 {
		t.Fatalf("once the budget allows one disruption: pods %v taken, want one", evicted)
	}
	if pdb := f.budgetObject(t); pdb.Status.DisruptionsAllowed != 0 || pdb.Status.DisruptedPods[evicted[0]].Time.IsZero() {
		t.Errorf("the API server did not count the eviction of %s against the budget: %+v", evicted[0], pdb.Status)
	}
	if events := f.events(); !strings.Contains(events, "Normal RollMember") {
		t.Errorf("no event for the restart:\n%s", events)
	}
	f.converge(t, 3)
	for _, pod := range f.pods(t) {
		if pod.Annotations["example.com/rolled"] != "yes" {
			t.Errorf("pod %s was not made again from the changed spec", pod.Name)
		}
	}

	// An upgrade.
	f.countDisruptions(t, ptr.To[int32](0))
	before = f.podUIDs(t)
	c = f.get(t)
	c.Spec.Version = "3.7.3"
	if err := f.k8s.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	f.checkHeld(t, before, etcdv1alpha1.ReasonUpgrading)
	for _, pod := range f.pods(t) {
		if v := resources.PodEtcdVersion(&pod); v != "3.6.16" {
			t.Errorf("pod %s runs %s while the budget holds the upgrade", pod.Name, v)
		}
	}

	f.countDisruptions(t, nil)
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	after = f.podUIDs(t)
	evicted = nil
	for name, uid := range before {
		if after[name] != uid {
			evicted = append(evicted, name)
		}
	}
	if len(evicted) != 1 {
		t.Fatalf("once the budget allows one disruption: pods %v taken, want one", evicted)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := f.k8s.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: resources.PVCName(evicted[0])}, pvc); err != nil {
		t.Fatal(err)
	}
	if v := pvc.Annotations[resources.AnnotationEtcdVersion]; v != "3.7.3" {
		t.Errorf("claim %s records version %q for its next pod, want 3.7.3", pvc.Name, v)
	}
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := f.k8s.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: evicted[0]}, pod); err != nil {
		t.Fatalf("the upgraded member's pod was not made again: %v", err)
	}
	if v, image := resources.PodEtcdVersion(pod), pod.Spec.Containers[0].Image; v != "3.7.3" || image != "registry.test/etcd:v3.7.3" {
		t.Errorf("the upgraded member's pod runs %s (version %s), want registry.test/etcd:v3.7.3", image, v)
	}
}

// checkHeld reconciles a few times while the budget allows no disruption: each reconcile
// succeeds and comes back, no pod of before is taken, and status says what holds the step.
func (f *envCluster) checkHeld(t *testing.T, before map[string]types.UID, operation string) {
	t.Helper()
	f.events() // those of earlier steps
	for i := range 3 {
		result, err := f.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.cluster)})
		if err != nil || result.RequeueAfter == 0 {
			t.Fatalf("reconcile %d while the budget holds the step: %+v, %v; want no error and a look again", i, result, err)
		}
	}
	if after := f.podUIDs(t); !maps.Equal(before, after) {
		t.Fatalf("pods taken while the budget allows no disruption: %v -> %v", before, after)
	}
	c := f.get(t)
	progressing := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing)
	if progressing == nil || progressing.Status != metav1.ConditionTrue || progressing.Reason != operation ||
		!strings.Contains(progressing.Message, "waiting for the PodDisruptionBudget") || !strings.Contains(progressing.Message, "The disruption budget c ") {
		t.Errorf("Progressing %+v, want True, %s, saying the budget holds the step and why", progressing, operation)
	}
	if events := f.events(); strings.Contains(events, "Warning") {
		t.Errorf("a step the budget holds is not a failure; events:\n%s", events)
	}
}

func (f *envCluster) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := f.k8s.List(t.Context(), pods, client.InNamespace(f.cluster.Namespace), client.MatchingLabels(resources.Selector(f.cluster))); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// podUIDs are the member pods not being deleted, by name.
func (f *envCluster) podUIDs(t *testing.T) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	for _, pod := range f.pods(t) {
		if pod.DeletionTimestamp.IsZero() {
			out[pod.Name] = pod.UID
		}
	}
	return out
}

func (f *envCluster) budgetObject(t *testing.T) *policyv1.PodDisruptionBudget {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{}
	if err := f.k8s.Get(t.Context(), client.ObjectKeyFromObject(f.cluster), pdb); err != nil {
		t.Fatal(err)
	}
	return pdb
}

// budget is the selector and minAvailable of the cluster's PodDisruptionBudget.
func (f *envCluster) budget(t *testing.T) (labels.Selector, int) {
	t.Helper()
	pdb := f.budgetObject(t)
	selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	return selector, pdb.Spec.MinAvailable.IntValue()
}
