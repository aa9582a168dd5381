package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// An in-place restore keeps the cluster's name, Services and Secrets and replaces its data:
//
//  1. stage: a claim per new member, not yet the cluster's, is filled from the snapshot by a
//     restore Job each and verified (sha256, etcdutl), all as members of one cluster of them,
//     while the old cluster serves on untouched; for a snapshot on a claim, the seed's claim
//     alone (preparesSeedAlone);
//  2. cut over: the claims become the cluster's and the cluster is told to restore from them —
//     its reconciler stops every old member (clients see it unavailable, never inconsistent)
//     and starts the restored members together (membership.restoreInPlace);
//  3. once the restored members serve, the old members' claims go, and any members the spec
//     asks for beyond the restored ones join as learners; the restore completes when the
//     cluster is Available at its size with every member holding the same keyspace.
//
// A failure before the cut-over leaves the cluster as it was. After it, the old members'
// claims stay until the restored members serve; docs/concepts.md says how to go back.

// backupRetry is how soon a restore waiting for a backup of its cluster looks again.
const backupRetry = 10 * time.Second

func (r *EtcdRestoreReconciler) restoreInPlace(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, src snapshotSource) (ctrl.Result, error) {
	c := &etcdv1alpha1.EtcdCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Spec.Target.ClusterName}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, failed(etcdv1alpha1.ReasonTargetNotFound, "EtcdCluster %s does not exist; mode InPlace restores an existing cluster", rs.Spec.Target.ClusterName)
		}
		return ctrl.Result{}, err
	}
	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	given, err := r.seedClaimGiven(ctx, c, seed)
	if err != nil {
		return ctrl.Result{}, err
	}
	if c.Annotations[resources.AnnotationRestoreSeed] == seed || given {
		// Cut over: the seed claim is the cluster's and may hold a live member's data. Never
		// stage onto it again, even if the record of the cut-over was lost.
		return r.awaitRestoredInPlace(ctx, rs, c)
	}
	if c.Spec.Paused {
		return ctrl.Result{}, failed(etcdv1alpha1.ReasonTargetPaused, "EtcdCluster %s is paused (spec.paused): it could not carry out the cut-over; unpause it and create the EtcdRestore again", c.Name)
	}
	if err := r.holdCluster(ctx, rs, c); err != nil {
		return ctrl.Result{}, err
	}
	if rs.Status.Phase == etcdv1alpha1.RestorePending {
		if result, err := r.checkInPlaceStart(ctx, rs, c, src); err != nil || !result.IsZero() {
			return result, err
		}
	}

	members, err := r.restoreMembers(ctx, rs, c, src)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, member := range members {
		if err := r.ensureRestoreClaim(ctx, c, member, members, rs.Name, nil); err != nil {
			return ctrl.Result{}, err
		}
	}
	// gofail: var restoreSeedClaimStaged struct{}
	wait, done, err := r.runRestoreJobs(ctx, rs, c, members, src)
	if err != nil {
		var failure *restoreFailure
		if errors.As(err, &failure) {
			// cleanUp deletes the staged claims once the failure is recorded.
			return ctrl.Result{}, failed(failure.reason, "%s; EtcdCluster %s was not touched", failure.message, c.Name)
		}
		return ctrl.Result{}, err
	}
	if !done {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := passedTheBump(rs, c); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.carryRootPasswords(ctx, c, src); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.cutOver(ctx, rs, c, seed, members)
}

// passedTheBump refuses the cut-over when the cluster, serving on while its snapshot was
// staged, has reached a revision at or past the one the restored data starts from: clients may
// hold that revision, and the restored cluster would hand it out again with other data. The
// bump was chosen with a fifth to spare and at least a million revisions, so this takes a
// cluster writing very fast during the staging; a restore created again bumps past it. With
// spec.revisionBump None the user chose to start at the snapshot's revision.
func passedTheBump(rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster) error {
	starts := ptr.Deref(rs.Status.RestoredRevision, 0) + rs.Status.RevisionBump
	if rs.Status.RevisionBump == 0 || c.Status.HighestRevision < starts {
		return nil
	}
	return failed(etcdv1alpha1.ReasonFailed,
		"EtcdCluster %s reached revision %d while the snapshot was staged, past revision %d the restored data would start from (snapshot %d + bump %d), and was not touched; create the restore again, which bumps past it, or give a larger spec.revisionBump",
		c.Name, c.Status.HighestRevision, starts, ptr.Deref(rs.Status.RestoredRevision, 0), rs.Status.RevisionBump)
}

