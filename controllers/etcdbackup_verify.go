package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// reconcileVerification records the verify Jobs that finished, then starts the one spec.verify
// asks for, if any: observe (the verify Jobs), decide (snapshotToVerify), act (one Job at a
// time), report (the snapshot's verification, status.lastVerified, the Verified condition and
// an event). Verifying never touches the destination nor the cluster. It returns how soon to
// look again at a running Job whose pod may yet be late to start, which nothing else wakes.
func (r *EtcdBackupReconciler) reconcileVerification(ctx context.Context, b, before *etcdv1alpha1.EtcdBackup) (time.Duration, error) {
	log := ctrl.LoggerFrom(ctx).V(1).WithValues("backup", b.Name)
	jobs, err := r.verifyJobs(ctx, b)
	if err != nil {
		return 0, err
	}
	var finished []*batchv1.Job
	var running *batchv1.Job
	var recheck time.Duration
	for i := range jobs {
		job := &jobs[i]
		outcome, wait, err := r.verificationOutcome(ctx, job)
		if err != nil {
			return 0, err
		}
		if outcome == nil {
			running, recheck = job, sooner(recheck, wait)
			continue
		}
		r.recordVerification(b, *outcome)
		log.Info("step", "action", "RecordVerification", "job", job.Name, "snapshot", outcome.URI, "result", outcome.Result, "recoveryTime", outcome.RecoveryTime)
		finished = append(finished, job)
	}
	reportRecoveryTime(b)
	if len(finished) > 0 {
		// Record, then clean up: until status holds the outcome, the Job is its only record.
		if err := writeStatusNow(ctx, r.Client, b, before, backupStatus); err != nil {
			return 0, err
		}
		b.DeepCopyInto(before)
		for _, job := range finished {
			if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return 0, fmt.Errorf("delete finished verify Job %s: %w", job.Name, err)
			}
		}
	}
	if running != nil {
		return recheck, nil
	}
	run := snapshotToVerify(b)
	if run == nil || r.AgentImage == "" || r.refuseVerificationWithoutKey(ctx, b, run) {
		return 0, nil
	}
	cluster := &etcdv1alpha1.EtcdCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, cluster); err != nil {
		// The cluster's version names the etcdutl to restore with; without it, wait for it.
		return 0, client.IgnoreNotFound(err)
	}
	log.Info("step", "action", "StartVerification", "run", run.Job, "snapshot", run.Artifact.URI, "reason", "spec.verify selects this run's snapshot")
	return 0, r.startVerification(ctx, b, cluster, run)
}

// snapshotToVerify is the completed run whose snapshot spec.verify asks to verify now, or nil:
// the newest completed run, if its snapshot is still in status and has not been verified, and
// the policy selects it. EveryNthRun selects it when none of the everyNthRun-1 completed runs
// before it had its snapshot verified, so the first run is verified and then every Nth.
func snapshotToVerify(b *etcdv1alpha1.EtcdBackup) *etcdv1alpha1.BackupRun {
	v := b.Spec.Verify
	if v == nil || v.Policy == etcdv1alpha1.VerifyNever {
		return nil
	}
	var completed []*etcdv1alpha1.BackupRun
	for i := range b.Status.History {
		if b.Status.History[i].Phase == etcdv1alpha1.BackupCompleted {
			completed = append(completed, &b.Status.History[i])
		}
	}
	if len(completed) == 0 {
		return nil
	}
	newest := completed[0]
	if newest.Artifact == nil || newest.Artifact.Verification != nil {
		return nil
	}
	if v.Policy == etcdv1alpha1.VerifyEveryNthRun {
		for _, run := range completed[1:min(len(completed), int(v.EveryNthRun))] {
			if run.Artifact != nil && run.Artifact.Verification != nil {
				return nil
			}
		}
	}
	return newest
}

