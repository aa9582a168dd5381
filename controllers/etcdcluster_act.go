package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// act carries out one step and says when to look again. Every step is idempotent: if the
// operator stops half-way, the next observation shows what is left and decides again. A step the
// PodDisruptionBudget holds returns a *disruptionHeld, with the time to look again.
func (r *EtcdClusterReconciler) act(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step) (ctrl.Result, error) {
	// Every decision, waits included, at debug (LOG_LEVEL=debug); the steps taken at info, below.
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", c.Name, "action", step.Action, "member", step.Member, "members", step.Members,
		"operation", step.Operation, "reason", step.Reason)
	log.V(1).Info("step")
	var err error
	switch step.Action {
	case membership.Wait:
		if step.Operation == membership.OpNone {
			return ctrl.Result{RequeueAfter: nextSteadyLook()}, nil
		}
		return ctrl.Result{RequeueAfter: requeueWaiting}, nil
	case membership.Bootstrap:
		err = r.bootstrap(ctx, c, step.Size)
	case membership.CreateBootstrapMembers:
		err = r.createBootstrapMembers(ctx, c, obs, step.Members)
	case membership.RestartMembers:
		err = r.restartMembers(ctx, c, obs, step.Members)
	case membership.StartMember:
		err = r.startMember(ctx, c, obs, step.Member)
	case membership.AddLearner:
		err = r.addLearner(ctx, c, obs)
	case membership.PromoteLearner:
		err = obs.client.PromoteLearner(ctx, step.MemberID)
		if errors.Is(err, etcd.ErrLearnerNotReady) {
			return ctrl.Result{RequeueAfter: requeueAfterStep}, nil
		}
		if err == nil {
			r.countPromoted(ctx, c, obs, step.Member)
		}
	case membership.MoveLeader:
		err = obs.client.MoveLeader(ctx, resources.ClientURL(c, step.Member), step.Target)
	case membership.RemoveMember:
		err = r.removeMember(ctx, c, obs, step)
	case membership.DeleteOrphans:
		err = r.deleteOrphans(ctx, c, obs, step, step.Members)
	case membership.StopMembers:
		err = r.stopMembers(ctx, c, obs, step, step.Members)
	case membership.RollMember:
		err = r.stopMembers(ctx, c, obs, step, []string{step.Member})
	case membership.ResetBootstrapMembers:
		err = r.resetBootstrapMembers(ctx, c, obs, step)
	case membership.RecordPodSpec:
		err = r.recordPodSpec(ctx, c, obs, step.Members)
	case membership.BeginRecovery:
		// Nothing changes: report records the recovery, which makes the choice of member stick.
	case membership.AbandonRecovery:
		err = r.abandonRecovery(ctx, obs, step)
	case membership.PreserveData:
		err = r.preserveData(ctx, c, obs, step)
	case membership.FenceMembers:
		err = r.fenceMembers(ctx, c, obs, step)
	case membership.ForceNewCluster:
		err = r.forceNewCluster(ctx, c, obs, step)
	case membership.ReadLogs:
		err = r.readLogs(ctx, c, obs, step.Members)
	case membership.RestoreFromBackup:
		err = r.restoreFromBackup(ctx, c)
	case membership.ExpandClaims:
		err = r.expandClaims(ctx, c, obs, step.Members)
	case membership.UpgradeMember:
		err = r.upgradeMember(ctx, c, obs, step)
	case membership.Defragment:
		r.defragmentInBackground(c, obs, step)
	case membership.DisarmNoSpace:
		err = obs.client.DisarmNoSpace(ctx)
	case membership.FenceFromClients:
		err = r.fenceFromClientsOnly(ctx, obs, step.Members)
	case membership.DisarmCorrupt:
		err = obs.client.DisarmCorrupt(ctx, step.MemberID)
	case membership.EnableAuth:
		err = r.setRootPassword(ctx, c, obs, true)
	case membership.ChangeRootPassword:
		err = r.setRootPassword(ctx, c, obs, false)
	case stepMakeNewCA, stepPublishBundle, stepReissueLeaves, stepRecordCAPhase:
		err = r.rotateCA(ctx, c, obs)
	default:
		err = fmt.Errorf("unknown step %q", step.Action)
	}
	if errors.Is(err, errStaleCache) {
		return ctrl.Result{RequeueAfter: requeueAfterStep}, nil
	}
	if held := (*disruptionHeld)(nil); errors.As(err, &held) {
		// Returned, for report to say the step waits; not a failure, so no event and no backoff.
		log.Info("step held by the PodDisruptionBudget", "pod", held.pod, "cause", held.cause)
		return ctrl.Result{RequeueAfter: requeueWaiting}, err
	}
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// The namespace is being deleted, and the cluster with it: nothing can be created in it
		// any more, and retrying would only hammer the API server until the cluster is gone.
		return ctrl.Result{}, nil
	}
	if err != nil {
		postEvent(r.Recorder, c, corev1.EventTypeWarning, "StepFailed", string(step.Action), "%s %s: %v", step.Action, step.Member, err)
		return ctrl.Result{}, fmt.Errorf("%s %s: %w", step.Action, step.Member, err)
	}
	// The story the events summarise, one line per change made to the cluster.
	log.Info("step taken")
	postEvent(r.Recorder, c, corev1.EventTypeNormal, string(step.Action), string(step.Action), "%s%s", step.Reason, membersSuffix(step))
	return ctrl.Result{RequeueAfter: requeueAfterStep}, nil
}

