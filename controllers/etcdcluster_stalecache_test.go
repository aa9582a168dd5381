package controllers

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), etcdv1alpha1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	return scheme
}

func staleTestCluster() *etcdv1alpha1.EtcdCluster {
	return &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1"},
		Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16"},
	}
}

// A reconcile whose cache has not yet seen the pods of the bootstrap before it decides to
// bootstrap again. It must make the same three members, not three more that would form a second
// cluster beside the first.
func TestBootstrapRepeatedFromAStaleCacheMakesTheSameMembers(t *testing.T) {
	cluster := staleTestCluster()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cluster).Build()
	r := &EtcdClusterReconciler{Client: c, DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"}}
	step := membership.Step{Action: membership.Bootstrap, Size: 3}
	for range 2 {
		if _, err := r.act(t.Context(), cluster, &observation{}, step); err != nil {
			t.Fatal(err)
		}
	}
	pods := &corev1.PodList{}
	if err := c.List(t.Context(), pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 3 {
		t.Fatalf("two bootstraps from a stale cache made %d member pods, want the same 3", len(pods.Items))
	}
}

// A bootstrap is decided from the cache, and cannot be taken back: before it makes anything, the
// API server is asked. A cluster that formed (status.clusterID), or that has member objects the
// cache does not show yet, is not bootstrapped: a second cluster would form under its name, beside
// or over the first.
func TestBootstrapConfirmsFromTheAPIServerThatTheClusterNeverFormed(t *testing.T) {
	cases := map[string]func(live *etcdv1alpha1.EtcdCluster) []client.Object{
		"status names the cluster it formed": func(live *etcdv1alpha1.EtcdCluster) []client.Object {
			live.Status.ClusterID = "8e9e05c52164694d"
			return []client.Object{live}
		},
		"a member's claim exists": func(live *etcdv1alpha1.EtcdCluster) []client.Object {
			return []client.Object{live, resources.MemberPVC(live, resources.MemberSpec{Name: "c-abcde"})}
		},
	}
	for name, apiServerHolds := range cases {
		t.Run(name, func(t *testing.T) {
			cached := staleTestCluster()
			cache := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cached.DeepCopy()).Build()
			apiServer := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(apiServerHolds(cached.DeepCopy())...).Build()
			r := &EtcdClusterReconciler{Client: cache, APIReader: apiServer, DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"}}
			if _, err := r.act(t.Context(), cached, &observation{}, membership.Step{Action: membership.Bootstrap, Size: 3}); err != nil {
				t.Fatal(err)
			}
			pods := &corev1.PodList{}
			if err := cache.List(t.Context(), pods); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 0 {
				t.Fatalf("bootstrapped %d members although the API server shows the cluster formed or with members", len(pods.Items))
			}
		})
	}
}