// verifyJobs are the verify Jobs of this backup.
func (r *EtcdBackupReconciler) verifyJobs(ctx context.Context, b *etcdv1alpha1.EtcdBackup) ([]batchv1.Job, error) {
	list := &batchv1.JobList{}
	if err := r.List(ctx, list, client.InNamespace(b.Namespace), client.MatchingLabels{resources.LabelBackup: b.Name}, client.HasLabels{resources.LabelVerify}); err != nil {
		return nil, fmt.Errorf("list verify Jobs: %w", err)
	}
	return slices.DeleteFunc(list.Items, func(j batchv1.Job) bool { return !metav1.IsControlledBy(&j, b) || !j.DeletionTimestamp.IsZero() }), nil
}

// startVerification creates the verify Job of run's snapshot. Its name comes from the run's,
// so a lost status write cannot start a second one.
func (r *EtcdBackupReconciler) startVerification(ctx context.Context, b *etcdv1alpha1.EtcdBackup, c *etcdv1alpha1.EtcdCluster, run *etcdv1alpha1.BackupRun) error {
	key, ok := snapshotKey(b.Spec.Destination, run.Artifact.URI)
	if !ok {
		return nil
	}
	job, err := resources.VerifyJob(b, c, resources.VerifySnapshot{Storage: b.Spec.Destination, Encryption: b.Spec.Encryption, Key: key, Artifact: *run.Artifact, Run: run.Job}, r.AgentImage, r.DefaultImages, r.Pods)
	if err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(b, job, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create verify Job: %w", err)
	}
	setBackupCondition(b, etcdv1alpha1.ConditionVerified, metav1.ConditionUnknown, etcdv1alpha1.ReasonVerifying, "Job %s is restoring %s to verify it", job.Name, run.Artifact.URI)
	postEvent(r.Recorder, b, corev1.EventTypeNormal, "VerificationStarted", "Verify", "started Job %s to restore and check %s", job.Name, run.Artifact.URI)
	return nil
}

// snapshotKey is the key, after the destination's prefix, of a snapshot URI in it.
func snapshotKey(dest etcdv1alpha1.StorageLocation, uri string) (string, bool) {
	key, ok := strings.CutPrefix(uri, agent.LocationURIBase(dest))
	return key, ok && key != ""
}

