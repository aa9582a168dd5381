package controllers

import (
	"context"
	"fmt"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// restoreFinalizer lets an EtcdRestore take back what it set on its cluster before it goes: a
// hold left by a deleted restore would otherwise stay on the cluster for good.
const restoreFinalizer = "etcd.database.dev/restore-cleanup"

// Every restore of a cluster is recorded (status) before what it set up is taken down (cleanUp),
// and what it set up is taken down by the restore itself, also when it is deleted (finalize).

// cleanUp takes down what a finished restore set up, once its outcome is in status: its Jobs, its
// hold on the cluster, staged claims the cluster never took, and the restore on the claims of
// members restored in their own pods. It is idempotent, and runs on
// every look at a finished restore, so that a cleanup cut short is completed.
func (r *EtcdRestoreReconciler) cleanUp(ctx context.Context, rs *etcdv1alpha1.EtcdRestore) error {
	log := ctrl.LoggerFrom(ctx).V(1).WithValues("restore", rs.Name)
	// Read from the cache first: a finished restore is looked at on every status change of the
	// cluster it restored, and must not send the API server a delete each time.
	jobs := &batchv1.JobList{}
	if err := r.List(ctx, jobs, client.InNamespace(rs.Namespace), client.MatchingLabels{resources.LabelRestore: rs.Name}); err != nil {
		return err
	}
	for i := range jobs.Items {
		job := &jobs.Items[i]
		if !job.DeletionTimestamp.IsZero() || !metav1.IsControlledBy(job, rs) {
			continue
		}
		log.Info("step", "action", "DeleteJob", "job", job.Name, "reason", "the restore's outcome is recorded in status")
		if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete restore Job %s: %w", job.Name, err)
		}
	}
	if rs.Spec.Target.Mode != etcdv1alpha1.RestoreInPlace {
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
			return nil // a failed restore's members, left as they are, go on saying what they restore
		}
		return r.clearMemberRestores(ctx, rs)
	}
	c := &etcdv1alpha1.EtcdCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Spec.Target.ClusterName}, c); err != nil {
		return client.IgnoreNotFound(err)
	}
	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	log.Info("step", "action", "ReleaseCluster", "cluster", c.Name, "phase", rs.Status.Phase, "reason", "the restore has finished")
	if err := r.releaseCluster(ctx, rs, c, seed); err != nil {
		return err
	}
	return r.deleteStagedClaims(ctx, rs, c)
}

// releaseCluster removes this restore's hold on the cluster. The seed annotation, which drives
// the cut-over, goes only with a restore that completed: before the cut-over it is not set, and
// during it only the cluster serving the restored data ends it.
func (r *EtcdRestoreReconciler) releaseCluster(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, seed string) error {
	release := map[string]bool{
		resources.AnnotationRestorePending: c.Annotations[resources.AnnotationRestorePending] == rs.Name,
		resources.AnnotationRestoreSeed:    c.Annotations[resources.AnnotationRestoreSeed] == seed && rs.Status.Phase == etcdv1alpha1.RestoreCompleted,
	}
	if !release[resources.AnnotationRestorePending] && !release[resources.AnnotationRestoreSeed] {
		return nil
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Annotations = maps.Clone(c.Annotations)
	for key, ours := range release {
		if ours {
			delete(c.Annotations, key)
		}
	}
	if err := r.Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("release EtcdCluster %s: %w", c.Name, err)
	}
	return nil
}

// deleteStagedClaims deletes the restore's staged claims the cluster never took: a claim
// labelled as the cluster's holds a member's data and is never deleted here. Read live, and
// deleted only as read: a claim given since is spared.
func (r *EtcdRestoreReconciler) deleteStagedClaims(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster) error {
	staged := &corev1.PersistentVolumeClaimList{}
	if err := r.APIReader.List(ctx, staged, client.InNamespace(c.Namespace), client.MatchingLabels{resources.LabelRestore: rs.Name}); err != nil {
		return err
	}
	for i := range staged.Items {
		pvc := &staged.Items[i]
		if claimGiven(c, pvc) {
			continue
		}
		err := r.Delete(ctx, pvc, client.Preconditions{UID: &pvc.UID, ResourceVersion: &pvc.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete staged claim %s: %w", pvc.Name, err)
		}
	}
	return nil
}

// claimGiven says whether the claim is the cluster's: labelled as one of its members'.
func claimGiven(c *etcdv1alpha1.EtcdCluster, pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Labels[resources.LabelCluster] == c.Name
}

// seedClaimGiven says whether the restore's seed claim already belongs to the cluster: the
// cut-over happened, and the claim may hold a live member's data.
func (r *EtcdRestoreReconciler) seedClaimGiven(ctx context.Context, c *etcdv1alpha1.EtcdCluster, seed string) (bool, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(stagedClaim(c, seed)), pvc); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return claimGiven(c, pvc), nil
}

