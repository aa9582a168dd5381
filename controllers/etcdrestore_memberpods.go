package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A restore into a new cluster restores its members in their own pods when it can: each
// member's claim carries the restore (resources.AnnotationMemberRestore), and every pod made
// for it restores the data in its init containers before etcd starts, then does nothing once
// the data is there. The cluster is let form at once, and its members start as soon as their
// data is in place: no Job's pod to start, end and be reported first. The restore reads what
// each member restored from its pod's fetch container, records it, and completes as any other
// once the cluster serves the same store on every member.

// memberPodsRestore is the restore the members' pods run, or nil when Jobs prepare the members.
// A restore goes on the way it began: the plan on the seed's claim, once made, is every
// member's; a restore whose first Job exists goes on with Jobs.
// seed is the seed member's claim, read live (seedClaim), nil if not made yet.
func (r *EtcdRestoreReconciler) memberPodsRestore(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, seed *corev1.PersistentVolumeClaim, members []string, src snapshotSource) (*resources.MemberRestore, error) {
	if seed != nil {
		if planned, err := resources.MemberRestoreOf(seed); err != nil || planned != nil {
			return planned, err
		}
	}
	// From the cache of the Jobs the restore owns and watches.
	err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: resources.RestoreJobName(rs.Name, 0)}, &batchv1.Job{})
	if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	if err == nil || seed != nil || !restorableInMemberPods(src) {
		return nil, nil
	}
	if r.AgentImage == "" {
		return nil, failed(etcdv1alpha1.ReasonAgentImageUnknown, "the operator was started without RELATED_IMAGE_OPERATOR, the image that restores the members' data")
	}
	bump, err := r.revisionBump(ctx, rs, c, src)
	if err != nil {
		return nil, err
	}
	src.RevisionBump = bump
	return &resources.MemberRestore{Restore: rs.Name, AgentImage: r.AgentImage, Members: members, Source: src.RestoreSource}, nil
}

// restorableInMemberPods says whether members may restore src in their own pods. They start as
// soon as their own data is in place, before the others have theirs, so each must be sure to
// restore the same bytes or none: one snapshot, named by its sha256, with no fallback to
// another should it be gone. And their pods must be able to read it: from S3 with a Secret's
// credentials. A ServiceAccount's cloud identity would make the member's pod run as that
// account; a claim, mounted by every member, would pin them all to one node.
func restorableInMemberPods(src snapshotSource) bool {
	s3 := src.Storage.S3
	return s3 != nil && s3.ServiceAccountName == "" && src.SHA256 != "" && len(src.Fallbacks) == 0
}

// seedClaim is the claim of the restore's seed member, read live (a claim made in the last
// reconcile may not be in the cache yet); nil if there is none.
func (r *EtcdRestoreReconciler) seedClaim(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster) (*corev1.PersistentVolumeClaim, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(stagedClaim(c, resources.SeedMemberName(c.Name, string(rs.UID)))), pvc)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pvc, err
}

// memberRestoreRetry is how soon a restore whose members restore in their own pods looks at
// them again, should no change of their pods (labelled with the restore) wake it first.
const memberRestoreRetry = 2 * time.Second

// recordMemberRestores records what the members restored in their own pods, once every one
// has reported the same snapshot, and returns true once that record was there when the
// reconcile began; or how soon to look again. A member whose fetch failed for good fails the
// restore. The cluster is deleted only if no member installed the data: until then no etcd
// ran, and it never held data.
func (r *EtcdRestoreReconciler) recordMemberRestores(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster) (bool, ctrl.Result, error) {
	if rs.Status.RestoredRevision != nil {
		return true, ctrl.Result{}, nil
	}
	seed, err := r.seedClaim(ctx, rs, c)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	var plan *resources.MemberRestore
	if seed != nil {
		if plan, err = resources.MemberRestoreOf(seed); err != nil {
			return false, ctrl.Result{}, err
		}
	}
	if plan == nil {
		return false, ctrl.Result{}, failed(etcdv1alpha1.ReasonFailed, "the restore recorded no revision and its seed member's claim names no restore: create the restore again")
	}
	var (
		reports              []*agent.RestoreResult
		waiting, retrying    []string
		permanent, installed []string
	)
	for _, member := range plan.Members {
		pod := &corev1.Pod{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: member}, pod); client.IgnoreNotFound(err) != nil {
			return false, ctrl.Result{}, err
		}
		outcome := memberRestoreOutcomeOf(pod)
		if outcome.installed {
			installed = append(installed, member)
		}
		switch {
		case outcome.report != nil:
			reports = append(reports, outcome.report)
		case outcome.permanent != "":
			permanent = append(permanent, member+": "+outcome.permanent)
		case outcome.retrying != "":
			retrying = append(retrying, member+": "+outcome.retrying)
			waiting = append(waiting, member)
		default:
			waiting = append(waiting, member)
		}
	}
	if len(permanent) > 0 {
		why := strings.Join(permanent, "; ")
		// Deleting the cluster is safe only if no member's etcd ever ran: none's pod says its
		// data was installed, and nothing answers at any member's addresses, asked live.
		installed = append(installed, r.membersAnswering(ctx, c, plan.Members)...)
		if len(installed) == 0 {
			if err := r.discardTarget(ctx, c); err != nil {
				return false, ctrl.Result{}, err
			}
			return false, ctrl.Result{}, failed(etcdv1alpha1.ReasonFailed, "%s; EtcdCluster %s, which never held data, was deleted", why, c.Name)
		}
		return false, ctrl.Result{}, failed(etcdv1alpha1.ReasonFailed,
			"%s; members %s had installed the data and may have served, so EtcdCluster %s was left as it is: delete it and create the restore again",
			why, strings.Join(installed, ", "), c.Name)
	}
	if len(waiting) > 0 {
		progress := fmt.Sprintf("members %s restore %s in their own pods: %d of %d done", strings.Join(waiting, ", "), rs.Status.SnapshotURI, len(reports), len(plan.Members))
		if len(retrying) > 0 {
			progress += "; retrying after " + strings.Join(retrying, "; ")
		}
		// The data is the cluster's from the start: a member that never gets it (its pod never
		// starts) is waited for as a cluster that does not serve, and said so after as long.
		result := r.awaitServing(rs, c, progress)
		if result.RequeueAfter > memberRestoreRetry {
			result.RequeueAfter = memberRestoreRetry
		}
		return false, result, nil
	}
	first := reports[0]
	for i, got := range reports[1:] {
		if *got != *first {
			return false, ctrl.Result{}, failed(etcdv1alpha1.ReasonFailed,
				"member %s restored %s (revision %d) but member %s restored %s (revision %d); EtcdCluster %s was left as it is: delete it and create the restore again",
				plan.Members[0], first.URI, first.Revision, plan.Members[i+1], got.URI, got.Revision, c.Name)
		}
	}
	rs.Status.RestoredRevision, rs.Status.SnapshotSHA256, rs.Status.SnapshotURI = ptr.To(first.Revision), first.SHA256, first.URI
	rs.Status.RevisionBump = plan.Source.RevisionBump
	postEvent(r.Recorder, rs, corev1.EventTypeNormal, "MemberRestored", "Restore", "members %s of EtcdCluster %s restored from %s (revision %d, sha256 %s)",
		strings.Join(plan.Members, ", "), c.Name, first.URI, first.Revision, first.SHA256)
	// Completed only from a record in status: the reconcile that completes reads it back.
	return false, ctrl.Result{RequeueAfter: time.Second}, nil
}