func membersSuffix(step membership.Step) string {
	switch {
	case step.Member != "":
		return ": " + step.Member
	case len(step.Members) > 0:
		return ": " + strings.Join(step.Members, ", ")
	}
	return ""
}

// bootstrap creates size members that form the cluster together, all listed in one
// --initial-cluster, with the plan recorded on each pod and claim. A bootstrap cannot be taken
// back, so the decision, made from the cache, is confirmed first against the API server; and
// the members' names come from the cluster's UID, so that a repeat makes the same members.
func (r *EtcdClusterReconciler) bootstrap(ctx context.Context, c *etcdv1alpha1.EtcdCluster, size int) error {
	if err := r.confirmNeverFormed(ctx, c); err != nil {
		return err
	}
	names := resources.BootstrapMemberNames(c, size)
	initial := resources.InitialCluster(c, names)
	for _, name := range names {
		if err := r.createMember(ctx, c, resources.MemberSpec{Name: name, Version: c.Spec.Version, InitialCluster: initial, State: "new", Voter: true}, true); err != nil {
			return err
		}
	}
	return nil
}

// errStaleCache stops a step decided from a cache that the API server contradicts; the next
// reconcile decides again from fresher objects.
var errStaleCache = errors.New("the cache is behind the API server; deciding again")

// confirmNeverFormed reads the cluster and its member pods and claims from the API server: a
// cluster that has formed, or has members the cache does not show yet, is not bootstrapped.
func (r *EtcdClusterReconciler) confirmNeverFormed(ctx context.Context, c *etcdv1alpha1.EtcdCluster) error {
	if r.APIReader == nil {
		return nil
	}
	live := &etcdv1alpha1.EtcdCluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(c), live); err != nil {
		return fmt.Errorf("confirm the cluster never formed: %w", err)
	}
	if live.Status.ClusterID != "" {
		return fmt.Errorf("status.clusterID is %s: %w", live.Status.ClusterID, errStaleCache)
	}
	selector := client.MatchingLabels(resources.Selector(c))
	for _, list := range []client.ObjectList{&corev1.PodList{}, &corev1.PersistentVolumeClaimList{}} {
		if err := r.APIReader.List(ctx, list, client.InNamespace(c.Namespace), selector, client.Limit(1)); err != nil {
			return fmt.Errorf("confirm the cluster has no members yet: %w", err)
		}
		if meta.LenList(list) > 0 {
			return fmt.Errorf("member objects exist that the cache does not show: %w", errStaleCache)
		}
	}
	return nil
}

func (r *EtcdClusterReconciler) createBootstrapMembers(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, names []string) error {
	plan := obs.bootstrapPlan(c)
	initial := resources.InitialCluster(c, plan)
	for _, name := range names {
		_, hasPVC := obs.pvcs[name]
		restore, err := r.memberRestoreOn(obs, name)
		if err != nil {
			return err
		}
		if err := r.createMember(ctx, c, resources.MemberSpec{Name: name, Version: c.Spec.Version, InitialCluster: initial, State: "new", Voter: true, Restore: restore}, !hasPVC); err != nil {
			return err
		}
	}
	return nil
}

// memberRestoreOn is the restore member's claim asks its pods to run before etcd starts
// (resources.AnnotationMemberRestore), with the operator's proxy settings for its fetch; nil
// for a claim that asks none, or no claim.
func (r *EtcdClusterReconciler) memberRestoreOn(obs *observation, member string) (*resources.MemberRestore, error) {
	pvc, ok := obs.pvcs[member]
	if !ok {
		return nil, nil
	}
	restore, err := resources.MemberRestoreOf(pvc)
	if restore != nil {
		restore.Env = r.Pods.Env
	}
	return restore, err
}

