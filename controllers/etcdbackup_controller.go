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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/metrics"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// EtcdBackupReconciler takes snapshots of EtcdClusters: each run is a Job of the operator's
// agent, in the backup's namespace, whose report becomes the backup's status.
type EtcdBackupReconciler struct {
	client.Client
	// APIReader reads past the cache, to make sure a run is started from current state, and
	// reads the user's Secrets and claim a destination names, which the cache does not hold.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// AgentImage is the operator's own image, which the Jobs run.
	AgentImage string
	// DefaultImages are the etcd images of clusters whose spec.repository is empty: a verify
	// Job restores with the cluster's own etcd version.
	DefaultImages resources.EtcdImages
	// Pods are what its install and platform give the Jobs it starts (OLM's proxy settings,
	// the platform's own pod IDs).
	Pods resources.PodSettings
	// ArchiverReports reads the archivers' reports; nil reads them over HTTP from their pods.
	ArchiverReports ArchiverReports
	Now             func() time.Time
}

// notReadyRetry is how soon a backup that cannot run yet (its cluster not Available, its
// Secret missing) looks again; a change to its EtcdCluster wakes it sooner.
const notReadyRetry = 30 * time.Second

// reportGrace is how long a finished Job may lack its agent's report — the pod's final status
// can reach the cache after the Job's — before the run is recorded as failed without one.
const reportGrace = 30 * time.Second

// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdbackups/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;create

