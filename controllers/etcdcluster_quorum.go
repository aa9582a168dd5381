package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Recovery from a quorum lost for good, in the reconciler's four phases. The decision is
// membership.recoverQuorum and continueRecovery; status.quorumRecovery is the record that
// carries a recovery through operator restarts: which member it builds on (or which backup,
// when no member's data survived), where the copy of that member's data is, and how far it
// has gone.

// defaultRecoveryAfter is spec.quorumLossRecovery.after when unset (the API's default).
const defaultRecoveryAfter = 10 * time.Minute

// quorumRecoveryObservation is what a reconcile learns for a recovery: each running member's
// raft index while etcd has no quorum, and the Job copying the survivor's data.
type quorumRecoveryObservation struct {
	// ownStatuses by member name, from members asked one by one: without a quorum etcd
	// answers no member list, but each member still reports its own status (its raft index,
	// and the leader it follows, if any).
	ownStatuses map[string]etcd.MemberStatus
	// answered by member name: where a probe of a last voter that reported no raft index
	// found something listening (see etcd.FirstAnswer).
	answered map[string]string
	// logReads by member name: the read-log Jobs of the last voters that did not report one.
	logReads map[string]logRead
	// preserveJob copies the data of the member the recovery builds on, if it exists;
	// preserved is its result once it succeeded, preserveFailed why it failed.
	preserveJob    *batchv1.Job
	preserved      *agent.PreservedData
	preserveFailed string
	// latestBackup is the EtcdBackup of the cluster with the newest completed snapshot that
	// did not fail verification (newestRestorable), looked up under policy FromLatestBackup
	// only; nil if there is none.
	latestBackup *etcdv1alpha1.EtcdBackup
	// restore is the EtcdRestore a recovery from a backup under way is carried out by, if it
	// exists.
	restore *etcdv1alpha1.EtcdRestore
}

// logRead is what the read-log Job of one member says of its log.
type logRead struct {
	job *batchv1.Job
	// stale: made for an earlier quorum loss, or its report is gone with its pod; deleted, to
	// be made again.
	stale bool
	// log is the result; failed, why there is none, once the Job has failed.
	log    *agent.LogState
	failed string
}

// underwayRecovery is the recovery begun and not completed, or nil.
func underwayRecovery(c *etcdv1alpha1.EtcdCluster) *etcdv1alpha1.QuorumRecoveryStatus {
	if qr := c.Status.QuorumRecovery; qr != nil && qr.CompletionTime == nil {
		return qr
	}
	return nil
}

// observeQuorumRecovery fills obs.recovery. It asks members one by one only when etcd does not
// answer a member list of a cluster that has formed: that is when a recovery may be needed.
func (r *EtcdClusterReconciler) observeQuorumRecovery(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) error {
	formedAndLost := !obs.reachable && c.Status.ClusterID != ""
	if formedAndLost {
		r.askMembersWithoutQuorum(ctx, c, obs)
	}
	if formedAndLost {
		obs.recovery.answered = r.probeSilentVoters(ctx, c, obs)
	}
	if formedAndLost && underwayRecovery(c) == nil {
		if err := r.observeLogReads(ctx, c, obs); err != nil {
			return err
		}
	}
	if formedAndLost && c.Spec.QuorumLossRecovery.Policy == etcdv1alpha1.QuorumLossRecoveryFromLatestBackup && underwayRecovery(c) == nil {
		latest, err := r.latestBackup(ctx, c)
		if err != nil {
			return err
		}
		obs.recovery.latestBackup = latest
	}
	qr := underwayRecovery(c)
	if qr != nil && qr.Backup != nil {
		rs := &etcdv1alpha1.EtcdRestore{}
		err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: qr.Backup.EtcdRestore}, rs)
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("get EtcdRestore %s: %w", qr.Backup.EtcdRestore, err)
		}
		if err == nil {
			obs.recovery.restore = rs
		}
		return nil
	}
	if qr == nil || qr.PreservedData != nil {
		return nil
	}
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.PreserveDataJobName(qr.Member)}, job)
	if apierrors.IsNotFound(err) {
		return nil // not made yet
	}
	if err != nil {
		return fmt.Errorf("get the Job copying member %s's data: %w", qr.Member, err)
	}
	obs.recovery.preserveJob = job
	succeeded, finished := jobOutcome(job)
	if !finished {
		return nil
	}
	report, ok, err := agentReport(ctx, r.Client, job, resources.PreserveDataContainer)
	switch {
	case err != nil:
		return fmt.Errorf("read the report of Job %s: %w", job.Name, err)
	case succeeded && ok && report.Preserved != nil:
		obs.recovery.preserved = report.Preserved
	case succeeded:
		obs.recovery.preserveFailed = "Job " + job.Name + " succeeded but left no report of the copy"
	case ok && report.Error != "":
		obs.recovery.preserveFailed = "Job " + job.Name + " failed: " + report.Error
	default:
		obs.recovery.preserveFailed = "Job " + job.Name + " failed; `kubectl logs job/" + job.Name + "` says why"
	}
	return nil
}

