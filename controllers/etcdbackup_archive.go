package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;delete

// archivePoll is how often the operator reads the archiver's report: the resolution of
// status.archive's lag, and of the Archiving condition.
const archivePoll = 15 * time.Second

// ArchiverReports reads what an archiver pod reports of its archive.
type ArchiverReports interface {
	Report(ctx context.Context, pod *corev1.Pod) (agent.ArchiveStatus, error)
}

// archiverHTTP reads the archiver's report from its status port, on the pod's IP: the only
// thing that talks to it.
type archiverHTTP struct{}

func (archiverHTTP) Report(ctx context.Context, pod *corev1.Pod) (agent.ArchiveStatus, error) {
	var report agent.ArchiveStatus
	if pod.Status.PodIP == "" {
		return report, fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(resources.ArchiverStatusPort)) + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return report, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return report, fmt.Errorf("read the report of archiver pod %s: %w", pod.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return report, fmt.Errorf("archiver pod %s answered %s", pod.Name, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&report); err != nil {
		return report, fmt.Errorf("archiver pod %s sent an unreadable report: %w", pod.Name, err)
	}
	return report, nil
}

// reconcileArchive keeps the archiver of a backup with spec.continuous running (stopped while
// the backup is suspended or its cluster is being restored in place), and reports what it
// last said in status.archive and the Archiving condition. It returns how soon to read the
// report again.
func (r *EtcdBackupReconciler) reconcileArchive(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (time.Duration, error) {
	if b.Spec.Continuous == nil {
		// The archive already written stays restorable: status.archive stays as a record.
		meta.RemoveStatusCondition(&b.Status.Conditions, etcdv1alpha1.ConditionArchiving)
		return 0, r.removeArchiver(ctx, b)
	}
	cluster := &etcdv1alpha1.EtcdCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, cluster); err != nil {
		if !apierrors.IsNotFound(err) {
			return 0, err
		}
		setBackupCondition(b, etcdv1alpha1.ConditionArchiving, metav1.ConditionFalse, etcdv1alpha1.ReasonClusterNotFound,
			"EtcdCluster %s does not exist in namespace %s: nothing to archive", b.Spec.ClusterName, b.Namespace)
		return notReadyRetry, r.removeArchiver(ctx, b)
	}
	mark, restoring, err := r.restoreMark(ctx, cluster)
	if err != nil {
		return 0, err
	}
	running := !b.Spec.Suspend && !restoring
	if err := r.applyArchiver(ctx, b, cluster, mark, running); err != nil {
		return 0, err
	}
	if !running {
		why := "spec.suspend is set"
		if restoring {
			why = fmt.Sprintf("EtcdCluster %s is being restored in place; the archive starts again from a snapshot of the restored data", cluster.Name)
		}
		setBackupCondition(b, etcdv1alpha1.ConditionArchiving, metav1.ConditionFalse, etcdv1alpha1.ReasonSuspended, "the archiver is stopped: %s", why)
		return archivePoll, nil
	}
	r.readArchiverReport(ctx, b)
	return archivePoll, nil
}

// restoreMark tells the archiver which history of the cluster it follows: the name of the
// newest in-place EtcdRestore completed over it. A restore in place replaces the cluster's
// history; an archiver whose mark differs from the one a lineage was started with never
// writes into that lineage. restoring is whether an in-place restore of it is under way: no
// archiver may follow a cluster whose data is being replaced.
func (r *EtcdBackupReconciler) restoreMark(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (mark string, restoring bool, err error) {
	list := &etcdv1alpha1.EtcdRestoreList{}
	if err := r.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		return "", false, fmt.Errorf("list EtcdRestores: %w", err)
	}
	var newest *etcdv1alpha1.EtcdRestore
	for i := range list.Items {
		rs := &list.Items[i]
		if rs.Spec.Target.Mode != etcdv1alpha1.RestoreInPlace || rs.Spec.Target.ClusterName != c.Name || rs.Status.InstallTime == nil {
			continue
		}
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted && rs.Status.Phase != etcdv1alpha1.RestoreFailed {
			restoring = true
		}
		if newest == nil || rs.Status.InstallTime.After(newest.Status.InstallTime.Time) {
			newest = rs
		}
	}
	if newest != nil {
		mark = newest.Name + "@" + newest.Status.InstallTime.UTC().Format(time.RFC3339)
	}
	return mark, restoring || c.Annotations[resources.AnnotationRestorePending] != "", nil
}

// applyArchiver creates the archiver's Deployment, or updates it to what it should be: one
// replica while archiving, none while stopped. Recreate, never two pods: two archivers would
// write one lineage.
func (r *EtcdBackupReconciler) applyArchiver(ctx context.Context, b *etcdv1alpha1.EtcdBackup, c *etcdv1alpha1.EtcdCluster, mark string, running bool) error {
	duration, maxBytes := archiveSegments(b.Spec.Continuous)
	want, err := resources.ArchiverDeployment(b, c, r.AgentImage, duration, maxBytes, mark, r.Pods)
	if err != nil {
		return err
	}
	if !running {
		want.Spec.Replicas = new(int32)
	}
	if err := controllerutil.SetControllerReference(b, want, r.Scheme()); err != nil {
		return err
	}
	have := &appsv1.Deployment{}
	err = r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		postEvent(r.Recorder, b, corev1.EventTypeNormal, "ArchiverStarted", "Archive", "started the archiver, Deployment %s", want.Name)
		return r.Create(ctx, want)
	}
	if err != nil {
		return err
	}
	if equality.Semantic.DeepDerivative(want.Spec, have.Spec) && equality.Semantic.DeepEqual(want.Labels, have.Labels) {
		return nil
	}
	have.Spec, have.Labels = want.Spec, want.Labels
	return r.Update(ctx, have)
}