// Reconcile records the runs that finished, then starts the run that is due, if any.
func (r *EtcdBackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	backup := &etcdv1alpha1.EtcdBackup{}
	if err := r.Get(ctx, req.NamespacedName, backup); err != nil {
		if client.IgnoreNotFound(err) == nil {
			metrics.Backups.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !backup.DeletionTimestamp.IsZero() {
		metrics.Backups.Forget(req.NamespacedName)
		return ctrl.Result{}, nil // its Jobs go with it, by owner reference
	}
	before := backup.DeepCopy()
	// before follows status as it is written mid-reconcile; the runs failed since the read are
	// counted against the history as read.
	historyRead := before.Status.History
	defer func() { metrics.Backups.Record(backup, historyRead, r.Now()) }()

	result, err := r.reconcileRuns(ctx, backup, before)
	if err == nil {
		// Only a reconcile that did its work has acted on this generation's spec.
		backup.Status.ObservedGeneration = backup.Generation
	}

	if patchErr := patchStatusIfChanged(ctx, r.Client, backup, before, backupStatus); patchErr != nil && err == nil {
		err = patchErr
	}
	return result, err
}

// reconcileRuns records the finished runs, then cleans up after them, then follows the
// verification, then starts the run that is due. before is the status as last written; it is
// updated when status is written early.
func (r *EtcdBackupReconciler) reconcileRuns(ctx context.Context, b, before *etcdv1alpha1.EtcdBackup) (ctrl.Result, error) {
	// The story the events summarise, step by step: kubectl logs with LOG_LEVEL=debug.
	log := ctrl.LoggerFrom(ctx).V(1).WithValues("backup", b.Name)
	jobs, err := r.ownedJobs(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	finished, recheck, err := r.recordFinishedRuns(ctx, b, jobs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(finished) > 0 {
		// Record, then clean up: until status holds a run, its Job is the only record of it (a
		// lost write would lose the snapshot's record, and run a one-shot backup again).
		if err := writeStatusNow(ctx, r.Client, b, before, backupStatus); err != nil {
			return ctrl.Result{}, err
		}
		// gofail: var backupRunRecorded struct{}
		b.DeepCopyInto(before)
		for _, job := range finished {
			log.Info("step", "action", "DeleteRecordedJob", "job", job.Name, "reason", "its run is recorded in status.history")
			if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("delete finished Job %s: %w", job.Name, err)
			}
			// gofail: var backupFinishedJobDeleted struct{}
		}
	}
	verifyRecheck, err := r.reconcileVerification(ctx, b, before)
	if err != nil {
		return ctrl.Result{}, err
	}
	archiveRecheck, err := r.reconcileArchive(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	result, err := r.followOrStartRun(ctx, b, activeJob(jobs, finished), recheck)
	if err == nil {
		// A verify pod late to start, or waiting for an image, wakes nothing; nor does an
		// archiver's report, which is read on a period.
		result.RequeueAfter = sooner(sooner(result.RequeueAfter, verifyRecheck), archiveRecheck)
	}
	return result, err
}

// followOrStartRun reports the active run, if any; else waits for a finished Job's report
// (recheck), or for the next run, or starts the run that is due.
func (r *EtcdBackupReconciler) followOrStartRun(ctx context.Context, b *etcdv1alpha1.EtcdBackup, active *batchv1.Job, recheck time.Duration) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).V(1).WithValues("backup", b.Name)
	if active != nil {
		b.Status.ActiveJob, b.Status.Phase = active.Name, etcdv1alpha1.BackupRunning
		setBackupCondition(b, etcdv1alpha1.ConditionSucceeded, metav1.ConditionUnknown, etcdv1alpha1.ReasonRunning, "Job %s is taking a snapshot", active.Name)
		log.Info("step", "action", "WaitForRun", "job", active.Name, "reason", etcdv1alpha1.ReasonRunning)
		// The Job's completion wakes this reconciler; a pod that never starts does not.
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	b.Status.ActiveJob = ""
	if recheck > 0 {
		log.Info("step", "action", "WaitForReport", "after", recheck, "reason", "a finished Job's report has not reached the cache yet")
		return ctrl.Result{RequeueAfter: recheck}, nil
	}

	scheduledFor, wait := r.nextRun(b)
	if scheduledFor.IsZero() {
		log.WithValues(conditionSays(b.Status.Conditions, etcdv1alpha1.ConditionReady)...).Info("step", "action", "NoRunDue", "phase", b.Status.Phase, "after", wait)
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	cluster, ready := r.checkReady(ctx, b)
	if !ready {
		log.WithValues(conditionSays(b.Status.Conditions, etcdv1alpha1.ConditionReady)...).Info("step", "action", "WaitUntilReady", "after", notReadyRetry)
		return ctrl.Result{RequeueAfter: notReadyRetry}, nil
	}
	log.Info("step", "action", "StartRun", "scheduledFor", scheduledFor, "reason", "a run is due and the cluster and destination are ready")
	return ctrl.Result{}, r.startRun(ctx, b, cluster, scheduledFor)
}

// ownedJobs are the agent Jobs of this backup, oldest first.
func (r *EtcdBackupReconciler) ownedJobs(ctx context.Context, b *etcdv1alpha1.EtcdBackup) ([]batchv1.Job, error) {
	list := &batchv1.JobList{}
	if err := r.List(ctx, list, client.InNamespace(b.Namespace), client.MatchingLabels{resources.LabelBackup: b.Name}); err != nil {
		return nil, fmt.Errorf("list backup Jobs: %w", err)
	}
	jobs := slices.DeleteFunc(list.Items, func(j batchv1.Job) bool {
		_, verifies := j.Labels[resources.LabelVerify]
		return verifies || !metav1.IsControlledBy(&j, b)
	})
	slices.SortFunc(jobs, func(x, y batchv1.Job) int { return x.CreationTimestamp.Compare(y.CreationTimestamp.Time) })
	return jobs, nil
}

// activeJob is the unfinished Job whose run is not already recorded, if any.
func activeJob(jobs []batchv1.Job, recorded []*batchv1.Job) *batchv1.Job {
	for i := range jobs {
		if slices.Contains(recorded, &jobs[i]) {
			continue
		}
		if _, finished := jobOutcome(&jobs[i]); !finished && jobs[i].DeletionTimestamp.IsZero() {
			return &jobs[i]
		}
	}
	return nil
}

func backupStatus(o client.Object) any { return o.(*etcdv1alpha1.EtcdBackup).Status }

// recordFinishedRuns turns each finished Job, and each whose pod did not start in time, into a
// run in the history. It returns the Jobs whose runs are in the history, to be deleted once it
// is written, and how soon to look again: for a report that has not reached the cache yet, or
// for a pod that may still start.
func (r *EtcdBackupReconciler) recordFinishedRuns(ctx context.Context, b *etcdv1alpha1.EtcdBackup, jobs []batchv1.Job) ([]*batchv1.Job, time.Duration, error) {
	var recheck time.Duration
	var recorded []*batchv1.Job
	for i := range jobs {
		job := &jobs[i]
		if !job.DeletionTimestamp.IsZero() {
			continue
		}
		inHistory := slices.ContainsFunc(b.Status.History, func(run etcdv1alpha1.BackupRun) bool { return run.Job == job.Name })
		succeeded, finished := jobOutcome(job)
		if !finished {
			notStarting, wait, err := jobNotStarting(ctx, r.Client, job, r.Now())
			if err != nil {
				return nil, 0, err
			}
			if notStarting == "" {
				recheck = sooner(recheck, wait)
				continue
			}
			if !inHistory {
				ctrl.LoggerFrom(ctx).V(1).Info("step", "action", "RecordRun", "backup", b.Name, "job", job.Name, "reason", etcdv1alpha1.ReasonJobNotStarting, "message", notStarting)
				r.recordFailure(b, job, etcdv1alpha1.ReasonJobNotStarting, notStarting)
			}
			recorded = append(recorded, job)
			continue
		}
		if !inHistory {
			report, found, err := agentReport(ctx, r.Client, job, resources.BackupContainer)
			if err != nil {
				return nil, 0, err
			}
			if succeeded && !found {
				if left := reportGrace - r.Now().Sub(jobFinishTime(job)); left > 0 {
					recheck = sooner(recheck, left)
					continue
				}
			}
			r.record(b, job, succeeded, report)
			ctrl.LoggerFrom(ctx).V(1).WithValues(conditionSays(b.Status.Conditions, etcdv1alpha1.ConditionSucceeded)...).
				Info("step", "action", "RecordRun", "backup", b.Name, "job", job.Name)
		}
		recorded = append(recorded, job)
	}
	return recorded, recheck, nil
}

// sooner is the shorter of two waits, where zero means no wait at all.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// record adds a run to the history, newest first, and reports it.
func (r *EtcdBackupReconciler) record(b *etcdv1alpha1.EtcdBackup, job *batchv1.Job, succeeded bool, report agent.Report) {
	if !succeeded || report.Backup == nil {
		reason := etcdv1alpha1.ReasonFailed
		if report.Permanent {
			reason = etcdv1alpha1.ReasonPermanentFailure
		}
		r.recordFailure(b, job, reason, failureMessage(job, succeeded, report))
		return
	}
	res := report.Backup
	run := etcdv1alpha1.BackupRun{Job: job.Name, StartTime: job.Status.StartTime, CompletionTime: ptrTime(jobFinishTime(job)), Phase: etcdv1alpha1.BackupCompleted}
	run.Artifact = &etcdv1alpha1.BackupArtifact{
		URI: res.URI, SizeBytes: res.SizeBytes, SHA256: res.SHA256, Revision: res.Revision,
		EtcdVersion: res.EtcdVersion, Member: res.Member, ClusterID: res.ClusterID, ClusterUID: types.UID(job.Annotations[resources.AnnotationClusterUID]),
		StartTime: metav1.NewTime(res.StartTime), CompletionTime: metav1.NewTime(res.CompletionTime),
		Keyspace: res.Keyspace, AuthEnabled: res.AuthEnabled, EncryptionKeyID: res.EncryptionKeyID,
	}
	// What the run's Job was told to keep: runs of one EtcdBackup never overlap, so status
	// has named no other snapshot since it was made.
	kept := ""
	if b.Status.LastBackup != nil {
		kept = b.Status.LastBackup.URI
	}
	b.Status.LastBackup = run.Artifact
	setBackupCondition(b, etcdv1alpha1.ConditionSucceeded, metav1.ConditionTrue, etcdv1alpha1.ReasonCompleted,
		"%s: %d bytes at revision %d, %s", res.URI, res.SizeBytes, res.Revision, storedCheck(res))
	postEvent(r.Recorder, b, corev1.EventTypeNormal, "BackupCompleted", "Backup", "wrote %s (%d bytes, revision %d, sha256 %s%s)", res.URI, res.SizeBytes, res.Revision, res.SHA256, encryptedTo(res.EncryptionKeyID))
	if n := len(res.Pruned) + res.PrunedCount; n > 0 {
		postEvent(r.Recorder, b, corev1.EventTypeNormal, "SnapshotsPruned", "Prune", "retention deleted %d older snapshot(s): %v", n, res.Pruned)
	}
	if res.PruneError != "" {
		postEvent(r.Recorder, b, corev1.EventTypeWarning, "PruneFailed", "Prune", "retention could not delete every older snapshot: %s", res.PruneError)
	}
	appendRun(b, run)
	forgetDeletedSnapshots(b, kept, job.Name, res)
}

// storedCheck is how the run found the destination to hold what it streamed: the sha256 the
// store checked, the size after the sync, or the read-back of the whole snapshot, which
// agents that do not say always did.
func storedCheck(res *agent.BackupResult) string {
	if res.Check == "" {
		return "sha256 read back from the destination"
	}
	return res.Check
}

// forgetDeletedSnapshots takes out of the history the snapshots the run's retention deleted,
// so that status names none that no longer exists: each such run keeps its record, and its
// message says where its snapshot went. They are those the run reports, and those retention
// picks among the snapshots status names: the destination holds these and perhaps more, so
// retention deleted at least those (and the report may list only the newest it deleted, for
// room). The next run's record catches up on any a lost report did not name. kept is the
// snapshot the run's Job (job) was told never to delete.
func forgetDeletedSnapshots(b *etcdv1alpha1.EtcdBackup, kept, job string, res *agent.BackupResult) {
	deleted := slices.Clone(res.Pruned)
	if retention := b.Spec.Retention; retention != nil && res.PruneError == "" {
		var maxCount int
		var maxAge time.Duration
		if retention.MaxCount != nil {
			maxCount = int(*retention.MaxCount)
		}
		if retention.MaxAge != nil {
			maxAge = retention.MaxAge.Duration
		}
		var named []backupplan.Snapshot
		for _, run := range b.Status.History {
			if a := run.Artifact; a != nil {
				named = append(named, backupplan.Snapshot{Key: a.URI, Time: a.StartTime.Time})
			}
		}
		deleted = append(deleted, backupplan.ToPrune(named, maxCount, maxAge, res.CompletionTime, []string{kept, res.URI})...)
	}
	for i := range b.Status.History {
		if run := &b.Status.History[i]; run.Artifact != nil && slices.Contains(deleted, run.Artifact.URI) {
			run.Message = fmt.Sprintf("retention deleted its snapshot %s after run %s", run.Artifact.URI, job)
			run.Artifact = nil
		}
	}
}

// recordFailure adds a failed run to the history and reports it.
func (r *EtcdBackupReconciler) recordFailure(b *etcdv1alpha1.EtcdBackup, job *batchv1.Job, reason, message string) {
	run := etcdv1alpha1.BackupRun{Job: job.Name, StartTime: job.Status.StartTime, CompletionTime: ptrTime(r.Now()), Phase: etcdv1alpha1.BackupFailed, Message: message}
	if _, finished := jobOutcome(job); finished {
		run.CompletionTime = ptrTime(jobFinishTime(job))
	}
	setBackupCondition(b, etcdv1alpha1.ConditionSucceeded, metav1.ConditionFalse, reason, "%s", message)
	postEvent(r.Recorder, b, corev1.EventTypeWarning, "BackupFailed", "Backup", "%s", message)
	appendRun(b, run)
}

// appendRun adds a run to the history, newest first, within spec.historyLimit.
func appendRun(b *etcdv1alpha1.EtcdBackup, run etcdv1alpha1.BackupRun) {
	limit := int(b.Spec.HistoryLimit)
	if limit <= 0 {
		limit = 10
	}
	b.Status.History = append([]etcdv1alpha1.BackupRun{run}, b.Status.History...)
	if len(b.Status.History) > limit {
		b.Status.History = b.Status.History[:limit]
	}
}

func failureMessage(job *batchv1.Job, succeeded bool, report agent.Report) string {
	switch {
	case report.Error != "":
		return report.Error
	case succeeded:
		return fmt.Sprintf("Job %s succeeded but its agent left no report", job.Name)
	}
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return fmt.Sprintf("Job %s failed (%s): %s", job.Name, c.Reason, c.Message)
		}
	}
	return fmt.Sprintf("Job %s failed", job.Name)
}

// nextRun says which run is due now (zero time: none) and, if none, how long until one is. A
// schedule it cannot parse is reported in status; nothing runs until the spec is fixed.
func (r *EtcdBackupReconciler) nextRun(b *etcdv1alpha1.EtcdBackup) (time.Time, time.Duration) {
	if b.Spec.Schedule == "" {
		if len(b.Status.History) > 0 {
			b.Status.Phase = b.Status.History[0].Phase // a one-shot backup runs once: its record is final
			return time.Time{}, 0
		}
		return b.CreationTimestamp.Time, 0
	}
	if b.Spec.Suspend {
		b.Status.Phase, b.Status.NextScheduleTime = etcdv1alpha1.BackupSuspended, nil
		setBackupCondition(b, etcdv1alpha1.ConditionReady, metav1.ConditionFalse, etcdv1alpha1.ReasonSuspended, "spec.suspend is set: no new runs start")
		return time.Time{}, 0
	}
	sched, err := backupplan.ParseSchedule(b.Spec.Schedule)
	if err != nil {
		b.Status.Phase = etcdv1alpha1.BackupFailed
		setBackupCondition(b, etcdv1alpha1.ConditionReady, metav1.ConditionFalse, etcdv1alpha1.ReasonInvalidSchedule, "%v", err)
		return time.Time{}, 0
	}
	since := b.CreationTimestamp.Time
	if b.Status.LastScheduleTime != nil {
		since = b.Status.LastScheduleTime.Time
	}
	now := r.Now()
	runNow, scheduledFor, next := backupplan.Due(sched, since, now)
	b.Status.NextScheduleTime = ptrTime(next)
	if !runNow {
		b.Status.Phase = etcdv1alpha1.BackupScheduled
		// Cron times are whole seconds; a little past them avoids waking just before.
		return time.Time{}, next.Sub(now) + 100*time.Millisecond
	}
	return scheduledFor, 0
}

// checkReady sees that the cluster can be backed up and that what the Job will mount exists,
// so that a run is not started only to hang on a missing Secret.
func (r *EtcdBackupReconciler) checkReady(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (*etcdv1alpha1.EtcdCluster, bool) {
	notReady := func(reason, format string, args ...any) (*etcdv1alpha1.EtcdCluster, bool) {
		if b.Spec.Schedule == "" {
			b.Status.Phase = etcdv1alpha1.BackupPending
		} else {
			b.Status.Phase = etcdv1alpha1.BackupScheduled
		}
		setBackupCondition(b, etcdv1alpha1.ConditionReady, metav1.ConditionFalse, reason, format, args...)
		return nil, false
	}
	if r.AgentImage == "" {
		return notReady(etcdv1alpha1.ReasonAgentImageUnknown, "the operator was started without RELATED_IMAGE_OPERATOR, the image its backup Jobs run")
	}
	// The destination before the cluster: what it lacks takes the user's action, where a
	// cluster not Available yet is usually one being created; and a claim provisioned now is
	// bound while the cluster comes up.
	if reason, message := r.destinationProblem(ctx, b); reason != "" {
		if said := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionReady); said == nil || said.Reason != reason || said.Message != message {
			postEvent(r.Recorder, b, corev1.EventTypeWarning, reason, "CheckDestination", "%s", message)
		}
		return notReady(reason, "%s", message)
	}
	cluster := &etcdv1alpha1.EtcdCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return notReady(etcdv1alpha1.ReasonClusterNotFound, "EtcdCluster %s does not exist in namespace %s", b.Spec.ClusterName, b.Namespace)
		}
		return notReady(etcdv1alpha1.ReasonClusterNotFound, "read EtcdCluster %s: %v", b.Spec.ClusterName, err)
	}
	if !meta.IsStatusConditionTrue(cluster.Status.Conditions, etcdv1alpha1.ConditionAvailable) {
		return notReady(etcdv1alpha1.ReasonClusterNotAvailable, "EtcdCluster %s is not Available; the backup starts when it is", cluster.Name)
	}
	setBackupCondition(b, etcdv1alpha1.ConditionReady, metav1.ConditionTrue, etcdv1alpha1.ReasonReady, "EtcdCluster %s is Available and the destination is configured", cluster.Name)
	return cluster, true
}