// observeLogReads reads what the read-log Jobs found of the logs of the last voters that did
// not report a raft index themselves.
func (r *EtcdClusterReconciler) observeLogReads(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) error {
	lostAt, lost := quorumLostSince(c)
	obs.recovery.logReads = map[string]logRead{}
	for _, name := range lastVoters(c) {
		if _, answered := obs.recovery.ownStatuses[name]; answered {
			continue
		}
		job := &batchv1.Job{}
		err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.ReadLogJobName(name)}, job)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("get the Job reading member %s's log: %w", name, err)
		}
		read := logRead{job: job}
		if !lost || job.Annotations[resources.AnnotationQuorumLostAt] != lostAt.UTC().Format(time.RFC3339) {
			read.stale = true
			obs.recovery.logReads[name] = read
			continue
		}
		succeeded, finished := jobOutcome(job)
		if finished {
			report, ok, err := agentReport(ctx, r.Client, job, resources.ReadLogContainer)
			switch {
			case err != nil:
				return fmt.Errorf("read the report of Job %s: %w", job.Name, err)
			case succeeded && ok && report.Log != nil:
				read.log = report.Log
			case succeeded:
				read.stale = true // the pod, and its report with it, is gone: read again
			case ok && report.Error != "":
				read.failed = report.Error + " (Job " + job.Name + "; delete it to read again)"
			default:
				read.failed = "Job " + job.Name + " failed; `kubectl logs job/" + job.Name + "` says why"
			}
		}
		obs.recovery.logReads[name] = read
	}
	return nil
}

// quorumLostSince is when the operator first found the cluster's quorum lost, once status
// records it: not when Available last turned false, which it does for other reasons too.
func quorumLostSince(c *etcdv1alpha1.EtcdCluster) (time.Time, bool) {
	if c.Status.QuorumLostTime == nil {
		return time.Time{}, false
	}
	return c.Status.QuorumLostTime.Time, true
}

// probeSilentVoters probes, at every address it is known by, each last voter that reported no
// raft index: a member counted lost must not be running anywhere the operator can reach.
func (r *EtcdClusterReconciler) probeSilentVoters(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) map[string]string {
	silent := map[string]*corev1.Pod{}
	for _, name := range lastVoters(c) {
		if _, answered := obs.recovery.ownStatuses[name]; !answered {
			silent[name] = obs.pods[name]
		}
	}
	return probeMembers(ctx, r.ProbeAddresses, c, silent)
}