// membersAnswering are those of members at whose addresses something answers, asked live: the
// pods' statuses, read from the cache, may not yet say that a member installed its data and
// started etcd, and a cluster one of whose members serves is never deleted as one that never
// held data. While a pod runs its init containers nothing listens at its etcd's ports.
func (r *EtcdRestoreReconciler) membersAnswering(ctx context.Context, c *etcdv1alpha1.EtcdCluster, members []string) []string {
	pods := map[string]*corev1.Pod{}
	for _, member := range members {
		pod := &corev1.Pod{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: member}, pod); err != nil {
			pod = nil
		}
		pods[member] = pod
	}
	answered := probeMembers(ctx, r.ProbeAddresses, c, pods)
	var answering []string
	for _, member := range members {
		if at, ok := answered[member]; ok {
			answering = append(answering, member+" (answers at "+at+")")
		}
	}
	return answering
}

// memberRestoreOutcome is what a member's pod says of its restore.
type memberRestoreOutcome struct {
	// report is what its fetch restored, once its install has also succeeded.
	report *agent.RestoreResult
	// installed: the data is in place, and etcd may have run on it.
	installed bool
	// permanent or retrying say why the restore failed, for good or for now.
	permanent, retrying string
}

// memberRestoreOutcomeOf reads a member pod's restore containers: the last run of each, which
// the kubelet keeps in the pod's status (a failed one, restarted, as its last termination).
func memberRestoreOutcomeOf(pod *corev1.Pod) memberRestoreOutcome {
	var out memberRestoreOutcome
	var fetched *agent.RestoreResult
	for _, st := range pod.Status.InitContainerStatuses {
		t := st.State.Terminated
		if t == nil {
			t = st.LastTerminationState.Terminated
		}
		if t == nil {
			continue
		}
		report, err := agent.DecodeReport(t.Message)
		switch {
		case t.ExitCode == 0 && st.Name == resources.MemberRestoreFetchContainer && err == nil:
			fetched = report.Restore
		case t.ExitCode == 0 && st.Name == resources.MemberRestoreInstallContainer:
			out.installed = true
		case t.ExitCode == 0:
		case err == nil && report.Error != "" && (report.Permanent || t.ExitCode == jobspec.ExitPermanent):
			out.permanent = st.Name + ": " + report.Error
		case err == nil && report.Error != "":
			out.retrying = st.Name + ": " + report.Error
		default:
			out.retrying = fmt.Sprintf("%s exited %d", st.Name, t.ExitCode)
		}
	}
	for _, st := range pod.Status.ContainerStatuses {
		if st.State.Running != nil || st.State.Terminated != nil || st.LastTerminationState.Terminated != nil {
			out.installed = true // etcd has started: its init containers all succeeded
		}
	}
	if out.installed {
		out.report = fetched
	}
	return out
}

// clearMemberRestores takes a completed restore off its members' claims: their pods, made
// again, need restore nothing. Read from the cache first, as cleanUp runs on every look at a
// finished restore.
func (r *EtcdRestoreReconciler) clearMemberRestores(ctx context.Context, rs *etcdv1alpha1.EtcdRestore) error {
	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.List(ctx, claims, client.InNamespace(rs.Namespace), client.MatchingLabels{resources.LabelCluster: rs.Spec.Target.ClusterName}); err != nil {
		return err
	}
	for i := range claims.Items {
		pvc := &claims.Items[i]
		restore, err := resources.MemberRestoreOf(pvc)
		if err != nil || restore == nil || restore.Restore != rs.Name {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		delete(pvc.Annotations, resources.AnnotationMemberRestore)
		if err := r.Patch(ctx, pvc, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("take the restore off claim %s: %w", pvc.Name, err)
		}
	}
	return nil
}
