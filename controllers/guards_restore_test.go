package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The claim of an in-place restore's member, once given to the cluster, holds the restored
// member's data: cleaning up after the finished restore, or after it is deleted, takes down its
// Jobs and its hold on the cluster, never that claim. The clean-up finds the claims it staged by
// the restore's label, which giving a claim takes off; a given claim that still carries it (one
// a person labelled, or a label put back) must be spared all the same.
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
			given.Labels[resources.LabelRestore] = rs.Name
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

// errStopped is the operator stopping between two writes.
var errStopped = errors.New("the operator stopped here")

// The cut-over annotates the cluster before it labels the staged claim as the cluster's. An
// operator that stops between the two leaves either a cluster told to restore from a claim not
// yet its own (it stops its members and waits for the claim) or, the other way round, a claim
// labelled as a member's that etcd does not know: the cluster's reconciler, still running the
// old members, deletes it as an orphan, and the restored data with it.
func TestInPlaceCutOverStoppedHalfWayKeepsTheRestoredClaim(t *testing.T) {
	rs := inPlaceRestore("cut")
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, StartTime: ptrTime(time.Now()),
		Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "1"}, RestoredRevision: ptr.To[int64](42), SnapshotSHA256: "abc"}
	seed := resources.SeedMemberName("c", string(rs.UID))
	var staged *corev1.PersistentVolumeClaim
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Annotations = map[string]string{resources.AnnotationRestorePending: rs.Name}
		// As ensureSeedClaim stages it: the restored member's plan is to form alone.
		staged = resources.MemberPVC(c, resources.MemberSpec{Name: seed, InitialCluster: resources.InitialCluster(c, []string{seed}), State: "new"})
		staged.Labels, staged.OwnerReferences = resources.ManagedBy(), nil
		staged.Labels[resources.LabelRestore] = rs.Name
	}, func() []client.Object { return []client.Object{rs, staged} })
	job, pod := finishedRestoreJob(t, rs, resources.ManagedBy())
	for _, obj := range []client.Object{job, pod} {
		if err := a.k8s.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	// The restore reconciler's second cut-over write is the one the operator never makes.
	cutOverWrites := 0
	stopping := interceptor.NewClient(a.k8s.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			_, isCluster := obj.(*etcdv1alpha1.EtcdCluster)
			if (isCluster && obj.GetAnnotations()[resources.AnnotationRestoreSeed] == seed) ||
				(obj.GetName() == staged.Name && obj.GetLabels()[resources.LabelCluster] == "c") {
				if cutOverWrites++; cutOverWrites == 2 {
					return errStopped
				}
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	})
	restores := &EtcdRestoreReconciler{Client: cacheView(stopping), APIReader: stopping, AgentImage: "registry.test/agent",
		DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"}, Now: time.Now, Keyspaces: sameKeyspaceEverywhere}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rs)}

	if _, err := restores.Reconcile(t.Context(), req); !errors.Is(err, errStopped) {
		t.Fatalf("the cut-over reconcile returned %v, want it stopped at its second write (writes %d)", err, cutOverWrites)
	}
	a.reconcile(t, 3)
	claim := &corev1.PersistentVolumeClaim{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(staged), claim); err != nil || !claim.DeletionTimestamp.IsZero() {
		t.Fatalf("the restored claim after a cut-over stopped half-way: %v (deleting %v); events:\n%s", err, claim.DeletionTimestamp, a.events())
	}

	// The restore, looked at again, completes the cut-over; the cluster starts the restored
	// member on that claim.
	if _, err := restores.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	a.reconcile(t, 2)
	if _, ok := a.pod(t, seed); !ok {
		t.Fatalf("the restored member %s was not started once the cut-over was complete; events:\n%s", seed, a.events())
	}
}

// A deleted restore's clean-up deletes its staged claim as it read it: one given to the cluster
// in the meantime (its cut-over, in a reconcile the cache had not shown) holds a member's data
// from then on, and the delete, conditional on the claim read, leaves it.
func TestRestoreCleanUpSparesAStagedClaimGivenSinceItWasRead(t *testing.T) {
	rs := inPlaceRestore("gone")
	rs.Status.Phase = etcdv1alpha1.RestoreRestoring
	rs.DeletionTimestamp = ptrTime(time.Now())
	c := formedCluster(map[string]string{resources.AnnotationRestorePending: "gone"})
	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	staged := resources.MemberPVC(c, resources.MemberSpec{Name: seed})
	staged.Labels, staged.OwnerReferences = map[string]string{resources.LabelRestore: "gone"}, nil
	_, k8s := restoreReconciler(t, rs, c, staged)
	givenOnTheWay := interceptor.NewClient(k8s.(client.WithWatch), interceptor.Funcs{
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if obj.GetName() == staged.Name {
				claim := &corev1.PersistentVolumeClaim{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), claim); err != nil {
					return err
				}
				patch := client.MergeFrom(claim.DeepCopy())
				claim.Labels[resources.LabelCluster] = c.Name
				if err := cl.Patch(ctx, claim, patch); err != nil {
					return err
				}
			}
			return cl.Delete(ctx, obj, opts...)
		},
	})
	r := &EtcdRestoreReconciler{Client: cacheView(givenOnTheWay), APIReader: givenOnTheWay, AgentImage: "registry.test/agent",
		DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"}, Now: time.Now, Keyspaces: sameKeyspaceEverywhere}

	reconcileRestore(t, r, rs)
	claim := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(staged), claim); err != nil {
		t.Fatalf("the claim given to the cluster after the clean-up read it: %v; want it kept", err)
	}
	if claim.Labels[resources.LabelCluster] != c.Name {
		t.Fatalf("claim labels %v: the interception did not give it, so the test proves nothing", claim.Labels)
	}
}