// holdCluster takes the cluster for this in-place restore, under an optimistic lock: of two
// restores of one cluster started together, one gets it and the other is refused.
func (r *EtcdRestoreReconciler) holdCluster(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster) error {
	if holder := c.Annotations[resources.AnnotationRestorePending]; holder == rs.Name {
		return nil
	} else if holder != "" {
		return failed(etcdv1alpha1.ReasonTargetHeld, "EtcdRestore %s is restoring EtcdCluster %s: one restore of a cluster runs at a time; create this one again once %s has finished", holder, c.Name, holder)
	}
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	c.Annotations = maps.Clone(c.Annotations)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[resources.AnnotationRestorePending] = rs.Name
	if err := r.Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("hold EtcdCluster %s for the restore: %w", c.Name, err)
	}
	return nil
}

// ensureFinalizer adds the finalizer before the restore sets anything up; it says whether it
// did (the update brings the restore back).
func (r *EtcdRestoreReconciler) ensureFinalizer(ctx context.Context, rs *etcdv1alpha1.EtcdRestore) (bool, error) {
	if controllerutil.ContainsFinalizer(rs, restoreFinalizer) {
		return false, nil
	}
	patch := client.MergeFrom(rs.DeepCopy())
	controllerutil.AddFinalizer(rs, restoreFinalizer)
	if err := r.Patch(ctx, rs, patch); err != nil {
		return false, fmt.Errorf("add finalizer: %w", err)
	}
	return true, nil
}

// finalize takes down what a deleted restore set up, then lets it go. An in-place restore
// deleted during its cut-over is seen through first: its cluster's old members are stopped, and
// only the restored one can serve again. A cluster a restore created, and that never formed,
// holds nothing and goes with it.
func (r *EtcdRestoreReconciler) finalize(ctx context.Context, rs *etcdv1alpha1.EtcdRestore) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(rs, restoreFinalizer) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).V(1).WithValues("restore", rs.Name)
	c := &etcdv1alpha1.EtcdCluster{}
	err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Spec.Target.ClusterName}, c)
	if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	found := err == nil
	seed := resources.SeedMemberName(rs.Spec.Target.ClusterName, string(rs.UID))
	switch {
	case found && rs.Spec.Target.Mode == etcdv1alpha1.RestoreInPlace && c.Annotations[resources.AnnotationRestoreSeed] == seed &&
		rs.Status.Phase != etcdv1alpha1.RestoreCompleted:
		postEvent(r.Recorder, rs, corev1.EventTypeNormal, "DeletionWaits", "Delete",
			"EtcdCluster %s is being restarted from the restored data; the EtcdRestore goes once it serves", c.Name)
		log.Info("step", "action", "DeletionWaits", "cluster", c.Name, "reason", "the cluster is being restarted from the restored data")
		before := rs.DeepCopy()
		result, err := r.awaitRestoredInPlace(ctx, rs, c)
		if err == nil {
			err = writeStatusNow(ctx, r.Client, rs, before, restoreStatus)
		}
		if err != nil || rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
			return result, err
		}
	case found && rs.Spec.Target.Mode != etcdv1alpha1.RestoreInPlace && c.Annotations[resources.AnnotationRestoredBy] == rs.Name &&
		c.Annotations[resources.AnnotationRestorePending] == rs.Name:
		log.Info("step", "action", "DeleteTarget", "cluster", c.Name, "reason", "the restore is deleted before its cluster formed")
		if err := r.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("delete EtcdCluster %s, which never formed: %w", c.Name, err)
		}
	}
	if err := r.cleanUp(ctx, rs); err != nil {
		return ctrl.Result{}, err
	}
	log.Info("step", "action", "RemoveFinalizer", "reason", "the restore holds nothing any more")
	patch := client.MergeFrom(rs.DeepCopy())
	controllerutil.RemoveFinalizer(rs, restoreFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Patch(ctx, rs, patch))
}

func restoreStatus(o client.Object) any { return o.(*etcdv1alpha1.EtcdRestore).Status }
