package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The claim of an in-place restore's seed member, once given to the cluster, holds the
// restored member's data: cleaning up after the finished restore, or after it is deleted, takes
// down its Job and its hold on the cluster, never that claim.
func TestRestoreCleanUpKeepsTheClaimGivenToTheRestoredMember(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deleted bool
	}{
		{"completed", false},
		{"completed, then deleted", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := inPlaceRestore("done")
			rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreCompleted, Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "old"}}
			if tc.deleted {
				rs.DeletionTimestamp = ptrTime(time.Now())
			}
			seed := resources.SeedMemberName("c", string(rs.UID))
			c := formedCluster(map[string]string{resources.AnnotationRestorePending: rs.Name, resources.AnnotationRestoreSeed: seed})
			given := resources.MemberPVC(c, resources.MemberSpec{Name: seed})
			r, k8s := restoreReconciler(t, rs, c, given)

			for range 2 {
				reconcileRestore(t, r, rs)
			}
			released := &etcdv1alpha1.EtcdCluster{}
			if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), released); err != nil {
				t.Fatal(err)
			}
			if _, held := released.Annotations[resources.AnnotationRestorePending]; held {
				t.Fatalf("the cluster is still held: the clean-up did not run, so the test proves nothing")
			}
			claim := &corev1.PersistentVolumeClaim{}
			if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(given), claim); err != nil {
				t.Fatalf("the restored member's claim: %v; it holds the cluster's data and must never be deleted by the clean-up", err)
			}
			if !claim.DeletionTimestamp.IsZero() || claim.Labels[resources.LabelCluster] != "c" {
				t.Fatalf("the restored member's claim is being deleted (%v) or no longer the cluster's (labels %v)", claim.DeletionTimestamp, claim.Labels)
			}
		})
	}
}