// probeMembers probes each member of members (by name, with its pod or nil) at every address it
// is known by, all at once, each probe bounded (etcd.FirstAnswer, or probe when set, as tests
// set it). It returns, by member, where something answered.
func probeMembers(ctx context.Context, probe func(context.Context, []string) string, c *etcdv1alpha1.EtcdCluster, members map[string]*corev1.Pod) map[string]string {
	if probe == nil {
		probe = etcd.FirstAnswer
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]string{}
	for name, pod := range members {
		wg.Go(func() {
			if at := probe(ctx, memberAddresses(c, name, pod)); at != "" {
				mu.Lock()
				out[name] = at
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// memberAddresses are the host:port addresses a member may serve at: its client and peer
// ports at its DNS name, and at its pod's IP while the pod exists (a pod on a node that
// stopped answering keeps its IP, and may keep serving on it).
func memberAddresses(c *etcdv1alpha1.EtcdCluster, name string, pod *corev1.Pod) []string {
	var out []string
	for _, port := range []int{resources.ClientPort, resources.PeerPort} {
		out = append(out, resources.MemberHostPort(c, name, port))
		if pod != nil && pod.Status.PodIP != "" {
			out = append(out, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)))
		}
	}
	return out
}

// readLogs makes a read-log Job for each of members that has none for this quorum loss: each
// reads, from the member's claim, how far its log reaches. One made for an earlier loss, or
// whose report is gone, is deleted first. Nothing is stopped: the Jobs only read.
func (r *EtcdClusterReconciler) readLogs(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, members []string) error {
	lostAt, lost := quorumLostSince(c)
	if !lost {
		return nil // this reconcile's report records the loss; the Jobs are made for it next time
	}
	var errs []error
	for _, name := range members {
		read, exists := obs.recovery.logReads[name]
		switch {
		case exists && read.stale:
			err := r.Delete(ctx, read.job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &read.job.UID})
			if ignoreGone(err) != nil {
				errs = append(errs, fmt.Errorf("delete Job %s: %w", read.job.Name, err))
			}
			continue
		case exists:
			if _, finished := jobOutcome(read.job); finished {
				continue
			}
			notStarting, _, err := jobNotStarting(ctx, r.Client, read.job, r.now())
			if err != nil {
				errs = append(errs, err)
			} else if notStarting != "" {
				errs = append(errs, fmt.Errorf("the Job reading member %s's log cannot start: %s", name, notStarting))
			}
			continue
		}
		node := ""
		if pod, ok := obs.pods[name]; ok {
			node = pod.Spec.NodeName
		}
		job, err := resources.ReadLogJob(c, name, node, lostAt, r.AgentImage, r.Pods)
		if err == nil {
			err = r.createOwned(ctx, c, job)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// latestBackup is the EtcdBackup of the cluster whose newest snapshot of it that did not fail
// verification is the newest, or nil if none has one: a snapshot that failed is never
// restored, nor one of an earlier cluster of the same name.
func (r *EtcdClusterReconciler) latestBackup(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*etcdv1alpha1.EtcdBackup, error) {
	backups := &etcdv1alpha1.EtcdBackupList{}
	if err := r.List(ctx, backups, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("list EtcdBackups: %w", err)
	}
	var latest *etcdv1alpha1.EtcdBackup
	for i := range backups.Items {
		b := &backups.Items[i]
		newest := newestRestorable(b, c.UID)
		if b.Spec.ClusterName != c.Name || newest == nil {
			continue
		}
		if latest == nil || newest.StartTime.After(newestRestorable(latest, c.UID).StartTime.Time) {
			latest = b
		}
	}
	return latest, nil
}

// askMembersWithoutQuorum fills obs.recovery.ownStatuses: each running member's own status,
// through the cluster's client, or, when no client could log in (with authentication on, a
// password login needs a quorum), through one that presents the operator's client
// certificate, which a TLS member takes for root's without a login.
func (r *EtcdClusterReconciler) askMembersWithoutQuorum(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation) {
	if obs.client != nil {
		obs.recovery.ownStatuses = statusesWithoutQuorum(ctx, c, obs, obs.client)
		return
	}
	cfg, ok := obs.access.certificateConfig(knownClientURLs(c, obs))
	if !ok || len(cfg.Endpoints) == 0 {
		return
	}
	cl, err := r.Etcd.Dial(cfg)
	if err != nil {
		return
	}
	defer func() { _ = cl.Close() }()
	obs.recovery.ownStatuses = statusesWithoutQuorum(ctx, c, obs, cl)
}

// statusesWithoutQuorum asks each member whose pod runs for its own status, all at once.
func statusesWithoutQuorum(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, cl etcd.Client) map[string]etcd.MemberStatus {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]etcd.MemberStatus{}
	for name, pod := range obs.pods {
		if pod.Status.PodIP == "" || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		wg.Go(func() {
			st, err := cl.Status(ctx, resources.ClientURL(c, name))
			if err != nil {
				return
			}
			mu.Lock()
			out[name] = st
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// recoveryPolicy is what the decision may do once quorum is lost for good, and how far the
// recovery under way has gone.
func recoveryPolicy(c *etcdv1alpha1.EtcdCluster, seen *quorumRecoveryObservation, now time.Time) membership.RecoveryPolicy {
	spec := c.Spec.QuorumLossRecovery
	p := membership.RecoveryPolicy{
		Automatic:  spec.Policy == etcdv1alpha1.QuorumLossRecoveryForceNewCluster || spec.Policy == etcdv1alpha1.QuorumLossRecoveryFromLatestBackup,
		FromBackup: spec.Policy == etcdv1alpha1.QuorumLossRecoveryFromLatestBackup,
		From:       c.Annotations[etcdv1alpha1.AnnotationRecoverFrom],
		After:      defaultRecoveryAfter,
		LostSince:  now, // not yet recorded: found lost now
	}
	if seen.latestBackup != nil {
		p.LatestBackup = seen.latestBackup.Name
	}
	if spec.After != nil {
		p.After = spec.After.Duration
	}
	if lostSince, lost := quorumLostSince(c); lost {
		p.LostSince = lostSince
	}
	if qr := c.Status.QuorumRecovery; qr != nil && forsaken(qr, qr.Member) {
		p.Forsaken = qr.Member
	}
	if qr := underwayRecovery(c); qr != nil {
		p.Underway = qr.Member
		p.DoneWithout = qr.LostMembers
		// From status only: the copy is on record before its member is rewritten (the Job,
		// deleted then, is not the record).
		p.Preserved = qr.PreservedData != nil
		p.Forced = qr.ForcedTime != nil
		p.UnderwayIndex, p.Named = uint64(max(qr.RaftIndex, 0)), strings.HasPrefix(qr.Trigger, "annotation ")
		p.Served = qr.ServedTime != nil
		if qr.Backup != nil {
			p.UnderwayRestore, p.RestoreExists = qr.Backup.EtcdRestore, seen.restore != nil
		}
	}
	return p
}

// lastVoters are the voting members status last listed: while etcd does not answer, what a
// lost quorum is counted against.
func lastVoters(c *etcdv1alpha1.EtcdCluster) []string {
	var out []string
	for _, m := range c.Status.Members {
		if !m.IsLearner {
			out = append(out, m.Name)
		}
	}
	return out
}

// lastMembers are all the members status last listed, learners included: while etcd does not
// answer, the only members whose pods may be made again.
func lastMembers(c *etcdv1alpha1.EtcdCluster) []string {
	out := make([]string, 0, len(c.Status.Members))
	for _, m := range c.Status.Members {
		out = append(out, m.Name)
	}
	return out
}

// preserveData stops the member a recovery builds on and copies its data directory to the
// recovery claim, with a Job that mounts the member's claim read-only. It needs no quorum and
// no credentials: the copy is of files, WAL included. The recover-from annotation, the user's
// leave, is consumed here: the recovery it started is recorded in status by now, and a later
// quorum loss must not be recovered on an old leave.
func (r *EtcdClusterReconciler) preserveData(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step) error {
	member := step.Member
	if _, ok := c.Annotations[etcdv1alpha1.AnnotationRecoverFrom]; ok {
		patch := client.MergeFrom(c.DeepCopy())
		delete(c.Annotations, etcdv1alpha1.AnnotationRecoverFrom)
		if err := r.Patch(ctx, c, patch); err != nil {
			return fmt.Errorf("remove the %s annotation: %w", etcdv1alpha1.AnnotationRecoverFrom, err)
		}
	}
	if pod, ok := obs.pods[member]; ok {
		// Stopped, so that its files do not change while they are copied.
		if pod.DeletionTimestamp.IsZero() {
			if err := r.takeDown(ctx, c, obs, step, pod); err != nil {
				return fmt.Errorf("stop member %s: %w", member, err)
			}
			// gofail: var quorumSurvivorStopped struct{}
		}
		return nil
	}
	if obs.recovery.preserveFailed != "" {
		return fmt.Errorf("copying member %s's data failed, so nothing is rewritten: %s; delete the Job to try again", member, obs.recovery.preserveFailed)
	}
	if job := obs.recovery.preserveJob; job != nil {
		// Copying, or copied: report records it, and the next step builds on the record.
		if _, finished := jobOutcome(job); finished {
			return nil
		}
		notStarting, _, err := jobNotStarting(ctx, r.Client, job, r.now())
		if err != nil {
			return err
		}
		if notStarting != "" {
			return fmt.Errorf("the Job copying member %s's data cannot start, so nothing is rewritten: %s", member, notStarting)
		}
		return nil
	}
	if err := r.Create(ctx, resources.QuorumRecoveryClaim(c)); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("create claim %s: %w", resources.QuorumRecoveryClaimName(c.Name), err)
	}
	job, err := resources.PreserveDataJob(c, member, r.AgentImage, r.Pods)
	if err != nil {
		return err
	}
	if err := r.createOwned(ctx, c, job); err != nil {
		return err
	}
	// gofail: var quorumCopyJobCreated struct{}
	return nil
}

// forceNewCluster restarts the member a recovery builds on alone, from its data, with
// --force-new-cluster: etcd then drops every other member from its member list. Its pod is
// made again rather than changed, so that the flag is on one pod only, which is rolled once it
// serves (membership.Next).
func (r *EtcdClusterReconciler) forceNewCluster(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step) error {
	member := step.Member
	// The copy's pod mounted the member's claim: it must be gone before the member starts.
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: resources.PreserveDataJobName(member)}}
	if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Job %s: %w", job.Name, err)
	}
	if pod, ok := obs.pods[member]; ok {
		if pod.DeletionTimestamp.IsZero() {
			if err := r.takeDown(ctx, c, obs, step, pod); err != nil {
				return fmt.Errorf("stop member %s: %w", member, err)
			}
		}
		return nil
	}
	pvc, ok := obs.pvcs[member]
	if !ok {
		return fmt.Errorf("member %s has no claim: it cannot be restarted", member)
	}
	if err := r.createMember(ctx, c, resources.MemberSpec{
		Name:            member,
		Version:         versionToRun(c, obs, member),
		InitialCluster:  pvc.Annotations[resources.AnnotationInitialCluster],
		State:           pvc.Annotations[resources.AnnotationClusterState],
		ForceNewCluster: true,
		Voter:           true,
	}, false); err != nil {
		return err
	}
	// gofail: var quorumForcedPodCreated struct{}
	return nil
}

// abandonRecovery stops the forced pod of the recovery given up, if it has one: it never ran
// (it found no node), or a person declared its machine down. Made again on a node later, it
// would serve as a cluster of its own beside the recovery decided next. report closes the record.
func (r *EtcdClusterReconciler) abandonRecovery(ctx context.Context, obs *observation, step membership.Step) error {
	pod, ok := obs.pods[step.Member]
	if !ok || pod.Annotations[resources.AnnotationForceNewCluster] == "" || !pod.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); ignoreGone(err) != nil {
		return fmt.Errorf("stop the forced pod of member %s: %w", step.Member, err)
	}
	return nil
}

// restoreFromBackup creates the in-place EtcdRestore of the recovery under way, from the
// snapshot recorded when it began. The restore holds the cluster, stages the snapshot on a new
// member's claim, and cuts over; the cluster's own steps then grow it back to its size.
func (r *EtcdClusterReconciler) restoreFromBackup(ctx context.Context, c *etcdv1alpha1.EtcdCluster) error {
	qr := underwayRecovery(c)
	if qr == nil || qr.Backup == nil {
		return fmt.Errorf("no recovery from a backup is on record")
	}
	rs := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: qr.Backup.EtcdRestore, Namespace: c.Namespace,
			Labels: map[string]string{resources.LabelCluster: c.Name}},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: qr.Backup.EtcdBackup, URI: qr.Backup.SnapshotURI}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: c.Name},
		},
	}
	if err := r.createOwned(ctx, c, rs); err != nil {
		return err
	}
	// gofail: var quorumRestoreCreated struct{}
	return nil
}