// restartMembers recreates the pods of members whose data is on their claims. etcd ignores the
// bootstrap flags when its data directory is populated, so the recorded ones are reused as
// they are.
func (r *EtcdClusterReconciler) restartMembers(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, names []string) error {
	for _, name := range names {
		pvc, ok := obs.pvcs[name]
		if !ok {
			return fmt.Errorf("member %s has no claim: it cannot be restarted", name)
		}
		restore, err := r.memberRestoreOn(obs, name)
		if err != nil {
			return err
		}
		spec := resources.MemberSpec{
			Name:           name,
			Version:        versionToRun(c, obs, name),
			InitialCluster: pvc.Annotations[resources.AnnotationInitialCluster],
			State:          pvc.Annotations[resources.AnnotationClusterState],
			Voter:          obs.votes(c, name),
			// A restored member's pod lost before its restore completed: the data may not be
			// installed yet, and the restore reads its report from this pod.
			Restore: restore,
		}
		if err := r.createMember(ctx, c, spec, false); err != nil {
			return err
		}
	}
	return nil
}

// versionToRun is the version a member's pod is made again with: the one an upgrade chose for
// it, recorded on its claim when the upgrade restarted it; else the one it last reported, so
// that a pod recreated in the middle of an upgrade does not skip the upgrade's health gates;
// else the spec's.
func versionToRun(c *etcdv1alpha1.EtcdCluster, obs *observation, name string) string {
	if pvc, ok := obs.pvcs[name]; ok && pvc.Annotations[resources.AnnotationEtcdVersion] != "" {
		return pvc.Annotations[resources.AnnotationEtcdVersion]
	}
	for _, m := range c.Status.Members {
		if m.Name == name && m.Version != "" {
			return m.Version
		}
	}
	return c.Spec.Version
}

// startMember creates the claim and pod of a member etcd lists but that never started.
func (r *EtcdClusterReconciler) startMember(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, name string) error {
	spec := resources.MemberSpec{Name: name, Version: c.Spec.Version, State: "existing", Voter: obs.votes(c, name)}
	if pvc, ok := obs.pvcs[name]; ok && pvc.Annotations[resources.AnnotationClusterState] == "new" {
		// A bootstrap member whose pod was never made joins with the original plan.
		spec.InitialCluster, spec.State = pvc.Annotations[resources.AnnotationInitialCluster], "new"
		restore, err := r.memberRestoreOn(obs, name)
		if err != nil {
			return err
		}
		spec.Restore = restore
	} else {
		spec.InitialCluster = joiningInitialCluster(c, obs, name)
	}
	_, hasPVC := obs.pvcs[name]
	return r.createMember(ctx, c, spec, !hasPVC)
}

// addLearner adds a member to etcd as a learner before its pod exists — a learner does not
// count towards quorum, so a slow or failing start costs nothing — then creates it.
func (r *EtcdClusterReconciler) addLearner(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) error {
	name := resources.NewMemberName(c.Name)
	if _, err := obs.client.AddLearner(ctx, resources.PeerURL(c, name)); err != nil {
		return err
	}
	spec := resources.MemberSpec{Name: name, Version: c.Spec.Version, State: "existing", InitialCluster: joiningInitialCluster(c, obs, name)}
	return r.createMember(ctx, c, spec, true)
}

// joiningInitialCluster lists the started members and the joining one, as etcd requires of
// a member that joins an existing cluster.
func joiningInitialCluster(c *etcdv1alpha1.EtcdCluster, obs *observation, joining string) string {
	names := []string{joining}
	for _, m := range obs.members {
		if m.Started() && m.Name != joining {
			names = append(names, m.Name)
		}
	}
	return resources.InitialCluster(c, names)
}

// removeMember removes the member from etcd first, then deletes its pod: a pod deleted first
// would be a member down, costing quorum margin until it is removed.
func (r *EtcdClusterReconciler) removeMember(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step) error {
	if err := obs.client.RemoveMember(ctx, step.MemberID); err != nil {
		return err
	}
	return r.deleteOrphans(ctx, c, obs, step, []string{step.Member})
}

// stopMembers takes members' pods down (takeDown: evicted or deleted) and leaves their claims:
// the data stays, for the pod made again (a roll-out) or until the restored cluster serves.
func (r *EtcdClusterReconciler) stopMembers(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step, names []string) error {
	for _, name := range names {
		if pod, ok := obs.pods[name]; ok && pod.DeletionTimestamp.IsZero() {
			if err := r.takeDown(ctx, c, obs, step, pod); err != nil {
				return fmt.Errorf("stop member %s: %w", name, err)
			}
			// gofail: var memberPodStopped struct{}
		}
	}
	return nil
}