// destinationProblem checks, before any Job is made, what the agent will need of the
// destination, and returns the first problem as a condition reason and a message that says
// what to fix, or "". A Job started without them would sit in CreateContainerConfigError, or
// write a snapshot onto a member's data, and hold OLM upgrades back meanwhile.
func (r *EtcdBackupReconciler) destinationProblem(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (string, string) {
	for _, check := range []func(context.Context, *etcdv1alpha1.EtcdBackup) (string, string){
		r.credentialsProblem, r.storageCAProblem, r.serviceAccountProblem, r.claimProblem, r.encryptionProblem,
	} {
		if reason, message := check(ctx, b); reason != "" {
			return reason, message
		}
	}
	return "", ""
}

// credentialsProblem: the S3 credentials Secret exists with the keys the agent reads.
func (r *EtcdBackupReconciler) credentialsProblem(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (string, string) {
	s3 := b.Spec.Destination.S3
	if s3 == nil || s3.CredentialsSecretName == "" {
		return "", ""
	}
	return r.secretProblem(ctx, b.Namespace, s3.CredentialsSecretName, jobspec.AccessKeyIDEnv, jobspec.SecretAccessKeyEnv)
}

// storageCAProblem: the S3 server's CA Secret exists with its certificate.
func (r *EtcdBackupReconciler) storageCAProblem(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (string, string) {
	s3 := b.Spec.Destination.S3
	if s3 == nil || s3.CASecretName == "" {
		return "", ""
	}
	return r.secretProblem(ctx, b.Namespace, s3.CASecretName, jobspec.StorageCAKey)
}

// serviceAccountProblem: the ServiceAccount the Job is to run as exists. Without it the Job
// controller could create no pod, and would only say so in an event on the Job.
func (r *EtcdBackupReconciler) serviceAccountProblem(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (string, string) {
	s3 := b.Spec.Destination.S3
	if s3 == nil || s3.ServiceAccountName == "" {
		return "", ""
	}
	// Only whether it exists matters: its metadata is read, nothing else.
	sa := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: s3.ServiceAccountName}, sa); err != nil {
		if apierrors.IsNotFound(err) {
			return etcdv1alpha1.ReasonServiceAccountNotFound, fmt.Sprintf(
				"ServiceAccount %s does not exist in namespace %s: create it, bound to the IAM role with access to bucket %s, or set destination.s3.credentialsSecretName",
				s3.ServiceAccountName, b.Namespace, s3.Bucket)
		}
		return etcdv1alpha1.ReasonServiceAccountNotFound, fmt.Sprintf("read ServiceAccount %s: %v", s3.ServiceAccountName, err)
	}
	return "", ""
}

// claimProblem: the destination claim exists, or is provisioned now, and is not a member's
// data claim. A claim that exists is used as it is.
func (r *EtcdBackupReconciler) claimProblem(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (string, string) {
	dest := b.Spec.Destination.PVC
	if dest == nil {
		return "", ""
	}
	key := client.ObjectKey{Namespace: b.Namespace, Name: dest.ClaimName}
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.APIReader.Get(ctx, key, pvc)
	if apierrors.IsNotFound(err) && dest.Provision != nil {
		if reason, message := r.provisionClaim(ctx, b); reason != "" {
			return reason, message
		}
		// Created now, or by someone else meanwhile: what is there is checked like any claim.
		err = r.APIReader.Get(ctx, key, pvc)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return etcdv1alpha1.ReasonClaimNotFound, fmt.Sprintf(
				"PersistentVolumeClaim %s does not exist in namespace %s: create it, or set destination.pvc.provision (a size, and a storageClassName unless the default class will do) for the operator to create it; the backup starts once it exists",
				dest.ClaimName, b.Namespace)
		}
		return etcdv1alpha1.ReasonClaimNotFound, fmt.Sprintf("read PersistentVolumeClaim %s: %v", dest.ClaimName, err)
	}
	if cluster, member := pvc.Labels[resources.LabelCluster], pvc.Labels[resources.LabelMember]; cluster != "" || member != "" {
		return etcdv1alpha1.ReasonInvalidDestination, fmt.Sprintf(
			"PersistentVolumeClaim %s holds the data of member %s of EtcdCluster %s: snapshots are never written onto a member's volume; give destination.pvc a claim of its own",
			pvc.Name, member, cluster)
	}
	return "", ""
}

// provisionClaim creates the claim destination.pvc.provision asks for, owned by no object so
// that its snapshots outlive the EtcdBackup. One that exists already is left as it is.
func (r *EtcdBackupReconciler) provisionClaim(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (string, string) {
	claim := resources.BackupClaim(b)
	if err := r.Create(ctx, claim); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return "", ""
		}
		return etcdv1alpha1.ReasonClaimNotProvisioned, fmt.Sprintf(
			"create PersistentVolumeClaim %s for destination.pvc.provision: %v; create the claim yourself, or fix what the message names (a quota, the operator's permissions)",
			claim.Name, err)
	}
	class := "the default StorageClass"
	if name := claim.Spec.StorageClassName; name != nil {
		class = "StorageClass " + *name
	}
	size := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	ctrl.LoggerFrom(ctx).V(1).Info("step", "action", "ProvisionClaim", "backup", b.Name, "claim", claim.Name, "reason", "destination.pvc.provision is set and the claim does not exist")
	postEvent(r.Recorder, b, corev1.EventTypeNormal, "ClaimProvisioned", "Provision",
		"created PersistentVolumeClaim %s (%s, %s, ReadWriteOnce) for the snapshots; it is kept when the EtcdBackup is deleted", claim.Name, size.String(), class)
	return "", ""
}

// secretProblem: the Secret exists and has every key, non-empty.
func (r *EtcdBackupReconciler) secretProblem(ctx context.Context, namespace, name string, keys ...string) (string, string) {
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return etcdv1alpha1.ReasonSecretNotFound, fmt.Sprintf("Secret %s does not exist in namespace %s", name, namespace)
		}
		return etcdv1alpha1.ReasonSecretNotFound, fmt.Sprintf("read Secret %s: %v", name, err)
	}
	var missing []string
	for _, key := range keys {
		if len(secret.Data[key]) == 0 {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		return etcdv1alpha1.ReasonSecretKeysMissing, fmt.Sprintf("Secret %s has no %s: the backup Job reads the keys %s", name, strings.Join(missing, ", "), strings.Join(keys, ", "))
	}
	return "", ""
}