// recordQuorumRecovery keeps status.quorumRecovery true to what this reconcile decided and saw.
// A recovery begins on a record of its own; it replaces the record of one that has served (its
// rewriting is over, and the quorum it made was lost again before the cluster grew back).
func recordQuorumRecovery(c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step, now time.Time) {
	qr := underwayRecovery(c)
	if step.Action == membership.BeginRecovery && (qr == nil || qr.ServedTime != nil) {
		c.Status.QuorumRecovery = beganRecovery(c, obs, step, now)
		return
	}
	if qr == nil {
		return
	}
	if why := abandoned(qr, obs, step); why != "" {
		qr.CompletionTime, qr.Abandoned = ptrTime(now), why
		if step.Unforced {
			qr.ForcedTime = nil // its forced pod never ran: its data was never rewritten
		}
		return
	}
	if p := obs.recovery.preserved; p != nil && qr.PreservedData == nil {
		qr.PreservedData = &etcdv1alpha1.PreservedDataStatus{
			ClaimName: resources.QuorumRecoveryClaimName(c.Name), Path: p.Path, SizeBytes: p.SizeBytes,
			DBSHA256: p.DBSHA256, RaftIndex: int64(p.RaftIndex), Revision: p.Revision, Time: metav1.NewTime(p.CompletionTime),
		}
	}
	if rs := obs.recovery.restore; qr.Backup != nil && rs != nil && rs.Status.MissingSnapshotURI == qr.Backup.SnapshotURI && rs.Status.SnapshotURI != "" {
		// The newest snapshot no longer existed: the record names the one restored instead.
		qr.Backup.SnapshotURI, qr.Backup.Revision = rs.Status.SnapshotURI, ptr.Deref(rs.Status.RestoredRevision, 0)
	}
	pod, forced := obs.pods[qr.Member]
	forced = forced && pod.Annotations[resources.AnnotationForceNewCluster] != ""
	if forced && qr.ForcedTime == nil {
		qr.ForcedTime = ptrTime(now)
	}
	if obs.reachable && qr.ServedTime == nil && (qr.Backup != nil || slices.ContainsFunc(obs.members, func(m etcd.Member) bool { return m.Name == qr.Member })) {
		qr.ServedTime = ptrTime(now)
	}
	if obs.reachable && qr.ServedTime != nil && !forced && int(c.Status.ReadyMembers) == int(c.Spec.Size) && obs.voters() == int(c.Spec.Size) &&
		recoveryRestoreFinished(qr, obs.recovery.restore) {
		qr.CompletionTime = ptrTime(now)
	}
}