// deleteOrphans deletes the pods of members no longer in etcd, and their claims as the
// retention policy says (or kept, for members a quorum recovery did without); a retained claim
// is unlabelled so it no longer counts as a member.
// Each delete is conditional on the UID observed: it removes the object the decision was made
// about, never a newer one of the same name that the cache does not show yet.
func (r *EtcdClusterReconciler) deleteOrphans(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step, names []string) error {
	for _, name := range names {
		if pod, ok := obs.pods[name]; ok && pod.DeletionTimestamp.IsZero() {
			if err := r.takeDown(ctx, c, obs, step, pod); err != nil {
				return err
			}
			// gofail: var orphanPodDeleted struct{}
		}
		pvc, ok := obs.pvcs[name]
		if !ok {
			continue
		}
		if claimOutlivesMember(c, name, pvc) {
			patch := client.MergeFrom(pvc.DeepCopy())
			delete(pvc.Labels, resources.LabelCluster)
			pvc.Labels["etcd.database.dev/retained-from"] = c.Name
			if err := r.Patch(ctx, pvc, patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("release claim %s: %w", pvc.Name, err)
			}
			continue
		}
		if err := r.deleteObservedClaim(ctx, pvc); err != nil {
			return err
		}
		// gofail: var orphanClaimDeleted struct{}
	}
	return nil
}

// claimOutlivesMember: the claim of a member no longer in etcd is kept, released from the
// cluster, rather than deleted: the retention policy says so, a quorum recovery did without the
// member (its data may be the newest), or the member was found corrupt (its data is the
// evidence). Corruption is read from the claim's own mark (markCorruptClaims), written before any
// step acts on the evidence: not from status, which a reconcile can read older than the write
// that recorded it.
func claimOutlivesMember(c *etcdv1alpha1.EtcdCluster, name string, pvc *corev1.PersistentVolumeClaim) bool {
	switch {
	case c.Spec.Storage.RetentionPolicy.WhenScaled == etcdv1alpha1.RetainPVC:
		return true
	case keptFromRecovery(c, name):
		return true
	case pvc.Annotations[resources.AnnotationCorruptEvidence] != "":
		return true
	}
	return false
}

// deleteObservedClaim deletes the claim as observed: not a newer one of the same name, nor one
// changed since (then the next observation decides again).
func (r *EtcdClusterReconciler) deleteObservedClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	err := r.Delete(ctx, pvc, client.Preconditions{UID: &pvc.UID, ResourceVersion: &pvc.ResourceVersion})
	if ignoreGone(err) != nil {
		return fmt.Errorf("delete claim %s: %w", pvc.Name, err)
	}
	return nil
}

// ignoreGone ignores a delete whose object is gone, or is no longer the one observed (its
// precondition failed): either way the next observation decides again.
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// resetBootstrapMembers deletes the pods and claims of members of a cluster that never formed
// and whose claims were never bound: they hold no data. The bootstrap makes them again, with
// the same names, once they are gone (confirmNeverFormed waits for that).
func (r *EtcdClusterReconciler) resetBootstrapMembers(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step) error {
	if err := r.stopMembers(ctx, c, obs, step, step.Members); err != nil {
		return err
	}
	for _, name := range step.Members {
		pvc, ok := obs.pvcs[name]
		if !ok || pvc.Status.Phase != corev1.ClaimPending {
			continue
		}
		if err := r.deleteObservedClaim(ctx, pvc); err != nil {
			return err
		}
	}
	return nil
}

// recordPodSpec records the current spec's hash, and the trusted CAs' (tls.provider Secrets),
// on pods that have none: nothing restarts.
func (r *EtcdClusterReconciler) recordPodSpec(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, names []string) error {
	hash, trusted := resources.MemberPodSpecHash(c), obs.trustedCAHash()
	return patchEach(ctx, r.Client, obs.pods, names, "record the spec of pod", func(pod *corev1.Pod) {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		if _, ok := pod.Annotations[resources.AnnotationPodSpecHash]; !ok {
			pod.Annotations[resources.AnnotationPodSpecHash] = hash
		}
		if _, ok := pod.Annotations[resources.AnnotationTrustedCAHash]; !ok && trusted != "" {
			pod.Annotations[resources.AnnotationTrustedCAHash] = trusted
		}
	})
}

// expandClaims raises the members' claims to spec.storage.size. The API server refuses it where
// the StorageClass does not allow expansion; the step's error then says so.
func (r *EtcdClusterReconciler) expandClaims(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, names []string) error {
	size := resources.MemberStorageSize(c)
	return patchEach(ctx, r.Client, obs.pvcs, names, "expand claim", func(pvc *corev1.PersistentVolumeClaim) {
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = size
	})
}

