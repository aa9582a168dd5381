package controllers

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// materializing is a point-in-time restore whose snapshot is being built: the restore waits
// for it, touching nothing.
type materializing struct{ job string }

func (m *materializing) Error() string { return "Job " + m.job + " is building the snapshot" }

// resolvePointInTime is the snapshot of a point-in-time restore: the one its Job built, once
// it has. Until then it starts that Job and answers materializing. The Job alone reads the
// archive: it picks the newest snapshot at or before the target of the EtcdBackup's series,
// replays the archive onto it in a scratch etcd, and saves the result beside the backup's
// snapshots; what follows is an ordinary restore of that snapshot.
func (r *EtcdRestoreReconciler) resolvePointInTime(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, pit *etcdv1alpha1.PointInTimeSource) (snapshotSource, error) {
	var src snapshotSource
	backup := &etcdv1alpha1.EtcdBackup{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: pit.Backup}, backup); err != nil {
		if apierrors.IsNotFound(err) {
			return src, &sourceNotYet{fmt.Sprintf("EtcdBackup %s does not exist in namespace %s", pit.Backup, rs.Namespace)}
		}
		return src, err
	}
	if backup.Spec.Continuous == nil && backup.Status.Archive == nil {
		return src, failed(etcdv1alpha1.ReasonPointNotRecoverable,
			"EtcdBackup %s archives no changes (spec.continuous is not set): restore one of its snapshots with source.backup instead", pit.Backup)
	}
	built := rs.Status.PointInTime
	if built == nil {
		if problem := pointOutsideArchive(backup.Status.Archive, pit); problem != "" {
			return src, failed(etcdv1alpha1.ReasonPointNotRecoverable, "%s; nothing was restored", problem)
		}
		if problem := pointNeverServed(backup.Status.Archive, pit, rs.CreationTimestamp.Time); problem != "" {
			return src, failed(etcdv1alpha1.ReasonPointNotRecoverable, "%s; nothing was restored", problem)
		}
		if why := pointNotArchivedYet(backup.Status.Archive, pit); why != "" {
			return src, &sourceNotYet{why}
		}
	}
	if built == nil || built.Revision == 0 || rs.Status.SnapshotSHA256 == "" {
		return src, r.materialize(ctx, rs, backup, pit)
	}
	base := agent.LocationURIBase(backup.Spec.Destination)
	key, ok := strings.CutPrefix(rs.Status.SnapshotURI, base)
	if !ok {
		return src, failed(etcdv1alpha1.ReasonSourceNotFound, "the built snapshot %s is not under EtcdBackup %s's destination %s", rs.Status.SnapshotURI, pit.Backup, base)
	}
	src.Storage, src.Key, src.SHA256, src.uri = backup.Spec.Destination, key, rs.Status.SnapshotSHA256, rs.Status.SnapshotURI
	// The built snapshot is in the series' pitr/ directory; the watermarks, in the series'.
	src.WatermarkDir = path.Dir(path.Dir(key)) + "/"
	src.backup, src.cluster, src.revision = backup.Name, backup.Spec.ClusterName, built.Revision
	// The archive's watermark: no client of the source saw a revision past it, nor past what
	// the operator saw; the bump reaches past both (revisionBump).
	if a := backup.Status.Archive; a != nil {
		src.highestArchived = a.HighestRevision
	}
	if baseArtifact := artifactByURI(backup, built.BaseURI); baseArtifact != nil {
		src.etcdVersion = baseArtifact.EtcdVersion
		src.largestBytes = baseArtifact.SizeBytes
		if authOn(baseArtifact) {
			src.withAuth = baseArtifact
		}
	}
	if backup.Spec.Encryption != nil {
		src.Encryption = backup.Spec.Encryption
		if rs.Spec.Source.Encryption != nil {
			src.Encryption = rs.Spec.Source.Encryption
		}
	}
	return src, nil
}

// pointOutsideArchive says why the target cannot be restored by what status.archive last
// said, or "". Only a revision is checked here (a time is resolved by the Job, from the
// archive itself); with no report yet, the Job finds out.
func pointOutsideArchive(a *etcdv1alpha1.BackupArchiveStatus, pit *etcdv1alpha1.PointInTimeSource) string {
	if a == nil || pit.Revision == nil || a.RecoverableRange == nil {
		return ""
	}
	target := *pit.Revision
	if pit.Inclusive != nil && !*pit.Inclusive {
		target--
	}
	ranges := append(slices.Clone(a.EarlierRanges), *a.RecoverableRange)
	for _, rg := range ranges {
		if target >= rg.First.Revision && target <= rg.Last.Revision {
			return ""
		}
	}
	if target > a.RecoverableRange.Last.Revision {
		return "" // not archived yet: pointNotArchivedYet
	}
	return fmt.Sprintf("revision %d lies in no recoverable range of the archive (%s)", target, describeRanges(ranges))
}