// checkInPlaceStart refuses to start while a backup of the cluster runs, and records what the
// restore is about to replace.
func (r *EtcdRestoreReconciler) checkInPlaceStart(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, src snapshotSource) (ctrl.Result, error) {
	if tooOld(c.Spec.Version, src.etcdVersion) {
		return ctrl.Result{}, failed(etcdv1alpha1.ReasonVersionTooOld, "the snapshot was taken with etcd %s; EtcdCluster %s runs %s, which cannot read it", src.etcdVersion, c.Name, c.Spec.Version)
	}
	if err := r.authRequired(ctx, rs, src, c.Spec.Auth, fmt.Sprintf("EtcdCluster %s has no spec.auth", c.Name),
		fmt.Sprintf("Set spec.auth.rootSecretName on EtcdCluster %s", c.Name), fmt.Sprintf("EtcdCluster %s was not touched", c.Name)); err != nil {
		return ctrl.Result{}, err
	}
	if why := storageTooSmall(src, resources.MemberStorageSize(c)); why != "" {
		return ctrl.Result{}, failed(etcdv1alpha1.ReasonStorageTooSmall, "%s: set EtcdCluster %s's spec.storage.size to at least %d bytes (its claims grow in place where the storage class allows) and create the restore again; EtcdCluster %s was not touched",
			why, c.Name, jobspec.RestoreNeedsBytes(src.largestBytes), c.Name)
	}
	backups := &etcdv1alpha1.EtcdBackupList{}
	if err := r.List(ctx, backups, client.InNamespace(rs.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	for _, b := range backups.Items {
		if b.Spec.ClusterName == c.Name && b.Status.ActiveJob != "" {
			setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonBackupRunning,
				"EtcdBackup %s is taking a snapshot of EtcdCluster %s; the restore starts when it has finished", b.Name, c.Name)
			return ctrl.Result{RequeueAfter: backupRetry}, nil
		}
	}
	replaced := &etcdv1alpha1.ReplacedData{ClusterID: c.Status.ClusterID, Revision: c.Status.HighestRevision}
	for _, m := range c.Status.Members {
		replaced.Members = append(replaced.Members, m.Name)
	}
	rs.Status.Replaced, rs.Status.Phase = replaced, etcdv1alpha1.RestoreRestoring
	return ctrl.Result{}, nil
}

// stagedClaim is the claim a restore prepares member's data on.
func stagedClaim(c *etcdv1alpha1.EtcdCluster, member string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: resources.PVCName(member)}}
}

// cutOver tells the cluster to restore from the staged claims. The cluster is annotated before
// the claims are labelled as its own: the other way round, its reconciler, still running the
// old members, would see claims of members etcd does not know and delete them as orphans.
func (r *EtcdRestoreReconciler) cutOver(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, seed string, members []string) error {
	clusterPatch := client.MergeFrom(c.DeepCopy())
	c.Annotations = maps.Clone(c.Annotations)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[resources.AnnotationRestorePending] = rs.Name
	c.Annotations[resources.AnnotationRestoreSeed] = seed
	if err := r.Patch(ctx, c, clusterPatch); err != nil {
		return fmt.Errorf("start the cut-over of EtcdCluster %s: %w", c.Name, err)
	}
	// gofail: var restoreCutOverStarted struct{}
	setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoring,
		"EtcdCluster %s is stopping its members; it restarts from the restored data of members %s%s", c.Name, strings.Join(members, ", "), growsTo(c, members))
	postEvent(r.Recorder, rs, corev1.EventTypeNormal, "CutOver", "Restore", "EtcdCluster %s stops its members %v and restarts from the snapshot", c.Name, rs.Status.Replaced.Members)
	return r.giveClaims(ctx, c, members)
}

// giveClaims labels the staged claims as the restored members', once the cluster is annotated.
// The cluster's reconciler starts none of the restored members until every one's claim is its
// own.
func (r *EtcdRestoreReconciler) giveClaims(ctx context.Context, c *etcdv1alpha1.EtcdCluster, members []string) error {
	for _, member := range members {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(stagedClaim(c, member)), pvc); err != nil {
			return err
		}
		if pvc.Labels[resources.LabelCluster] != c.Name {
			claimPatch := client.MergeFrom(pvc.DeepCopy())
			pvc.Labels, pvc.OwnerReferences = resources.MemberLabels(c, member), resources.ClaimOwners(c)
			if err := r.Patch(ctx, pvc, claimPatch); err != nil {
				return fmt.Errorf("give claim %s to EtcdCluster %s: %w", pvc.Name, c.Name, err)
			}
		}
	}
	// Crossed whenever the claims are the cluster's, given now or before: a crash of the
	// cluster's reconciler, in the same process, can end the process between the patch and
	// this line, and the restore, restarted, then finds the claims given.
	// gofail: var restoreClaimGiven struct{}
	return nil
}

// awaitRestoredInPlace completes the restore once the cluster serves the restored data at its
// size; cleanUp releases the cluster once that is recorded.
func (r *EtcdRestoreReconciler) awaitRestoredInPlace(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster) (ctrl.Result, error) {
	rs.Status.Phase = etcdv1alpha1.RestoreRestoring
	members, err := r.cutOverMembers(ctx, rs, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.giveClaims(ctx, c, members); err != nil {
		return ctrl.Result{}, err
	}
	restored := c.Status.ClusterID != "" && (rs.Status.Replaced == nil || c.Status.ClusterID != rs.Status.Replaced.ClusterID)
	if !restored || !servesAtSize(c) {
		return r.awaitServing(rs, c, fmt.Sprintf("EtcdCluster %s is restarting from the restored members %s: %d of %d members ready", c.Name, strings.Join(members, ", "), c.Status.ReadyMembers, c.Spec.Size)), nil
	}
	agreed, wait := r.compareRestoredData(ctx, rs, c)
	if wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.complete(rs, c, ", in place under its own name and Services"+agreed) // cleanUp then releases the cluster
	return ctrl.Result{}, nil
}

// cutOverMembers are the members a restore cut the cluster over to, as the cluster's reconciler
// takes them (membership.restoredMembers): those the seed's claim plans, the seed among them;
// else the seed alone. The claim, staged before the cut-over, decides: not the source, which a
// restore deleted during its cut-over may no longer resolve.
func (r *EtcdRestoreReconciler) cutOverMembers(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster) ([]string, error) {
	pvc, err := r.seedClaim(ctx, rs, c)
	if err != nil {
		return nil, err
	}
	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	if pvc != nil {
		if planned := resources.MembersOfInitialCluster(pvc.Annotations[resources.AnnotationInitialCluster]); slices.Contains(planned, seed) {
			return planned, nil
		}
	}
	return []string{seed}, nil
}
