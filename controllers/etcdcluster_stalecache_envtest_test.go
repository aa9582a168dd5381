package controllers_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/controllers"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A claim deleted as an orphan is the claim observed: if the API server holds a newer claim of
// the same name (the cache has not caught up), that one is left alone.
func TestOrphanDeletionSparesAClaimTheCacheHasNotSeen(t *testing.T) {
	cluster := &etcdv1alpha1.EtcdCluster{}
	cluster.Name, cluster.Namespace = "stale", restrictedNamespace(t)
	live := resources.MemberPVC(cluster, resources.MemberSpec{Name: "stale-live1"})
	if err := k8sClient.Create(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	cached := live.DeepCopy()
	cached.UID = types.UID("an-earlier-claim-of-the-same-name")

	r := &controllers.EtcdClusterReconciler{Client: k8sClient}
	if err := r.DeleteOrphans(t.Context(), cluster, nil, map[string]*corev1.PersistentVolumeClaim{"stale-live1": cached}, []string{"stale-live1"}); err != nil {
		t.Fatal(err)
	}
	got := &corev1.PersistentVolumeClaim{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(live), got); apierrors.IsNotFound(err) || !got.DeletionTimestamp.IsZero() {
		t.Fatal("the live claim was deleted on the strength of a stale copy")
	} else if err != nil {
		t.Fatal(err)
	}
}

// A pod taken down as an orphan's is the pod observed: if the API server holds a newer pod of the
// same name (a member made again, which the cache has not caught up with), that one is left alone.
func TestOrphanDeletionSparesAPodTheCacheHasNotSeen(t *testing.T) {
	cluster := &etcdv1alpha1.EtcdCluster{}
	cluster.Name, cluster.Namespace = "stale", restrictedNamespace(t)
	live := resources.MemberPod(cluster, resources.MemberSpec{Name: "stale-live1", Version: "3.6.16"}, resources.EtcdImages{Repository: "etcd"}, resources.PodSettings{})
	if err := k8sClient.Create(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	cached := live.DeepCopy()
	cached.UID = types.UID("an-earlier-pod-of-the-same-name")

	r := &controllers.EtcdClusterReconciler{Client: k8sClient}
	if err := r.DeleteOrphans(t.Context(), cluster, map[string]*corev1.Pod{"stale-live1": cached}, nil, []string{"stale-live1"}); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Pod{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(live), got); apierrors.IsNotFound(err) || !got.DeletionTimestamp.IsZero() {
		t.Fatal("the live pod was deleted on the strength of a stale copy")
	} else if err != nil {
		t.Fatal(err)
	}
}