// abandoned says why the recovery under way ended without being carried through, or "": the
// decision gave it up (its member's data is gone), or the cluster serves again without it,
// never having served from it (restored in place, its members named anew).
func abandoned(qr *etcdv1alpha1.QuorumRecoveryStatus, obs *observation, step membership.Step) string {
	switch {
	case step.Action == membership.AbandonRecovery:
		return step.Reason
	case obs.reachable && qr.ServedTime == nil && qr.Backup == nil && !slices.ContainsFunc(obs.members, func(m etcd.Member) bool { return m.Name == qr.Member }):
		return "the cluster serves again without member " + qr.Member + ", which the recovery was to build on"
	}
	return ""
}

// recoveryRestoreFinished: a recovery from a backup is carried out by its EtcdRestore, which
// completes only once every member holds the same restored data; until it has finished, the
// recovery has not either. One deleted by a person leaves nothing to wait for.
func recoveryRestoreFinished(qr *etcdv1alpha1.QuorumRecoveryStatus, rs *etcdv1alpha1.EtcdRestore) bool {
	return qr.Backup == nil || rs == nil || restoreFinished(rs)
}

// beganRecovery is the record of a recovery begun by step: from the member it names, or from
// the newest backup's snapshot, by an EtcdRestore named after the cluster and the time.
func beganRecovery(c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step, now time.Time) *etcdv1alpha1.QuorumRecoveryStatus {
	input := obs.decisionInput(c, now)
	qr := &etcdv1alpha1.QuorumRecoveryStatus{
		Member: step.Member, LostMembers: lostVoters(c, input, step.Member), StartTime: metav1.NewTime(now),
		Trigger: "spec.quorumLossRecovery.policy " + string(c.Spec.QuorumLossRecovery.Policy),
	}
	if step.Member != "" && c.Annotations[etcdv1alpha1.AnnotationRecoverFrom] == step.Member {
		qr.Trigger = "annotation " + etcdv1alpha1.AnnotationRecoverFrom + "=" + step.Member
	}
	for _, m := range input.Members {
		if m.Name == step.Member && step.Member != "" {
			qr.RaftIndex = int64(m.RaftIndex)
		}
	}
	if b := obs.recovery.latestBackup; step.Backup != "" && b != nil && b.Name == step.Backup {
		newest := newestRestorable(b, c.UID)
		qr.Backup = &etcdv1alpha1.RecoveryBackupStatus{
			EtcdBackup: b.Name, SnapshotURI: newest.URI, Revision: newest.Revision,
			EtcdRestore: resources.QuorumRecoveryRestoreName(c.Name, now),
		}
	}
	return qr
}