// A restore that did not complete, deleted or failed once the cut-over began, keeps the seed
// annotation on the cluster: it tells the cluster's reconciler to restart from the restored member
// only, and without it the old members, stopped for the cut-over, would be started again beside
// it.
func TestARestoreThatDidNotCompleteKeepsTheCutOver(t *testing.T) {
	rs := inPlaceRestore("failed")
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreFailed, Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "old"}}
	seed := resources.SeedMemberName("c", string(rs.UID))
	c := formedCluster(map[string]string{resources.AnnotationRestorePending: rs.Name, resources.AnnotationRestoreSeed: seed})
	r, k8s := restoreReconciler(t, rs, c)

	if err := r.cleanUp(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	after := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), after); err != nil {
		t.Fatal(err)
	}
	if _, held := after.Annotations[resources.AnnotationRestorePending]; held {
		t.Fatalf("the failed restore still holds the cluster: the clean-up did not run, so the test proves nothing")
	}
	if after.Annotations[resources.AnnotationRestoreSeed] != seed {
		t.Fatalf("annotations %v: the cut-over to %s was taken back by a restore that did not complete", after.Annotations, seed)
	}
}

// A restore into a new cluster, deleted, takes that cluster with it only if it never formed
// (the restore still holds it): once it formed it holds data written since, and outlives the
// restore.
func TestADeletedRestoreLeavesTheClusterItCreatedOnceItFormed(t *testing.T) {
	rs := inPlaceRestore("made")
	rs.Spec.Target.Mode = etcdv1alpha1.RestoreNew
	rs.Status.Phase = etcdv1alpha1.RestoreCompleted
	rs.DeletionTimestamp = ptrTime(time.Now())
	c := formedCluster(map[string]string{resources.AnnotationRestoredBy: rs.Name})
	r, k8s := restoreReconciler(t, rs, c)

	reconcileRestore(t, r, rs)
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(rs), &etcdv1alpha1.EtcdRestore{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the restore: %v; want it gone once its finalizer ran, or the test proves nothing", err)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), &etcdv1alpha1.EtcdCluster{}); err != nil {
		t.Fatalf("the cluster the restore created, formed since: %v; want it kept", err)
	}
}