// pointNeverServed says why a target revision is past any the cluster has served, or "": the
// archiver reported, after the restore was made, a highest revision below it. Waiting for the
// archive to reach it would wait for writes no one may make.
func pointNeverServed(a *etcdv1alpha1.BackupArchiveStatus, pit *etcdv1alpha1.PointInTimeSource, asked time.Time) string {
	if a == nil || pit.Revision == nil || a.ObservedTime == nil || a.ObservedTime.Time.Before(asked) || a.HighestRevision == 0 {
		return ""
	}
	if *pit.Revision > a.HighestRevision {
		return fmt.Sprintf("revision %d is past the highest the cluster had served, %d, when the archiver last reported (%s)",
			*pit.Revision, a.HighestRevision, a.ObservedTime.UTC().Format(time.RFC3339))
	}
	return ""
}

// pointNotArchivedYet says why the archive does not hold the target yet, by what the
// archiver last reported, or "": a revision past the newest written, or a time past the
// newest revision's while revisions received before it may still wait in the archiver. The
// restore waits for it (a point just after a mistake is asked for seconds after it) rather
// than have its Job refuse it.
func pointNotArchivedYet(a *etcdv1alpha1.BackupArchiveStatus, pit *etcdv1alpha1.PointInTimeSource) string {
	if a == nil || a.RecoverableRange == nil {
		return "the archive has no recoverable range yet"
	}
	last := a.RecoverableRange.Last
	if pit.Revision != nil {
		if *pit.Revision > last.Revision {
			return fmt.Sprintf("the archive holds revisions up to %d so far, not yet %d", last.Revision, *pit.Revision)
		}
		return ""
	}
	at := pit.Time.Time
	caughtUp := a.ObservedTime != nil && !a.ObservedTime.Time.Before(at) && a.LagRevisions == 0
	if at.After(last.Time.Time) && !caughtUp {
		return fmt.Sprintf("the archive holds revisions received up to %s so far, not yet all received by %s",
			last.Time.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
	}
	return ""
}

func describeRanges(ranges []etcdv1alpha1.ArchiveRange) string {
	var parts []string
	for _, rg := range ranges {
		parts = append(parts, fmt.Sprintf("%d to %d", rg.First.Revision, rg.Last.Revision))
	}
	return "recoverable: " + strings.Join(parts, ", ")
}

// artifactByURI is the backup's recorded snapshot of that URI, if status still holds it.
func artifactByURI(b *etcdv1alpha1.EtcdBackup, uri string) *etcdv1alpha1.BackupArtifact {
	if a := b.Status.LastBackup; a != nil && a.URI == uri {
		return a
	}
	for i := range b.Status.History {
		if a := b.Status.History[i].Artifact; a != nil && a.URI == uri {
			return a
		}
	}
	return nil
}

// failedVerificationKeys are the backup's snapshots that failed verification: never a base.
func failedVerificationKeys(b *etcdv1alpha1.EtcdBackup) []string {
	var keys []string
	for _, run := range b.Status.History {
		if a := run.Artifact; failedVerification(a) {
			if key, ok := snapshotKey(b.Spec.Destination, a.URI); ok {
				keys = append(keys, key)
			}
		}
	}
	return keys
}

// materialize starts the Job that builds the snapshot of the point, or reads its outcome.
// The Job's name comes from the restore's, so a lost status write cannot start a second.
func (r *EtcdRestoreReconciler) materialize(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, backup *etcdv1alpha1.EtcdBackup, pit *etcdv1alpha1.PointInTimeSource) error {
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: resources.PointInTimeJobName(rs.Name)}, job)
	if apierrors.IsNotFound(err) {
		return r.startMaterializing(ctx, rs, backup, pit)
	}
	if err != nil {
		return err
	}
	succeeded, finished := jobOutcome(job)
	if !finished {
		// A scratch member that keeps exiting keeps its pod from starting too: said first, in
		// its own words.
		if why, err := r.scratchMemberExits(ctx, job, targetVersion(rs)); err != nil || why != "" {
			if err != nil {
				return err
			}
			return failed(etcdv1alpha1.ReasonFailed, "Job %s could not build the snapshot of the point: %s; nothing was restored", job.Name, why)
		}
		notStarting, _, err := jobNotStarting(ctx, r.Client, job, r.Now())
		if err != nil {
			return err
		}
		if notStarting != "" {
			return failed(etcdv1alpha1.ReasonJobNotStarting, "Job %s, which builds the snapshot of the point, did not start: %s; nothing was restored", job.Name, notStarting)
		}
		return &materializing{job: job.Name}
	}
	report, found, err := agentReport(ctx, r.Client, job, resources.PointInTimeReplayContainer)
	if err != nil {
		return err
	}
	if !succeeded || !found || report.PointInTime == nil {
		return r.materializeFailed(ctx, job, succeeded)
	}
	built := report.PointInTime
	rs.Status.PointInTime = &etcdv1alpha1.PointInTimeStatus{
		Revision: built.Revision, BaseURI: agent.LocationURIBase(backup.Spec.Destination) + built.BaseKey, BaseRevision: built.BaseRevision,
		Lineage: built.Lineage, ReplayedRevisions: built.ReplayedRevisions, Job: job.Name,
	}
	rs.Status.SnapshotURI = agent.LocationURIBase(backup.Spec.Destination) + built.Key
	rs.Status.SnapshotSHA256 = built.SHA256
	postEvent(r.Recorder, rs, corev1.EventTypeNormal, "PointBuilt", "Restore",
		"built the keyspace at revision %d: snapshot at revision %d with %d revisions of the archive replayed, saved as %s",
		built.Revision, built.BaseRevision, built.ReplayedRevisions, rs.Status.SnapshotURI)
	return &materializing{job: job.Name} // once status holds it, the next reconcile restores it
}

