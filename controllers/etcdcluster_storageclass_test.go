package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A claim waiting for its first pod, to which the API server gave the default StorageClass
// because the spec names none, is not outdated: before, every such claim of a bootstrap looked
// outdated, and the bootstrap members were made again and again (the failpoint walk saw a
// bootstrap member removed as "data gone" and replaced, a fourth member). A class the spec
// names and the claim lacks still is.
func TestADefaultedStorageClassIsNotACorrection(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{Spec: etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16",
		Storage: etcdv1alpha1.StorageSpec{Size: ptr.To(resource.MustParse("256Mi"))}}}
	c.Name, c.Namespace = "c", "ns"
	pvc := resources.MemberPVC(c, resources.MemberSpec{Name: "c-a"})
	pvc.Spec.StorageClassName = ptr.To("local-path") // the API server's default
	pvc.Status.Phase = corev1.ClaimPending
	outdated := func() bool {
		obs := &observation{access: &access{}, pvcs: map[string]*corev1.PersistentVolumeClaim{"c-a": pvc}}
		for _, m := range obs.decisionInput(c, time.Now()).Members {
			if m.Name == "c-a" {
				return m.PVCUnboundOutdated
			}
		}
		t.Fatal("member c-a not in the decision's input")
		return false
	}
	if outdated() {
		t.Errorf("a claim given the default class, with none in the spec, is taken for outdated")
	}
	c.Spec.Storage.StorageClassName = ptr.To("fast")
	if !outdated() {
		t.Errorf("a claim of class local-path with spec.storage.storageClassName fast is not taken for outdated")
	}
}