// verificationOutcome reads what a verify Job found, once it has finished (or its pod did not
// get going in time, jobNotStarting): Verified, Failed (the snapshot does not restore, or not
// to what was recorded) or NotRun (the Job could not check it). While the Job runs there is
// none, and it says how soon to look again if its pod may yet be late.
func (r *EtcdBackupReconciler) verificationOutcome(ctx context.Context, job *batchv1.Job) (*etcdv1alpha1.SnapshotVerification, time.Duration, error) {
	out := &etcdv1alpha1.SnapshotVerification{URI: job.Annotations[resources.AnnotationSnapshotURI], Time: metav1.NewTime(r.Now())}
	succeeded, finished := jobOutcome(job)
	if !finished {
		notStarting, wait, err := jobNotStarting(ctx, r.Client, job, r.Now())
		if err != nil {
			return nil, 0, err
		}
		if notStarting == "" {
			pods, err := jobPods(ctx, r.Client, job)
			if err != nil {
				return nil, 0, err
			}
			var again time.Duration
			if notStarting, again = restoredMemberExits(pods); notStarting == "" {
				return nil, sooner(wait, again), nil
			}
		}
		out.Result, out.Message = etcdv1alpha1.SnapshotNotVerified, notStarting
		return out, 0, nil
	}
	out.Time = metav1.NewTime(jobFinishTime(job))
	terminated, err := lastPodTerminations(ctx, r.Client, job)
	if err != nil {
		return nil, 0, err
	}
	if restore, ok := terminated[resources.VerifyEtcdutlContainer]; ok {
		if check, ok := terminated[resources.VerifyContainer]; ok {
			out.Duration = &metav1.Duration{Duration: check.FinishedAt.Sub(restore.StartedAt.Time).Round(time.Second)}
		}
	}
	reports := map[string]agent.Report{}
	for _, name := range []string{resources.VerifyFetchContainer, resources.VerifyContainer} {
		if t, ok := terminated[name]; ok && t.Message != "" {
			if report, err := agent.DecodeReport(t.Message); err == nil {
				reports[name] = report
			}
		}
	}
	check, fetch := reports[resources.VerifyContainer], reports[resources.VerifyFetchContainer]
	restore, restored := terminated[resources.VerifyEtcdutlContainer]
	out.RecoveryTime, out.RecoverySteps = recoveryTime(fetch, restore, check)
	if fetch.Restore != nil {
		out.SizeBytes = fetch.Restore.SizeBytes
	}
	switch {
	case succeeded && check.Verify != nil:
		out.Result, out.Revision = etcdv1alpha1.SnapshotVerified, check.Verify.Revision
		out.Message = verifiedMessage(*check.Verify)
	case fetch.Unrestorable:
		out.Result, out.Message = etcdv1alpha1.SnapshotFailed, fetch.Error
	case restored && restore.ExitCode != 0:
		out.Result, out.Message = etcdv1alpha1.SnapshotFailed, fmt.Sprintf("etcdutl snapshot restore failed (exit code %d): %s", restore.ExitCode, restore.Message)
	case check.Unrestorable:
		out.Result, out.Message = etcdv1alpha1.SnapshotFailed, check.Error
		if check.Verify != nil {
			out.Revision = check.Verify.Revision
		}
	case fetch.Error != "":
		out.Result, out.Message = etcdv1alpha1.SnapshotNotVerified, fetch.Error
	case check.Error != "":
		out.Result, out.Message = etcdv1alpha1.SnapshotNotVerified, check.Error
	default:
		out.Result, out.Message = etcdv1alpha1.SnapshotNotVerified, failureMessage(job, succeeded, agent.Report{})
	}
	return out, 0, nil
}

// recoveryTime is how long the verify Job's snapshot took to serve again, from the start of its
// fetch to the restored member's first answer to a linearizable read, with its steps; nil when
// the member never answered. The fetch and the verifier time themselves on the node's clock, to
// the nanosecond; etcdutl, which reports nothing, is timed by its container's status, to the
// second.
func recoveryTime(fetch agent.Report, restore corev1.ContainerStateTerminated, check agent.Report) (*metav1.Duration, *etcdv1alpha1.RecoverySteps) {
	if check.Verify == nil || check.Verify.AnsweredAt.IsZero() || fetch.Began.IsZero() || check.Verify.AnsweredAt.Before(fetch.Began) {
		return nil, nil
	}
	answered := check.Verify.AnsweredAt
	steps := &etcdv1alpha1.RecoverySteps{}
	if !fetch.Ended.IsZero() {
		steps.Fetch = &metav1.Duration{Duration: fetch.Ended.Sub(fetch.Began).Round(time.Millisecond)}
	}
	if !restore.FinishedAt.IsZero() && !answered.Before(restore.FinishedAt.Time) {
		steps.Restore = &metav1.Duration{Duration: restore.FinishedAt.Sub(restore.StartedAt.Time).Round(time.Second)}
		steps.StartUp = &metav1.Duration{Duration: answered.Sub(restore.FinishedAt.Time).Round(time.Second)}
	}
	return &metav1.Duration{Duration: answered.Sub(fetch.Began).Round(time.Millisecond)}, steps
}

func verifiedMessage(v agent.VerifyResult) string {
	if v.HashCompared {
		return fmt.Sprintf("restored at revision %d with %d keys and the recorded hash", v.Revision, v.KeyCount)
	}
	if v.KeyCount > 0 {
		return fmt.Sprintf("restored at revision %d with %d keys; the hash was not compared (compacted since it was recorded)", v.Revision, v.KeyCount)
	}
	return fmt.Sprintf("restored at revision %d; nothing else was recorded to compare", v.Revision)
}

