package controllers

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcd/etcdfake"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// scriptedCluster is a formed cluster whose members run, are Ready and answer, reconciled by
// the real reconciler against controller-runtime's fake client and a scripted etcd: for the
// actor's paths that need a whole reconcile but no real server.
type scriptedCluster struct {
	cluster  *etcdv1alpha1.EtcdCluster
	members  []string
	k8s      client.Client
	etcd     *etcdfake.Cluster
	r        *EtcdClusterReconciler
	recorder *events.FakeRecorder
	// listening are the addresses at which a probe finds something (host:port); probed, every
	// address probed so far.
	listening map[string]bool
	probed    []string
}

// newScriptedCluster makes a cluster of size members; mutate adjusts the spec before the
// members are made, and extra (called after mutate) adds objects. The first member leads.
func newScriptedCluster(t *testing.T, size int, mutate func(*etcdv1alpha1.EtcdCluster), extra func() []client.Object) *scriptedCluster {
	t.Helper()
	return newScriptedClusterWithImages(t, size, resources.EtcdImages{Repository: "registry.test/etcd"}, mutate, extra)
}

// newScriptedClusterWithImages is newScriptedCluster with the operator's default etcd images:
// the members run theirs, and so does the reconciler.
func newScriptedClusterWithImages(t *testing.T, size int, images resources.EtcdImages, mutate func(*etcdv1alpha1.EtcdCluster), extra func() []client.Object) *scriptedCluster {
	t.Helper()
	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1", Generation: 1},
		// The CRD's defaults that matter here; the fake client applies none.
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: int32(size), Version: "3.6.16",
			Defragmentation: etcdv1alpha1.DefragmentationSpec{ThresholdPercent: 50}},
		Status: etcdv1alpha1.EtcdClusterStatus{ClusterID: "1"},
	}
	if mutate != nil {
		mutate(cluster)
	}
	fakeEtcd := &etcdfake.Cluster{ID: 1, Statuses: map[string]etcd.MemberStatus{}}
	objects := []client.Object{cluster}
	var names []string
	for i := range size {
		name := fmt.Sprintf("c-m%04d", i)
		names = append(names, name)
		pod := resources.MemberPod(cluster, resources.MemberSpec{Name: name, Version: "3.6.16", Voter: true}, images, resources.PodSettings{})
		pod.Status = corev1.PodStatus{PodIP: fmt.Sprintf("10.0.0.%d", i+1), Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		objects = append(objects, pod, resources.MemberPVC(cluster, resources.MemberSpec{Name: name}))
		id := uint64(i + 1)
		url := resources.ClientURL(cluster, name)
		fakeEtcd.Members = append(fakeEtcd.Members, etcd.Member{ID: id, Name: name, PeerURLs: []string{resources.PeerURL(cluster, name)}, ClientURLs: []string{url}})
		fakeEtcd.Statuses[url] = etcd.MemberStatus{MemberID: id, LeaderID: 1, Version: "3.6.16", RaftIndex: 10, RaftAppliedIndex: 10,
			DBSizeBytes: 1 << 20, DBSizeInUseBytes: 1 << 20}
	}
	if extra != nil {
		objects = append(objects, extra()...)
	}
	k8s := withEventFieldIndexes(fake.NewClientBuilder()).WithScheme(testScheme(t)).WithObjects(objects...).
		WithStatusSubresource(cluster, &etcdv1alpha1.EtcdRestore{}).Build()
	recorder := events.NewFakeRecorder(100)
	r := &EtcdClusterReconciler{Client: cacheView(k8s), APIReader: k8s, Etcd: etcd.NewCacheWith(fakeEtcd.Dial), Recorder: recorder, DefaultImages: images}
	a := &scriptedCluster{cluster: cluster, members: names, k8s: k8s, etcd: fakeEtcd, r: r, recorder: recorder, listening: map[string]bool{}}
	r.ProbeAddresses = a.probe
	return a
}

// probe is the reconciler's probe of a member's addresses: the first of addrs in listening.
func (a *scriptedCluster) probe(_ context.Context, addrs []string) string {
	a.probed = append(a.probed, addrs...)
	for _, addr := range addrs {
		if a.listening[addr] {
			return addr
		}
	}
	return ""
}

// reconcile runs n reconciles and returns the cluster as the last one left it.
func (a *scriptedCluster) reconcile(t *testing.T, n int) *etcdv1alpha1.EtcdCluster {
	t.Helper()
	for range n {
		if _, err := a.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	got := &etcdv1alpha1.EtcdCluster{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// events drains the events posted so far.
func (a *scriptedCluster) events() string { return drainEvents(a.recorder) }

// drainEvents takes every event a fake recorder holds, one a line.
func drainEvents(recorder *events.FakeRecorder) string {
	var out bytes.Buffer
	for {
		select {
		case e := <-recorder.Events:
			fmt.Fprintln(&out, e)
		default:
			return out.String()
		}
	}
}

func degradedReason(c *etcdv1alpha1.EtcdCluster) string {
	if cond := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); cond != nil && cond.Status == metav1.ConditionTrue {
		return cond.Reason
	}
	return ""
}

// withEventFieldIndexes lets the fake client select core Events by the fields the API server
// selects them by, as the reconciler reads the events of a pod.
func withEventFieldIndexes(b *fake.ClientBuilder) *fake.ClientBuilder {
	fields := map[string]func(*corev1.Event) string{
		"involvedObject.kind": func(e *corev1.Event) string { return e.InvolvedObject.Kind },
		"involvedObject.name": func(e *corev1.Event) string { return e.InvolvedObject.Name },
		"involvedObject.uid":  func(e *corev1.Event) string { return string(e.InvolvedObject.UID) },
		"type":                func(e *corev1.Event) string { return e.Type },
	}
	for field, value := range fields {
		b = b.WithIndex(&corev1.Event{}, field, func(o client.Object) []string { return []string{value(o.(*corev1.Event))} })
	}
	return b
}