// scratchMemberExits says why the Job cannot build the point once its scratch member (the etcd
// serving the base) has exited again and again, as a verify Job's restored member: the replay
// would otherwise wait for it for ever. An etcd older than the one that wrote the base cannot
// read it: that is said in words.
func (r *EtcdRestoreReconciler) scratchMemberExits(ctx context.Context, job *batchv1.Job, version string) (string, error) {
	pods, err := jobPods(ctx, r.Client, job)
	if err != nil {
		return "", err
	}
	why, _ := restoredMemberExits(pods)
	if why != "" && strings.Contains(why, "is not supported") {
		why += fmt.Sprintf("; the snapshot the point starts from was written by a newer etcd than %s, the target's version: restore into a cluster of the version the source ran at that point, or newer", version)
	}
	return why, nil
}

// targetVersion is the version of etcd the restored cluster will run, as the restore says.
func targetVersion(rs *etcdv1alpha1.EtcdRestore) string {
	if c := rs.Spec.Target.Cluster; c != nil {
		return c.Version
	}
	return "the target cluster's"
}

// pointInTimeContainers are a point-in-time Job's containers, in the order they run.
var pointInTimeContainers = []string{resources.PointInTimeFetchContainer, resources.PointInTimeEtcdutlContainer,
	resources.PointInTimeEtcdContainer, resources.PointInTimeReplayContainer}

// materializeFailed fails the restore with what the Job found, from the first of its
// containers that failed: a point the archive cannot reach (the agent's permanent refusal: a
// gap, a point before every snapshot or past the archive) is PointNotRecoverable, anything else
// Failed. Nothing was restored either way.
func (r *EtcdRestoreReconciler) materializeFailed(ctx context.Context, job *batchv1.Job, succeeded bool) error {
	terminated, err := lastPodTerminations(ctx, r.Client, job)
	if err != nil {
		return err
	}
	for _, name := range pointInTimeContainers {
		t, ok := terminated[name]
		if !ok || t.ExitCode == 0 {
			continue
		}
		report, err := agent.DecodeReport(t.Message)
		if err != nil || report.Error == "" {
			return failed(etcdv1alpha1.ReasonFailed, "Job %s could not build the snapshot of the point: %s exited %d: %s; nothing was restored",
				job.Name, name, t.ExitCode, strings.TrimSpace(t.Message))
		}
		reason := etcdv1alpha1.ReasonFailed
		if report.Permanent {
			reason = etcdv1alpha1.ReasonPointNotRecoverable
		}
		return failed(reason, "Job %s could not build the snapshot of the point: %s; nothing was restored", job.Name, report.Error)
	}
	return failed(etcdv1alpha1.ReasonFailed, "Job %s could not build the snapshot of the point: %s; nothing was restored",
		job.Name, failureMessage(job, succeeded, agent.Report{}))
}