// startRun creates the Job of the run scheduled for the given time. Its name is derived from
// that time, so a run is started at most once even if this status write is lost.
func (r *EtcdBackupReconciler) startRun(ctx context.Context, b *etcdv1alpha1.EtcdBackup, c *etcdv1alpha1.EtcdCluster, scheduledFor time.Time) error {
	// A cached EtcdBackup may predate the record of the run just finished, whose Job is gone:
	// starting from it would run a one-shot backup twice.
	current := &etcdv1alpha1.EtcdBackup{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(b), current); err != nil {
		return client.IgnoreNotFound(err)
	}
	if current.ResourceVersion != b.ResourceVersion {
		return nil // the newer version's watch event reconciles again
	}
	// current, not b: the Job's retention keeps the snapshot status.lastBackup names as
	// written, which is what a restore finds until this run is recorded.
	job, err := resources.BackupJob(current, c, r.AgentImage, scheduledFor, r.Pods)
	if err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(b, job, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create backup Job: %w", err)
	}
	// gofail: var backupJobCreated struct{}
	b.Status.ActiveJob, b.Status.Phase = job.Name, etcdv1alpha1.BackupRunning
	if b.Spec.Schedule != "" {
		b.Status.LastScheduleTime = ptrTime(scheduledFor)
	}
	setBackupCondition(b, etcdv1alpha1.ConditionSucceeded, metav1.ConditionUnknown, etcdv1alpha1.ReasonRunning, "Job %s is taking a snapshot", job.Name)
	postEvent(r.Recorder, b, corev1.EventTypeNormal, "BackupStarted", "Backup", "started Job %s to snapshot EtcdCluster %s", job.Name, c.Name)
	return nil
}

func setBackupCondition(b *etcdv1alpha1.EtcdBackup, condType string, status metav1.ConditionStatus, reason, format string, args ...any) {
	setConditionAt(&b.Status.Conditions, b, condType, status, reason, format, args...)
}

// SetupWithManager registers the reconciler and what it watches. A backup waiting for its
// cluster to become Available starts as soon as it is.
func (r *EtcdBackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return setUpJobRunner(mgr, "etcdbackup", &etcdv1alpha1.EtcdBackup{}, r.backupsOfCluster, r, "")
}

func (r *EtcdBackupReconciler) backupsOfCluster(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &etcdv1alpha1.EtcdBackupList{}
	if err := r.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var requests []reconcile.Request
	for _, b := range list.Items {
		if b.Spec.ClusterName == obj.GetName() && b.Status.Phase != etcdv1alpha1.BackupCompleted && b.Status.Phase != etcdv1alpha1.BackupFailed {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&b)})
		}
	}
	return requests
}