// The API server's defaults of spec.continuous, for an object written without them.
const (
	defaultSegmentDuration = time.Minute
	defaultSegmentMaxBytes = 16 << 20
	defaultMaxLag          = 5 * time.Minute
)

// archiveSegments is how the archiver closes segments: spec.continuous, or its defaults.
func archiveSegments(c *etcdv1alpha1.ContinuousArchive) (time.Duration, int64) {
	duration, maxBytes := defaultSegmentDuration, int64(defaultSegmentMaxBytes)
	if c.SegmentDuration != nil {
		duration = c.SegmentDuration.Duration
	}
	if c.SegmentMaxBytes > 0 {
		maxBytes = c.SegmentMaxBytes
	}
	return duration, maxBytes
}

// removeArchiver deletes the archiver's Deployment, if there is one.
func (r *EtcdBackupReconciler) removeArchiver(ctx context.Context, b *etcdv1alpha1.EtcdBackup) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: resources.ArchiverName(b.Name)}}
	if err := r.Delete(ctx, d); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete the archiver %s: %w", d.Name, err)
	}
	return nil
}

// readArchiverReport reads the report of the archiver's ready pod into status.archive and the
// Archiving condition.
func (r *EtcdBackupReconciler) readArchiverReport(ctx context.Context, b *etcdv1alpha1.EtcdBackup) {
	pod, err := r.archiverPod(ctx, b)
	if err != nil || pod == nil {
		setBackupCondition(b, etcdv1alpha1.ConditionArchiving, metav1.ConditionUnknown, etcdv1alpha1.ReasonArchiverStarting,
			"the archiver's pod is not ready yet; `kubectl describe deployment %s` says why", resources.ArchiverName(b.Name))
		return
	}
	report, err := r.archiverReports().Report(ctx, pod)
	if err != nil {
		setBackupCondition(b, etcdv1alpha1.ConditionArchiving, metav1.ConditionFalse, etcdv1alpha1.ReasonArchiverNotReporting, "%v", err)
		return
	}
	before := b.Status.Archive.DeepCopy()
	b.Status.Archive = archiveStatus(report, r.Now())
	b.Status.Archive.Gaps = keptGaps(before, b.Status.Archive.Gaps)
	keepObservedTime(before, b.Status.Archive)
	r.reportArchiving(b, before)
}

// observedTimeRefresh is how often an archive whose report has not changed has its observed
// time written again: the one status write of an idle archive. A point-in-time restore to a
// time past the newest revision of a quiet cluster waits for it.
const observedTimeRefresh = 5 * time.Minute

// keepObservedTime keeps the observed time of an unchanged report until it is
// observedTimeRefresh old, so that a quiet archive is not a status write every poll.
func keepObservedTime(before, now *etcdv1alpha1.BackupArchiveStatus) {
	if before == nil || before.ObservedTime == nil || now.ObservedTime.Sub(before.ObservedTime.Time) >= observedTimeRefresh {
		return
	}
	observed := now.ObservedTime
	now.ObservedTime = before.ObservedTime
	if !equality.Semantic.DeepEqual(before, now) {
		now.ObservedTime = observed
	}
}

func (r *EtcdBackupReconciler) archiverReports() ArchiverReports {
	if r.ArchiverReports != nil {
		return r.ArchiverReports
	}
	return archiverHTTP{}
}