// patchEach merge-patches, with change, the observed object of each named member that has one.
func patchEach[T client.Object](ctx context.Context, cl client.Client, observed map[string]T, names []string, what string, change func(T)) error {
	for _, name := range names {
		obj, ok := observed[name]
		if !ok {
			continue
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		change(obj)
		if err := cl.Patch(ctx, obj, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("%s %s: %w", what, obj.GetName(), err)
		}
	}
	return nil
}

// upgradeMember restarts a member on the desired version. A serving member's pod is evicted
// (disruptionOf), so that the budget counts the restart with any drain's, and is made again on
// its claim by restartMembers, on the version recorded there; with ephemeral storage its data
// goes with the pod, and the member is replaced the usual way, on the desired version. Any
// other member (of a cluster that never formed, or of one or two voters) gets the new image in
// place: the kubelet restarts the container in the same pod, on the same volume.
func (r *EtcdClusterReconciler) upgradeMember(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step) error {
	name := step.Member
	pod, ok := obs.pods[name]
	if !ok {
		return fmt.Errorf("member %s has no pod to upgrade", name)
	}
	var err error
	if disrupts, _ := disruptionOf(c, obs, step, name); disrupts {
		err = r.evictToUpgrade(ctx, c, obs, pod)
	} else {
		err = r.upgradeInPlace(ctx, c, obs, pod)
	}
	if err != nil {
		return err
	}
	// gofail: var memberUpgraded struct{}
	return nil
}

func (r *EtcdClusterReconciler) evictToUpgrade(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, pod *corev1.Pod) error {
	if pod.DeletionTimestamp.IsZero() {
		if err := r.evict(ctx, pod); err != nil {
			return err
		}
	}
	// After the eviction, never before: recorded while the pod still runs (the budget holding the
	// step), a pod made again for another cause would start on the new version without the
	// upgrade's gates. An operator stopped in between makes the pod again on the version it ran,
	// and the upgrade evicts it again.
	return r.recordVersionToRun(ctx, obs, pod.Name, c.Spec.Version)
}

func (r *EtcdClusterReconciler) upgradeInPlace(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, pod *corev1.Pod) error {
	// Here the record goes first: it must never name an older version than the pod runs, or a
	// pod made again would take the member back to it.
	if err := r.recordVersionToRun(ctx, obs, pod.Name, c.Spec.Version); err != nil {
		return err
	}
	patch := client.StrategicMergeFrom(pod.DeepCopy())
	pod.Spec.Containers[0].Image = resources.Image(c, r.DefaultImages, c.Spec.Version)
	// In the same patch: the image of a version pinned by digest does not say which it is.
	metav1.SetMetaDataAnnotation(&pod.ObjectMeta, resources.AnnotationEtcdVersion, c.Spec.Version)
	return r.Patch(ctx, pod, patch)
}

// recordVersionToRun records on member's claim, if it has one, the version its next pod runs
// (versionToRun).
func (r *EtcdClusterReconciler) recordVersionToRun(ctx context.Context, obs *observation, member, version string) error {
	pvc, ok := obs.pvcs[member]
	if !ok || pvc.Annotations[resources.AnnotationEtcdVersion] == version {
		return nil
	}
	patch := client.MergeFrom(pvc.DeepCopy())
	metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, resources.AnnotationEtcdVersion, version)
	if err := r.Patch(ctx, pvc, patch); err != nil {
		return fmt.Errorf("record version %s on claim %s: %w", version, pvc.Name, err)
	}
	return nil
}

// createMember creates the member's claim (when withPVC and storage is not ephemeral) and pod.
func (r *EtcdClusterReconciler) createMember(ctx context.Context, c *etcdv1alpha1.EtcdCluster, spec resources.MemberSpec, withPVC bool) error {
	// Read before the pod is made, so that a change of the Secrets in between shows as the
	// pod's record being older than them (a restart too many), never newer (one too few).
	trusted, err := r.userTrustedCAHash(ctx, c)
	if err != nil {
		return err
	}
	spec.TrustedCAHash = trusted
	if withPVC && !c.Spec.Storage.Ephemeral {
		pvc := resources.MemberPVC(c, spec)
		if err := r.Create(ctx, pvc); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("create claim %s: %w", pvc.Name, err)
		}
		// gofail: var memberClaimCreated struct{}
	}
	if err := r.createOwned(ctx, c, resources.MemberPod(c, spec, r.DefaultImages, r.Pods)); err != nil {
		return err
	}
	// gofail: var memberPodCreated struct{}
	return nil
}
