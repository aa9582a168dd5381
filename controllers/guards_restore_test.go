package controllers

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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

// An in-place restore does not start while a backup of the cluster runs: the snapshot would
// be taken from members being stopped, and the restore would stage beside the Job reading
// them. It says why it waits, and starts once the backup has finished.
func TestInPlaceRestoreWaitsForARunningBackup(t *testing.T) {
	rs := inPlaceRestore("after-backup")
	c := formedCluster(nil)
	backup := completedBackup("hourly", "c", 30, 700)
	backup.Status.ActiveJob = "hourly-29000000"
	r, k8s := restoreReconciler(t, rs, c, backup)
	jobs := func() int {
		t.Helper()
		list := &batchv1.JobList{}
		if err := k8s.List(t.Context(), list, client.InNamespace("ns")); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	staged := func() bool {
		t.Helper()
		err := k8s.Get(t.Context(), client.ObjectKeyFromObject(stagedClaim(c, resources.SeedMemberName("c", string(rs.UID)))), &corev1.PersistentVolumeClaim{})
		if client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		return err == nil
	}

	got := reconcileRestore(t, r, rs)
	got = reconcileRestore(t, r, got)
	cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
	if got.Status.Phase != etcdv1alpha1.RestorePending || cond == nil || cond.Reason != etcdv1alpha1.ReasonBackupRunning {
		t.Fatalf("phase %q, condition %+v: want Pending, waiting with reason BackupRunning", got.Status.Phase, cond)
	}
	if n := jobs(); n != 0 || staged() {
		t.Fatalf("%d restore Jobs, claim staged %t, while EtcdBackup hourly runs: want none", n, staged())
	}

	backup.Status.ActiveJob = ""
	if err := k8s.Update(t.Context(), backup); err != nil {
		t.Fatal(err)
	}
	got = reconcileRestore(t, r, got)
	if n := jobs(); got.Status.Phase != etcdv1alpha1.RestoreRestoring || n != 1 || !staged() {
		t.Fatalf("phase %q, %d restore Jobs, claim staged %t once the backup finished: want Restoring, one Job, the claim staged", got.Status.Phase, n, staged())
	}
}