// archiverPod is the archiver's ready pod, if any.
func (r *EtcdBackupReconciler) archiverPod(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.List(ctx, list, client.InNamespace(b.Namespace), client.MatchingLabels(resources.ArchiverSelector(b.Name))); err != nil {
		return nil, fmt.Errorf("list the archiver's pods: %w", err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; podReady(p) {
			return p, nil
		}
	}
	return nil, nil
}

// archiveStatus is status.archive as the archiver's report says.
func archiveStatus(report agent.ArchiveStatus, now time.Time) *etcdv1alpha1.BackupArchiveStatus {
	out := &etcdv1alpha1.BackupArchiveStatus{
		HighestRevision: report.HighestRevision, LagRevisions: report.LagRevisions, LagSeconds: report.LagSeconds,
		Message: report.Error, ObservedTime: ptrTime(now),
	}
	for i, rg := range report.Ranges {
		r := etcdv1alpha1.ArchiveRange{
			Lineage: rg.Lineage,
			First:   etcdv1alpha1.ArchivePoint{Revision: rg.First.Revision, Time: metav1.NewTime(rg.First.Time)},
			Last:    etcdv1alpha1.ArchivePoint{Revision: rg.Last.Revision, Time: metav1.NewTime(rg.Last.Time)},
		}
		if i == len(report.Ranges)-1 && rg.Lineage == report.Lineage {
			out.RecoverableRange = &r
		} else {
			out.EarlierRanges = append(out.EarlierRanges, r)
		}
	}
	if n := len(out.EarlierRanges); n > 20 {
		out.EarlierRanges = out.EarlierRanges[n-20:]
	}
	for _, g := range report.Gaps {
		out.Gaps = append(out.Gaps, etcdv1alpha1.ArchiveGap{AfterRevision: g.AfterRevision, ResumedAt: g.ResumedAt, Reason: g.Reason, Time: metav1.NewTime(g.Time)})
	}
	return out
}

// maxGaps is how many gaps status.archive keeps.
const maxGaps = 10

// keptGaps are the gaps status held before, then those of the report it did not, the newest
// maxGaps: an archiver remembers only the gaps it found itself, since it last started.
func keptGaps(before *etcdv1alpha1.BackupArchiveStatus, reported []etcdv1alpha1.ArchiveGap) []etcdv1alpha1.ArchiveGap {
	var gaps []etcdv1alpha1.ArchiveGap
	if before != nil {
		gaps = slices.Clone(before.Gaps)
	}
	for _, g := range reported {
		if !slices.ContainsFunc(gaps, func(h etcdv1alpha1.ArchiveGap) bool { return sameGap(g, h) }) {
			gaps = append(gaps, g)
		}
	}
	if n := len(gaps); n > maxGaps {
		gaps = gaps[n-maxGaps:]
	}
	return gaps
}

func sameGap(a, b etcdv1alpha1.ArchiveGap) bool {
	return a.AfterRevision == b.AfterRevision && a.ResumedAt == b.ResumedAt
}

// reportArchiving sets the Archiving condition from status.archive, with a Warning event when
// the lag goes past continuous.maxLag and for each gap not reported before.
func (r *EtcdBackupReconciler) reportArchiving(b *etcdv1alpha1.EtcdBackup, before *etcdv1alpha1.BackupArchiveStatus) {
	a := b.Status.Archive
	if newest := newGap(before, a); newest != nil {
		postEvent(r.Recorder, b, corev1.EventTypeWarning, etcdv1alpha1.ReasonArchiveGap, "Archive",
			"the archive broke after revision %d (%s) and started again from a snapshot at revision %d: revisions between cannot be restored to a point",
			newest.AfterRevision, newest.Reason, newest.ResumedAt)
	}
	maxLag := defaultMaxLag
	if b.Spec.Continuous.MaxLag != nil {
		maxLag = b.Spec.Continuous.MaxLag.Duration
	}
	lag := time.Duration(a.LagSeconds) * time.Second
	wasExceeded := meta.IsStatusConditionPresentAndEqual(b.Status.Conditions, etcdv1alpha1.ConditionArchiving, metav1.ConditionFalse) &&
		meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionArchiving).Reason == etcdv1alpha1.ReasonLagExceeded
	switch {
	case lag > maxLag:
		setBackupCondition(b, etcdv1alpha1.ConditionArchiving, metav1.ConditionFalse, etcdv1alpha1.ReasonLagExceeded,
			"the oldest revision not yet written has waited %s, more than continuous.maxLag %s (%d revisions behind)%s", lag, maxLag, a.LagRevisions, archiverSays(a))
		if !wasExceeded {
			postEvent(r.Recorder, b, corev1.EventTypeWarning, etcdv1alpha1.ReasonLagExceeded, "Archive",
				"the archive is %s behind the cluster, more than continuous.maxLag %s by %s%s", lag, maxLag, lag-maxLag, archiverSays(a))
		}
	case a.RecoverableRange == nil:
		setBackupCondition(b, etcdv1alpha1.ConditionArchiving, metav1.ConditionUnknown, etcdv1alpha1.ReasonArchiverStarting,
			"the archiver has written no segment yet%s", archiverSays(a))
	default:
		setBackupCondition(b, etcdv1alpha1.ConditionArchiving, metav1.ConditionTrue, etcdv1alpha1.ReasonArchiving,
			"revisions %d to %d are recoverable, %ds behind the cluster%s", a.RecoverableRange.First.Revision, a.RecoverableRange.Last.Revision, a.LagSeconds, archiverSays(a))
	}
}

func archiverSays(a *etcdv1alpha1.BackupArchiveStatus) string {
	if a.Message == "" {
		return ""
	}
	return "; the archiver's last error: " + a.Message
}

// newGap is the newest gap of now that before did not hold, if any.
func newGap(before, now *etcdv1alpha1.BackupArchiveStatus) *etcdv1alpha1.ArchiveGap {
	if len(now.Gaps) == 0 {
		return nil
	}
	newest := now.Gaps[len(now.Gaps)-1]
	if before != nil && slices.ContainsFunc(before.Gaps, func(g etcdv1alpha1.ArchiveGap) bool { return sameGap(g, newest) }) {
		return nil
	}
	return &newest
}
