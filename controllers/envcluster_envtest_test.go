package controllers

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcd/etcdfake"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// envCluster is a formed cluster of three on a kube-apiserver of its own (envtest), reconciled
// by the real reconciler alone (the suite's manager would reconcile the same cluster, with a
// real etcd client that reaches nothing); etcd is the scripted fake, and the test plays the
// kubelet, starting pods and their etcd members.
type envCluster struct {
	cfg      *rest.Config
	k8s      client.Client
	cluster  *etcdv1alpha1.EtcdCluster
	etcd     *etcdfake.Cluster
	r        *EtcdClusterReconciler
	recorder *events.FakeRecorder
}

func newEnvCluster(t *testing.T, namespace string) *envCluster {
	t.Helper()
	cfg, k8s := startAPIServerWithConfig(t)
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
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
	f := &envCluster{
		cfg: cfg, k8s: k8s, cluster: cluster,
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
		pod := resources.MemberPod(cluster, spec, resources.EtcdImages{Repository: "registry.test/etcd"}, resources.PodSettings{})
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

// countDisruptions plays the disruption controller of kube-controller-manager, which envtest
// does not run: it writes the status of the cluster's PodDisruptionBudget, if there is one, from
// the pods its selector matches (Ready, not being deleted, are healthy). allowed, if not nil, is
// the disruptionsAllowed written instead of what they leave: a drain has taken the rest.
func (f *envCluster) countDisruptions(t *testing.T, allowed *int32) {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{}
	if err := f.k8s.Get(t.Context(), client.ObjectKeyFromObject(f.cluster), pdb); apierrors.IsNotFound(err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := f.k8s.List(t.Context(), pods, client.InNamespace(f.cluster.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		t.Fatal(err)
	}
	st := policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DesiredHealthy: int32(pdb.Spec.MinAvailable.IntValue())}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp.IsZero() {
			st.ExpectedPods++
			if podReady(&pods.Items[i]) {
				st.CurrentHealthy++
			}
		}
	}
	st.DisruptionsAllowed = max(0, st.CurrentHealthy-st.DesiredHealthy)
	if allowed != nil {
		st.DisruptionsAllowed = *allowed
	}
	pdb.Status = st
	if err := f.k8s.Status().Update(t.Context(), pdb); err != nil {
		t.Fatal(err)
	}
}

// runPods plays the kubelet and etcd: every member pod that has not started runs and is
// Ready, and its member, if etcd lists it, has started and answers, reporting the version its
// pod was made for.
func (f *envCluster) runPods(t *testing.T) {
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
			leader := uint64(1)
			for _, st := range f.etcd.Statuses {
				leader = st.LeaderID
			}
			f.etcd.Statuses[url] = etcd.MemberStatus{MemberID: m.ID, LeaderID: leader, Version: pod.Annotations[resources.AnnotationEtcdVersion],
				RaftIndex: 10, RaftAppliedIndex: 10,
				DBSizeBytes: 1 << 20, DBSizeInUseBytes: 1 << 20}
		}
	}
}

func (f *envCluster) reconcile(t *testing.T) error {
	t.Helper()
	_, err := f.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.cluster)})
	return err
}

// converge reconciles, playing the kubelet between reconciles, until etcd has exactly voters
// voting members, no learner, and each member exactly one pod and one claim, and status says
// so of the current generation.
func (f *envCluster) converge(t *testing.T, voters int) {
	t.Helper()
	var problem error
	for range 20 {
		err := f.reconcile(t)
		f.runPods(t)
		f.countDisruptions(t, nil)
		if problem = f.converged(t, voters); err == nil && problem == nil {
			return
		} else if problem == nil {
			problem = err
		}
	}
	t.Fatalf("not converged to %d voters: %v\netcd calls: %v\nevents:\n%s", voters, problem, f.etcd.Calls, f.events())
}

func (f *envCluster) converged(t *testing.T, voters int) error {
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

// memberObjects are the names of the cluster's member pods and claims, sorted. A claim being
// deleted is not counted: nothing here removes the pvc-protection finalizer, and the operator
// too counts such a claim as gone.
func (f *envCluster) memberObjects(t *testing.T) (pods, claims []string) {
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

func (f *envCluster) calls(name string) int {
	n := 0
	for _, c := range f.etcd.Calls {
		if c == name {
			n++
		}
	}
	return n
}

func (f *envCluster) get(t *testing.T) *etcdv1alpha1.EtcdCluster {
	t.Helper()
	c := &etcdv1alpha1.EtcdCluster{}
	if err := f.k8s.Get(t.Context(), client.ObjectKeyFromObject(f.cluster), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *envCluster) setSize(t *testing.T, size int32) {
	t.Helper()
	c := f.get(t)
	c.Spec.Size = size
	if err := f.k8s.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

func (f *envCluster) events() string {
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