// startMaterializing creates the Job that builds the snapshot of the point, with the etcd
// version the restored cluster will run (its replay writes the data that cluster reads).
func (r *EtcdRestoreReconciler) startMaterializing(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, backup *etcdv1alpha1.EtcdBackup, pit *etcdv1alpha1.PointInTimeSource) error {
	target, err := r.pointInTimeCluster(ctx, rs)
	if err != nil {
		return err
	}
	if rs.Spec.Source.Encryption != nil {
		// The keys given for this restore decrypt the archive, and encrypt what is built.
		backup = backup.DeepCopy()
		backup.Spec.Encryption = rs.Spec.Source.Encryption
	}
	revision, at := pointTarget(pit)
	job, err := resources.PointInTimeJob(backup, target, resources.PointInTime{
		Restore: rs.Name, RestoreUID: string(rs.UID), Revision: revision, Time: at,
		ExcludeKeys: failedVerificationKeys(backup), Recorded: recordedSnapshots(backup),
	}, r.AgentImage, r.DefaultImages, r.Pods)
	if err != nil {
		return failed(etcdv1alpha1.ReasonInvalidSpec, "%v", err)
	}
	if err := controllerutil.SetControllerReference(rs, job, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Job %s: %w", job.Name, err)
	}
	postEvent(r.Recorder, rs, corev1.EventTypeNormal, "BuildingPoint", "Restore",
		"started Job %s to build the keyspace at %s from EtcdBackup %s's snapshots and archive", job.Name, describePoint(pit), backup.Name)
	return &materializing{job: job.Name}
}

// pointInTimeCluster is the cluster whose etcd version builds the snapshot: the target, as it
// is (InPlace) or as it will be made (New).
func (r *EtcdRestoreReconciler) pointInTimeCluster(ctx context.Context, rs *etcdv1alpha1.EtcdRestore) (*etcdv1alpha1.EtcdCluster, error) {
	if spec := rs.Spec.Target.Cluster; spec != nil {
		return &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: rs.Spec.Target.ClusterName, Namespace: rs.Namespace}, Spec: *spec}, nil
	}
	c := &etcdv1alpha1.EtcdCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Spec.Target.ClusterName}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, failed(etcdv1alpha1.ReasonTargetNotFound, "EtcdCluster %s does not exist; nothing was restored", rs.Spec.Target.ClusterName)
		}
		return nil, err
	}
	return c, nil
}

// pointTarget is the revision, or the time, the Job builds the keyspace at: with inclusive
// false, the revision before, or the last revision received strictly before the time.
func pointTarget(pit *etcdv1alpha1.PointInTimeSource) (int64, *time.Time) {
	inclusive := pit.Inclusive == nil || *pit.Inclusive
	if pit.Revision != nil {
		if inclusive {
			return *pit.Revision, nil
		}
		return *pit.Revision - 1, nil
	}
	at := pit.Time.Time
	if !inclusive {
		at = at.Add(-time.Nanosecond)
	}
	return 0, &at
}

// recordedSnapshots are the snapshots the backup's status records: the Job checks a base
// against its recorded sha256.
func recordedSnapshots(b *etcdv1alpha1.EtcdBackup) []jobspec.Snapshot {
	var out []jobspec.Snapshot
	add := func(a *etcdv1alpha1.BackupArtifact) {
		if a == nil {
			return
		}
		if key, ok := snapshotKey(b.Spec.Destination, a.URI); ok && !slices.ContainsFunc(out, func(s jobspec.Snapshot) bool { return s.Key == key }) {
			out = append(out, jobspec.Snapshot{Key: key, SHA256: a.SHA256, Revision: a.Revision})
		}
	}
	add(b.Status.LastBackup)
	for _, run := range b.Status.History {
		add(run.Artifact)
	}
	return out
}

func describePoint(pit *etcdv1alpha1.PointInTimeSource) string {
	before := ""
	if pit.Inclusive != nil && !*pit.Inclusive {
		before = "just before "
	}
	if pit.Revision != nil {
		return fmt.Sprintf("%srevision %d", before, *pit.Revision)
	}
	return before + pit.Time.UTC().Format(time.RFC3339Nano)
}

// waitForPoint keeps the restore Pending while its snapshot is built.
func (r *EtcdRestoreReconciler) waitForPoint(rs *etcdv1alpha1.EtcdRestore, m *materializing) time.Duration {
	setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonMaterializing,
		"%s of the keyspace at %s; the restore starts from it once it is saved", m.Error(), describePoint(rs.Spec.Source.PointInTime))
	return 5 * time.Second
}