// recordVerification puts a verification on the snapshot it verified, wherever status names
// it, and reports it.
func (r *EtcdBackupReconciler) recordVerification(b *etcdv1alpha1.EtcdBackup, v etcdv1alpha1.SnapshotVerification) {
	mark := func(a *etcdv1alpha1.BackupArtifact) {
		if a != nil && a.URI == v.URI {
			a.Verification = v.DeepCopy()
		}
	}
	mark(b.Status.LastBackup)
	for i := range b.Status.History {
		mark(b.Status.History[i].Artifact)
	}
	b.Status.LastVerified = v.DeepCopy()
	switch v.Result {
	case etcdv1alpha1.SnapshotVerified:
		setBackupCondition(b, etcdv1alpha1.ConditionVerified, metav1.ConditionTrue, etcdv1alpha1.ReasonSnapshotVerified, "%s %s", v.URI, v.Message)
		postEvent(r.Recorder, b, corev1.EventTypeNormal, "SnapshotVerified", "Verify", "%s %s", v.URI, v.Message)
	case etcdv1alpha1.SnapshotFailed:
		setBackupCondition(b, etcdv1alpha1.ConditionVerified, metav1.ConditionFalse, etcdv1alpha1.ReasonVerificationFailed,
			"%s failed verification and is never picked by a restore: %s", v.URI, v.Message)
		postEvent(r.Recorder, b, corev1.EventTypeWarning, "VerificationFailed", "Verify", "%s failed verification: %s", v.URI, v.Message)
	default:
		setBackupCondition(b, etcdv1alpha1.ConditionVerified, metav1.ConditionFalse, etcdv1alpha1.ReasonVerificationNotRun,
			"%s could not be verified: %s", v.URI, v.Message)
		postEvent(r.Recorder, b, corev1.EventTypeWarning, "VerificationNotRun", "Verify", "%s could not be verified: %s", v.URI, v.Message)
	}
	if bound := maxRecoveryTime(b); bound > 0 && v.RecoveryTime != nil && v.RecoveryTime.Duration > bound {
		postEvent(r.Recorder, b, corev1.EventTypeWarning, etcdv1alpha1.ReasonRecoveryTimeExceeded, "Verify", "%s", recoveryTimeExceeded(&v, bound))
	}
}

// maxRecoveryTime is spec.verify.maxRecoveryTime, 0 when unset.
func maxRecoveryTime(b *etcdv1alpha1.EtcdBackup) time.Duration {
	if b.Spec.Verify == nil || b.Spec.Verify.MaxRecoveryTime == nil {
		return 0
	}
	return b.Spec.Verify.MaxRecoveryTime.Duration
}

// reportRecoveryTime holds the last verification's recovery time to spec.verify.maxRecoveryTime
// in the RecoveryTimeWithinBound condition, which goes without a bound. It reads status alone,
// so that a bound changed applies at once, as the alert on the two series does.
func reportRecoveryTime(b *etcdv1alpha1.EtcdBackup) {
	bound := maxRecoveryTime(b)
	v := b.Status.LastVerified
	switch {
	case bound == 0:
		meta.RemoveStatusCondition(&b.Status.Conditions, etcdv1alpha1.ConditionRecoveryTimeWithinBound)
	case v == nil:
		setBackupCondition(b, etcdv1alpha1.ConditionRecoveryTimeWithinBound, metav1.ConditionUnknown, etcdv1alpha1.ReasonRecoveryTimeNotMeasured,
			"no snapshot has been verified yet: its verification measures the recovery time")
	case v.RecoveryTime == nil:
		setBackupCondition(b, etcdv1alpha1.ConditionRecoveryTimeWithinBound, metav1.ConditionUnknown, etcdv1alpha1.ReasonRecoveryTimeNotMeasured,
			"the last verification, of %s (%s), measured no recovery time: its restored etcd never answered", v.URI, v.Result)
	case v.RecoveryTime.Duration > bound:
		setBackupCondition(b, etcdv1alpha1.ConditionRecoveryTimeWithinBound, metav1.ConditionFalse, etcdv1alpha1.ReasonRecoveryTimeExceeded,
			"%s", recoveryTimeExceeded(v, bound))
	default:
		setBackupCondition(b, etcdv1alpha1.ConditionRecoveryTimeWithinBound, metav1.ConditionTrue, etcdv1alpha1.ReasonRecoveryTimeWithinBound,
			"%s, within spec.verify.maxRecoveryTime %s", servedAgain(v), bound)
	}
}