// lostVoters are the members a recovery from member does without (membership.DoneWithout),
// with the earlier recovery's whose claims are still the cluster's.
func lostVoters(c *etcdv1alpha1.EtcdCluster, input membership.Observed, member string) []string {
	var earlier []string
	if qr := c.Status.QuorumRecovery; qr != nil {
		earlier = qr.LostMembers
	}
	return membership.DoneWithout(input, member, earlier)
}

// fenceMembers deletes the pods of the members a recovery does without, before its survivor is
// forced: a member of the old membership must not run beside the forced one. A pod on a node
// that stopped answering stays, being deleted, until the node answers (its kubelet then stops
// it) or its Node object is deleted; the client Service sends no client to a pod being
// deleted.
func (r *EtcdClusterReconciler) fenceMembers(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step) error {
	var errs []error
	for _, name := range step.Members {
		pod, ok := obs.pods[name]
		if !ok {
			continue
		}
		if err := r.fenceFromClients(ctx, pod); err != nil {
			errs = append(errs, fmt.Errorf("take member %s out of the client Service: %w", name, err))
			continue
		}
		if !pod.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.takeDown(ctx, c, obs, step, pod); err != nil {
			errs = append(errs, fmt.Errorf("stop member %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// fenceFromClients takes a pod out of the client Service's selection for good. It is done to
// pods being deleted too: a pod on a node that stopped answering stays Terminating until the
// node answers, and its etcd, if it still runs there, must never be a client endpoint of the
// forced cluster.
func (r *EtcdClusterReconciler) fenceFromClients(ctx context.Context, pod *corev1.Pod) error {
	if resources.Fenced(pod) {
		return nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	fenced := pod.DeepCopy()
	delete(fenced.Labels, resources.LabelServesClients)
	if fenced.Annotations == nil {
		fenced.Annotations = map[string]string{}
	}
	fenced.Annotations[resources.AnnotationFenced] = r.now().UTC().Format(time.RFC3339)
	return ignoreGone(r.Patch(ctx, fenced, patch))
}

// keptFromRecovery: name is a member a quorum recovery did without, or the forced member of one
// given up. Its claim, if it has one, is out of reach rather than gone, and may hold writes the
// cluster lacks: it is kept, never deleted as an orphan's.
func keptFromRecovery(c *etcdv1alpha1.EtcdCluster, name string) bool {
	qr := c.Status.QuorumRecovery
	return qr != nil && (slices.Contains(qr.LostMembers, name) || forsaken(qr, name))
}

// forsaken: name is the forced member of a recovery given up after the force. Its data is a
// history of its own, which may hold writes acknowledged since the force: it never serves again,
// and its claim is kept.
func forsaken(qr *etcdv1alpha1.QuorumRecoveryStatus, name string) bool {
	return qr.Abandoned != "" && qr.ForcedTime != nil && qr.Member == name
}

// announceQuorumRecovered posts the events of a recovery's progress the record shows: a
// restore that fell back to an older snapshot, and the end.
func (r *EtcdClusterReconciler) announceQuorumRecovered(ctx context.Context, c, before *etcdv1alpha1.EtcdCluster) {
	qr, was := c.Status.QuorumRecovery, before.Status.QuorumRecovery
	if qr == nil {
		return
	}
	if b := qr.Backup; b != nil && was != nil && was.Backup != nil && was.Backup.SnapshotURI != b.SnapshotURI {
		postEvent(r.Recorder, c, corev1.EventTypeWarning, "SnapshotFallback", "Recover",
			"the newest snapshot, %s, no longer exists: EtcdRestore %s restored %s (revision %d), the newest older snapshot of EtcdBackup %s that does",
			was.Backup.SnapshotURI, b.EtcdRestore, b.SnapshotURI, b.Revision, b.EtcdBackup)
	}
	if qr.CompletionTime == nil || (was != nil && was.CompletionTime != nil && was.StartTime.Equal(&qr.StartTime)) {
		return
	}
	if qr.Abandoned != "" {
		postEvent(r.Recorder, c, corev1.EventTypeWarning, "QuorumRecoveryAbandoned", "Recover",
			"the recovery from member %s (started %s) was given up: %s", qr.Member, qr.StartTime.UTC().Format(time.RFC3339), qr.Abandoned)
		return
	}
	from := "member " + qr.Member
	if b := qr.Backup; b != nil {
		from = fmt.Sprintf("EtcdBackup %s's snapshot %s (revision %d)", b.EtcdBackup, b.SnapshotURI, b.Revision)
	}
	ctrl.LoggerFrom(ctx).Info("quorum recovered", "cluster", c.Name, "member", qr.Member, "from", from, "started", qr.StartTime.UTC().Format(time.RFC3339))
	postEvent(r.Recorder, c, corev1.EventTypeNormal, "QuorumRecovered", "Recover",
		"the cluster is available at its spec size again, recovered from %s (started %s)", from, qr.StartTime.UTC().Format(time.RFC3339))
}