// recoveryTimeExceeded says that, by how much, and what to do.
func recoveryTimeExceeded(v *etcdv1alpha1.SnapshotVerification, bound time.Duration) string {
	return fmt.Sprintf("%s, above spec.verify.maxRecoveryTime %s. The snapshot is still verified: it restores, only slower than the bound. "+
		"To restore faster, make the snapshots smaller (compact the keyspace and defragment the members), or give the destination and "+
		"the nodes faster storage; or raise maxRecoveryTime", servedAgain(v), bound)
}

// servedAgain says which snapshot took how long to serve again, its size and steps.
func servedAgain(v *etcdv1alpha1.SnapshotVerification) string {
	var b strings.Builder
	b.WriteString(v.URI)
	if v.SizeBytes > 0 {
		fmt.Fprintf(&b, " (%s)", byteSize(v.SizeBytes))
	}
	fmt.Fprintf(&b, " served again in %s", v.RecoveryTime.Duration)
	var steps []string
	if s := v.RecoverySteps; s != nil {
		for _, step := range []struct {
			name string
			d    *metav1.Duration
		}{{"fetch", s.Fetch}, {"restore", s.Restore}, {"start-up", s.StartUp}} {
			if step.d != nil {
				steps = append(steps, step.name+" "+step.d.Duration.String())
			}
		}
	}
	if len(steps) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(steps, ", "))
	}
	return b.String()
}

// byteSize is n bytes for a person to read: 1.5 GiB, 300.0 MiB, 20.0 KiB.
func byteSize(n int64) string {
	for _, unit := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= unit.size {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(unit.size), unit.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// verifyMemberExitLimit is how many times a verify Job's restored member may exit before the
// verification is given up as not run.
const verifyMemberExitLimit = 3

// restoredMemberExits says why a verify Job cannot verify once its restored member (the etcd
// sidecar serving the restored data) has exited verifyMemberExitLimit times, with its last
// exit: the verifier would otherwise wait out its minutes for a member that does not stay up
// (killed for memory under the members' limit, say), and the Job's retries would do the same.
// Until then, once it has exited, it says to look again soon: a pod's restarts wake no one.
func restoredMemberExits(pods []corev1.Pod) (string, time.Duration) {
	if len(pods) == 0 {
		return "", 0
	}
	newest := &pods[len(pods)-1]
	for _, st := range newest.Status.InitContainerStatuses {
		if st.Name != resources.VerifyEtcdContainer || st.RestartCount == 0 {
			continue
		}
		last := st.LastTerminationState.Terminated
		if st.RestartCount < verifyMemberExitLimit || last == nil {
			return "", 20 * time.Second
		}
		why := fmt.Sprintf("the restored member (container %s of pod %s) exited %d times, last with %s (exit code %d)",
			st.Name, newest.Name, st.RestartCount, last.Reason, last.ExitCode)
		if last.Message != "" {
			why += ": " + last.Message
		}
		if last.Reason == "OOMKilled" {
			why += "; it runs with the members' memory limit: raise spec.podTemplate.resources.limits.memory of the EtcdCluster"
		}
		return why, 0
	}
	return "", 0
}
