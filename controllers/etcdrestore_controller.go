package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/metrics"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/internal/restoreplan"
)

// EtcdRestoreReconciler restores snapshots into new EtcdClusters, or in place into existing
// ones (etcdrestore_inplace.go). Into a new cluster, it creates the cluster held back from
// forming, prepares every first member's data from the same snapshot with a Job each (the agent
// fetches and checks the snapshot, the target etcd image's etcdutl restores it as that member
// of a cluster of them all), then lets the cluster form from them at once, as etcd's recovery
// guide restores a cluster. A snapshot on a claim is prepared for the seed member alone, and
// the cluster grows from it (preparesSeedAlone).
type EtcdRestoreReconciler struct {
	client.Client
	// APIReader reads what the cache does not hold: the user's Secrets a source names, and
	// claims staged for an in-place restore by an operator that did not yet label them as
	// its own.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// AgentImage is the operator's own image, which the restore Jobs run.
	AgentImage string
	// DefaultImages are the etcd images of clusters whose spec.repository is empty.
	DefaultImages resources.EtcdImages
	// Pods are what its install and platform give the pods it creates (OLM's proxy settings,
	// the platform's own pod IDs).
	Pods resources.PodSettings
	Now  func() time.Time
	// Keyspaces proves, before a restore completes, that every member serves the same
	// restored store.
	Keyspaces Keyspaces
	// ProbeAddresses finds whether anything answers at a member's addresses (etcd.FirstAnswer
	// when nil): a cluster one of whose members answers is never deleted as one that never
	// held data.
	ProbeAddresses func(ctx context.Context, addrs []string) string
}

// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdrestores,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdrestores/finalizers,verbs=update
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdrestores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdclusters,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update

// Reconcile carries an EtcdRestore one step further; a finished one is a record.
func (r *EtcdRestoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rs := &etcdv1alpha1.EtcdRestore{}
	if err := r.Get(ctx, req.NamespacedName, rs); err != nil {
		if client.IgnoreNotFound(err) == nil {
			metrics.Restores.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rs.DeletionTimestamp.IsZero() {
		metrics.Restores.Forget(req.NamespacedName)
		return r.finalize(ctx, rs)
	}
	defer metrics.Restores.Record(rs)
	if restoreFinished(rs) {
		return ctrl.Result{}, r.cleanUp(ctx, rs) // a record; what it set up goes
	}
	if added, err := r.ensureFinalizer(ctx, rs); err != nil || added {
		return ctrl.Result{}, err
	}
	before := rs.DeepCopy()
	if rs.Status.StartTime == nil {
		rs.Status.StartTime = ptrTime(r.Now())
		rs.Status.Phase = etcdv1alpha1.RestorePending
	}

	result, err := r.restore(ctx, rs)
	var failed *restoreFailure
	if errors.As(err, &failed) {
		r.fail(rs, failed)
		result, err = ctrl.Result{}, nil
	}
	// The story the events summarise, step by step: kubectl logs with LOG_LEVEL=debug.
	// Every step sets the Succeeded condition, whose reason and message say what it did.
	ctrl.LoggerFrom(ctx).V(1).WithValues(conditionSays(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded)...).
		Info("step", "action", rs.Status.Phase, "restore", rs.Name, "mode", rs.Spec.Target.Mode, "after", result.RequeueAfter)
	if err == nil {
		// Only a reconcile that did its work, or found the spec cannot be done, has acted on
		// this generation's spec.
		rs.Status.ObservedGeneration = rs.Generation
	}
	if err == nil && restoreFinished(rs) {
		// Record, then clean up: the outcome is in status before the Job, the hold on the
		// cluster or a staged claim go, so a lost write cannot start the restore again.
		if err := writeStatusNow(ctx, r.Client, rs, before, restoreStatus); err != nil {
			return ctrl.Result{}, err
		}
		// gofail: var restoreOutcomeRecorded struct{}
		return ctrl.Result{}, r.cleanUp(ctx, rs)
	}

	if patchErr := patchStatusIfChanged(ctx, r.Client, rs, before, restoreStatus); patchErr != nil && err == nil {
		err = patchErr
	}
	return result, err
}

func restoreFinished(rs *etcdv1alpha1.EtcdRestore) bool {
	return rs.Status.Phase == etcdv1alpha1.RestoreCompleted || rs.Status.Phase == etcdv1alpha1.RestoreFailed
}

// sourceWait is how long a restore waits for an EtcdBackup that does not exist yet, or has
// taken no snapshot yet (objects created together, as a console creates a bundle's examples;
// a restore set up before the schedule's first run), counted from the restore's start.
const sourceWait = time.Hour

// sourceNotYet is a source that may yet come: an EtcdBackup not made yet, or without a
// snapshot yet.
type sourceNotYet struct{ why string }

func (s *sourceNotYet) Error() string { return s.why }

// tookASnapshot says whether b has completed a snapshot, verified or not.
func tookASnapshot(b *etcdv1alpha1.EtcdBackup) bool {
	if b.Status.LastBackup != nil {
		return true
	}
	return slices.ContainsFunc(b.Status.History, func(run etcdv1alpha1.BackupRun) bool { return run.Artifact != nil })
}

// waitForSource keeps a restore Pending while its source may yet come, saying what it waits
// for and until when, and fails it with SourceNotFound once sourceWait has passed. Nothing is
// touched meanwhile, and the wait does not hold OLM upgrades back (restoreRunning).
func (r *EtcdRestoreReconciler) waitForSource(rs *etcdv1alpha1.EtcdRestore, notYet *sourceNotYet) (ctrl.Result, error) {
	deadline := rs.Status.StartTime.Add(sourceWait)
	if !r.Now().Before(deadline) {
		return ctrl.Result{}, failed(etcdv1alpha1.ReasonSourceNotFound, "%s after %s of waiting; nothing was restored", notYet.why, sourceWait)
	}
	setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonWaitingForSource,
		"%s; waiting for it until %s, then the restore fails", notYet.why, deadline.UTC().Format(time.RFC3339))
	// Looked at again: the restore is not woken by changes of an EtcdBackup.
	return ctrl.Result{RequeueAfter: min(30*time.Second, deadline.Sub(r.Now()))}, nil
}

// restoreFailure ends a restore: retrying cannot help.
type restoreFailure struct {
	reason, message string
}

func (f *restoreFailure) Error() string { return f.message }

func failed(reason, format string, args ...any) error {
	return &restoreFailure{reason: reason, message: fmt.Sprintf(format, args...)}
}

func (r *EtcdRestoreReconciler) restore(ctx context.Context, rs *etcdv1alpha1.EtcdRestore) (ctrl.Result, error) {
	src, err := r.resolveSource(ctx, rs)
	var notYet *sourceNotYet
	if errors.As(err, &notYet) {
		return r.waitForSource(rs, notYet)
	}
	var building *materializing
	if errors.As(err, &building) {
		return ctrl.Result{RequeueAfter: r.waitForPoint(rs, building)}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if rs.Status.RestoredRevision == nil {
		// Until the restore Job reports the snapshot it fetched, which may be a fallback.
		rs.Status.SnapshotURI, rs.Status.SnapshotSHA256 = src.uri, src.SHA256
	}
	if rs.Spec.Target.Mode == etcdv1alpha1.RestoreInPlace {
		return r.restoreInPlace(ctx, rs, src)
	}

	cluster := &etcdv1alpha1.EtcdCluster{}
	err = r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Spec.Target.ClusterName}, cluster)
	switch {
	case apierrors.IsNotFound(err):
		created, err := r.createTarget(ctx, rs, src)
		if err != nil || created == nil {
			return ctrl.Result{}, err
		}
		// On at once: the members' claims need only the cluster's UID, which the create
		// returned, and a reconcile more would cost the restore the time to be woken again.
		return r.prepareMembers(ctx, rs, created, src)
	case err != nil:
		return ctrl.Result{}, err
	case cluster.Annotations[resources.AnnotationRestoredBy] != rs.Name:
		return ctrl.Result{}, failed(etcdv1alpha1.ReasonTargetExists,
			"EtcdCluster %s already exists; a restore in mode New creates its cluster and never touches an existing one", cluster.Name)
	case cluster.Annotations[resources.AnnotationRestorePending] != "":
		return r.prepareMembers(ctx, rs, cluster, src)
	default:
		return r.awaitAvailable(ctx, rs, cluster)
	}
}

// snapshotSource is the snapshot to restore, resolved from an EtcdBackup or given directly.
// One from an EtcdBackup falls back, should it no longer exist, to the newest older snapshot
// the EtcdBackup's status names that does. Retention never deletes status.lastBackup, and a
// run's record takes out of the history the snapshots retention deleted, but a person or a
// bucket's lifecycle rule may delete any. The restore Job, which alone can read the
// destination, tries them in turn (Fallbacks), and its report says which it restored.
type snapshotSource struct {
	resources.RestoreSource
	uri string
	// backup is the EtcdBackup the snapshot was resolved from, if any.
	backup string
	// etcdVersion the snapshot was taken with, when a backup recorded it.
	etcdVersion string
	// cluster the snapshot was taken of, when a backup says: the EtcdCluster of the same
	// namespace its spec.clusterName names.
	cluster string
	// revision of the snapshot, when a backup recorded it: of the oldest of the snapshots the
	// Job may fall back to, as a revision bump must reach past the highest revision seen from
	// whichever it restores.
	revision int64
	// withAuth is the first of the snapshots the Job may restore (the one asked for, then its
	// fallbacks) that a backup recorded as taken with authentication on, if any.
	withAuth *etcdv1alpha1.BackupArtifact
	// largestBytes is the size of the largest of the snapshots the Job may restore, when
	// backups recorded it: what the members' claims must have room to restore.
	largestBytes int64
	// highestArchived is the highest revision the source cluster served, as its continuous
	// archive last recorded it: a point-in-time restore bumps past it too.
	highestArchived int64
}

// storageTooSmall says why claims of size cannot hold the restore of src, or "". Only the size
// a backup recorded is known here; the restore Job checks the volume as mounted.
func storageTooSmall(src snapshotSource, size resource.Quantity) string {
	if src.largestBytes == 0 {
		return ""
	}
	needs := jobspec.RestoreNeedsBytes(src.largestBytes)
	if size.Value() >= needs {
		return ""
	}
	return fmt.Sprintf("the snapshot is %d bytes and restoring it needs %d on each member's claim (the snapshot staged, the database restored beside it and etcd's first WAL segment); the claims would be %s",
		src.largestBytes, needs, size.String())
}

func (r *EtcdRestoreReconciler) resolveSource(ctx context.Context, rs *etcdv1alpha1.EtcdRestore) (snapshotSource, error) {
	var src snapshotSource
	// The key the snapshot is encrypted to, when its EtcdBackup recorded it; a snapshot at a
	// location is checked by the restore Job, which reads it.
	var keyID string
	src.Encryption = rs.Spec.Source.Encryption
	if pit := rs.Spec.Source.PointInTime; pit != nil {
		var err error
		if src, err = r.resolvePointInTime(ctx, rs, pit); err != nil {
			return src, err
		}
	} else if loc := rs.Spec.Source.Location; loc != nil {
		src.Storage, src.Key, src.SHA256 = loc.StorageLocation, loc.Key, loc.SHA256
		src.uri = agent.LocationURIBase(loc.StorageLocation) + loc.Key
	} else {
		ref := rs.Spec.Source.Backup
		backup := &etcdv1alpha1.EtcdBackup{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: ref.Name}, backup); err != nil {
			if apierrors.IsNotFound(err) {
				return src, &sourceNotYet{fmt.Sprintf("EtcdBackup %s does not exist in namespace %s", ref.Name, rs.Namespace)}
			}
			return src, err
		}
		if ref.URI == "" && !tookASnapshot(backup) {
			return src, &sourceNotYet{fmt.Sprintf("EtcdBackup %s has taken no snapshot yet", ref.Name)}
		}
		artifact := chooseArtifact(backup, ref.URI)
		if failedVerification(artifact) {
			return src, failed(etcdv1alpha1.ReasonSnapshotFailedVerification, "snapshot %s of EtcdBackup %s failed verification (%s): it is never restored; name another snapshot, or leave uri empty for the newest that did not fail",
				artifact.URI, ref.Name, artifact.Verification.Message)
		}
		if artifact == nil {
			if ref.URI == "" {
				return src, failed(etcdv1alpha1.ReasonSourceNotFound, "EtcdBackup %s has no completed snapshot that did not fail verification", ref.Name)
			}
			return src, failed(etcdv1alpha1.ReasonSourceNotFound, "EtcdBackup %s has no completed snapshot %s in its status", ref.Name, ref.URI)
		}
		base := agent.LocationURIBase(backup.Spec.Destination)
		if !strings.HasPrefix(artifact.URI, base) {
			return src, failed(etcdv1alpha1.ReasonSourceNotFound, "snapshot %s is not under EtcdBackup %s's destination %s", artifact.URI, ref.Name, base)
		}
		src.Storage, src.Key, src.SHA256 = backup.Spec.Destination, strings.TrimPrefix(artifact.URI, base), artifact.SHA256
		src.uri, src.etcdVersion, src.cluster, src.backup = artifact.URI, artifact.EtcdVersion, backup.Spec.ClusterName, backup.Name
		src.revision, src.largestBytes = artifact.Revision, artifact.SizeBytes
		keyID = artifact.EncryptionKeyID
		if src.Encryption == nil && keyID != "" {
			src.Encryption = backup.Spec.Encryption
		}
		if authOn(artifact) {
			src.withAuth = artifact
		}
		for _, older := range olderArtifacts(backup, artifact) {
			if key, ok := strings.CutPrefix(older.URI, base); ok {
				src.Fallbacks = append(src.Fallbacks, jobspec.Snapshot{Key: key, SHA256: older.SHA256})
				src.revision = min(src.revision, older.Revision)
				src.largestBytes = max(src.largestBytes, older.SizeBytes)
				if src.withAuth == nil && authOn(older) {
					src.withAuth = older
				}
			}
		}
	}
	if err := r.checkDecryption(ctx, rs, src, keyID); err != nil {
		return src, err
	}
	if s3 := src.Storage.S3; s3 != nil {
		for _, name := range []string{s3.CredentialsSecretName, s3.CASecretName} {
			if name == "" {
				continue
			}
			// Only whether it exists matters here: its metadata is read, not its keys.
			secret := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}}
			if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: name}, secret); apierrors.IsNotFound(err) {
				return src, failed(etcdv1alpha1.ReasonSourceNotFound, "Secret %s does not exist in namespace %s", name, rs.Namespace)
			} else if err != nil {
				return src, err
			}
		}
		if name := s3.ServiceAccountName; name != "" {
			// Without it the Job controller could create no pod, and would say so only in an
			// event on the Job.
			sa := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}}
			if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: name}, sa); apierrors.IsNotFound(err) {
				return src, failed(etcdv1alpha1.ReasonSourceNotFound,
					"ServiceAccount %s does not exist in namespace %s: create it, bound to the IAM role that can read bucket %s, or set s3.credentialsSecretName", name, rs.Namespace, s3.Bucket)
			} else if err != nil {
				return src, err
			}
		}
	}
	return src, nil
}

// checkDecryption refuses, before anything is touched, a restore whose snapshot is encrypted
// to a key the restore's Secret of keys does not hold (keyID, recorded by its EtcdBackup), or
// whose Secret of keys is missing or malformed. Once the restore Jobs have reported, the keys
// were used, and are not needed again.
func (r *EtcdRestoreReconciler) checkDecryption(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, src snapshotSource, keyID string) error {
	if rs.Status.RestoredRevision != nil {
		return nil
	}
	const nothing = "nothing was restored"
	if keyID != "" {
		if problem := snapshotKeyProblem(ctx, r.APIReader, rs.Namespace, src.Encryption, keyID, "snapshot "+src.uri, "source.encryption.secretName", nothing); problem != nil {
			return failed(problem.reason, "%s", problem.message)
		}
		return nil
	}
	if src.Encryption != nil {
		if _, problem := readEncryptionKeys(ctx, r.APIReader, rs.Namespace, src.Encryption); problem != nil {
			return failed(problem.reason, "%s; %s", problem.message, nothing)
		}
	}
	return nil
}

// chooseArtifact is the backup's newest snapshot that did not fail verification, or the one
// with the given URI.
func chooseArtifact(b *etcdv1alpha1.EtcdBackup, uri string) *etcdv1alpha1.BackupArtifact {
	if uri == "" {
		return newestRestorable(b, "")
	}
	if b.Status.LastBackup != nil && b.Status.LastBackup.URI == uri {
		return b.Status.LastBackup
	}
	for _, run := range b.Status.History {
		if run.Artifact != nil && run.Artifact.URI == uri {
			return run.Artifact
		}
	}
	return nil
}

// failedVerification says whether a verification found a unrestorable: no restore picks it,
// and one that names it is refused.
func failedVerification(a *etcdv1alpha1.BackupArtifact) bool {
	return a != nil && a.Verification != nil && a.Verification.Result == etcdv1alpha1.SnapshotFailed
}

// newestRestorable is the newest snapshot b's status names that did not fail verification, or
// nil: status.lastBackup unless it failed, else the newest in the history that did not. With
// a cluster UID, only snapshots of that EtcdCluster count (takenOf).
func newestRestorable(b *etcdv1alpha1.EtcdBackup, cluster types.UID) *etcdv1alpha1.BackupArtifact {
	var newest *etcdv1alpha1.BackupArtifact
	candidates := []*etcdv1alpha1.BackupArtifact{b.Status.LastBackup}
	for i := range b.Status.History {
		candidates = append(candidates, b.Status.History[i].Artifact)
	}
	for _, a := range candidates {
		if a == nil || failedVerification(a) || !takenOf(a, cluster) {
			continue
		}
		if newest == nil || a.StartTime.After(newest.StartTime.Time) {
			newest = a
		}
	}
	return newest
}

// takenOf: a is a snapshot of the EtcdCluster with the given UID (any, for ""). An EtcdBackup
// names its cluster by name, and outlives it: a cluster deleted and made again under the same
// name is another cluster, whose snapshots its successor must never be recovered from. A
// snapshot recorded without a UID (by an operator before it recorded one) has only the name.
func takenOf(a *etcdv1alpha1.BackupArtifact, cluster types.UID) bool {
	return cluster == "" || a.ClusterUID == "" || a.ClusterUID == cluster
}

// olderArtifacts are the snapshots b's status names that were taken before a and did not fail
// verification, newest first; of a's EtcdCluster only, should a record which (takenOf).
func olderArtifacts(b *etcdv1alpha1.EtcdBackup, a *etcdv1alpha1.BackupArtifact) []*etcdv1alpha1.BackupArtifact {
	var older []*etcdv1alpha1.BackupArtifact
	for _, run := range b.Status.History {
		o := run.Artifact
		if o == nil || failedVerification(o) || !o.StartTime.Before(&a.StartTime) || !takenOf(o, a.ClusterUID) {
			continue
		}
		if !slices.ContainsFunc(older, func(x *etcdv1alpha1.BackupArtifact) bool { return x.URI == o.URI }) {
			older = append(older, o)
		}
	}
	slices.SortStableFunc(older, func(x, y *etcdv1alpha1.BackupArtifact) int { return y.StartTime.Compare(x.StartTime.Time) })
	return older
}

// createTarget creates the new EtcdCluster, held back from forming until its members' data
// is prepared, and returns it; nil if one of its name was created since the cache was read.
func (r *EtcdRestoreReconciler) createTarget(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, src snapshotSource) (*etcdv1alpha1.EtcdCluster, error) {
	if rs.Status.Phase == etcdv1alpha1.RestoreRestoring {
		return nil, failed(etcdv1alpha1.ReasonTargetDeleted, "EtcdCluster %s was deleted while it was being restored", rs.Spec.Target.ClusterName)
	}
	spec := rs.Spec.Target.Cluster.DeepCopy()
	if tooOld(spec.Version, src.etcdVersion) {
		return nil, failed(etcdv1alpha1.ReasonVersionTooOld, "the snapshot was taken with etcd %s; target.cluster.version %s is older and cannot read it", src.etcdVersion, spec.Version)
	}
	if err := r.authRequired(ctx, rs, src, spec.Auth, "target.cluster has no auth", "Set target.cluster.auth.rootSecretName", "nothing was created"); err != nil {
		return nil, err
	}
	if spec.Paused {
		return nil, failed(etcdv1alpha1.ReasonInvalidSpec, "target.cluster.paused: a paused cluster would never form from the restored member")
	}
	if spec.Storage.Ephemeral {
		return nil, failed(etcdv1alpha1.ReasonInvalidSpec, "target.cluster.storage.ephemeral: a restored member's data is prepared on its claim, so the cluster needs persistent storage")
	}
	size := resources.MemberStorageSize(&etcdv1alpha1.EtcdCluster{Spec: *spec})
	if why := storageTooSmall(src, size); why != "" {
		return nil, failed(etcdv1alpha1.ReasonStorageTooSmall, "%s: set target.cluster.storage.size to at least %d bytes; nothing was created", why, jobspec.RestoreNeedsBytes(src.largestBytes))
	}
	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name:      rs.Spec.Target.ClusterName,
			Namespace: rs.Namespace,
			Annotations: map[string]string{
				resources.AnnotationRestoredBy:     rs.Name,
				resources.AnnotationRestorePending: rs.Name,
			},
		},
		Spec: *spec,
	}
	if err := r.Create(ctx, cluster); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, nil // the next reconcile sees whose it is
		}
		return nil, fmt.Errorf("create EtcdCluster %s: %w", cluster.Name, err)
	}
	// gofail: var restoreTargetCreated struct{}
	rs.Status.Phase = etcdv1alpha1.RestoreRestoring
	setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoring, "created EtcdCluster %s; restoring its members from %s", cluster.Name, src.uri)
	postEvent(r.Recorder, rs, corev1.EventTypeNormal, "ClusterCreated", "Restore", "created EtcdCluster %s to restore %s into", cluster.Name, src.uri)
	return cluster, nil
}

// prepareMembers has every first member's data written from the snapshot and lets the cluster
// form from them, all at once: by the members' own pods before etcd starts, when they can
// (memberPodsRestore), so the cluster forms at once; else by a Job each, and the cluster forms
// once they all have. The first members are those restoreMembers plans: the seed alone for a
// snapshot on a claim, and the cluster grows from it.
func (r *EtcdRestoreReconciler) prepareMembers(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, src snapshotSource) (ctrl.Result, error) {
	rs.Status.Phase = etcdv1alpha1.RestoreRestoring
	seed, err := r.seedClaim(ctx, rs, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	members := membersPlanned(rs, c, seed, src)
	inPods, err := r.memberPodsRestore(ctx, rs, c, seed, members, src)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, member := range members {
		if err := r.ensureRestoreClaim(ctx, c, member, members, "", inPods); err != nil {
			return ctrl.Result{}, err
		}
	}
	if inPods != nil {
		// gofail: var restoreMemberClaimsMade struct{}
		postEvent(r.Recorder, rs, corev1.EventTypeNormal, "RestoreStarted", "Restore", "members %s of EtcdCluster %s restore %s in their own pods", strings.Join(members, ", "), c.Name, src.uri)
	} else {
		wait, done, err := r.runRestoreJobs(ctx, rs, c, members, src)
		if err != nil {
			var failure *restoreFailure
			if errors.As(err, &failure) {
				if err := r.discardTarget(ctx, c); err != nil {
					return ctrl.Result{}, err
				}
				return ctrl.Result{}, failed(failure.reason, "%s; EtcdCluster %s, which never held data, was deleted", failure.message, c.Name)
			}
			return ctrl.Result{}, err
		}
		if !done {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	if err := r.carryRootPasswords(ctx, c, src); err != nil {
		return ctrl.Result{}, err
	}
	patch := client.MergeFrom(c.DeepCopy())
	delete(c.Annotations, resources.AnnotationRestorePending)
	if err := r.Patch(ctx, c, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("let EtcdCluster %s form: %w", c.Name, err)
	}
	// gofail: var restoreSeedReleased struct{}
	grows := growsTo(c, members)
	if inPods != nil {
		setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoring,
			"members %s restore %s in their own pods; the cluster forms from them%s", strings.Join(members, ", "), src.uri, grows)
		return ctrl.Result{}, nil
	}
	setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoring,
		"members %s hold the snapshot at revision %d; the cluster forms from them%s", strings.Join(members, ", "), ptr.Deref(rs.Status.RestoredRevision, 0), grows)
	return ctrl.Result{}, nil
}

// restoreMembers are the members a restore prepares from the snapshot, each with a claim and a
// Job of its own: those of the plan on the seed's claim once it exists, so that every reconcile
// prepares the same ones (and a restore begun by an operator that prepared the seed alone,
// letting the others join as learners, goes on that way); else spec.size of them, as etcd's
// recovery guide restores every member of a cluster from the same snapshot, or the seed alone
// for a snapshot on a claim (preparesSeedAlone).
func (r *EtcdRestoreReconciler) restoreMembers(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, src snapshotSource) ([]string, error) {
	seed, err := r.seedClaim(ctx, rs, c)
	if err != nil {
		return nil, err
	}
	return membersPlanned(rs, c, seed, src), nil
}

// membersPlanned are restoreMembers given the seed's claim, nil if it has none yet.
func membersPlanned(rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, seed *corev1.PersistentVolumeClaim, src snapshotSource) []string {
	if seed != nil {
		if planned := resources.MembersOfInitialCluster(seed.Annotations[resources.AnnotationInitialCluster]); len(planned) > 0 {
			return planned
		}
	}
	if preparesSeedAlone(src) {
		return []string{resources.SeedMemberName(c.Name, string(rs.UID))}
	}
	return resources.RestoreMemberNames(c.Name, string(rs.UID), int(max(c.Spec.Size, 1)))
}

// preparesSeedAlone says whether a restore of src prepares the seed member alone, a cluster of
// one that the cluster's own learner-first scale-up grows to its size, rather than every first
// member at once. A snapshot on a claim: every member's Job would mount that one
// ReadWriteOnce claim. On a node-local volume (local-path, the usual) it lives on one node, so
// every Job would run there, and every member's new claim, whose first consumer the Job is
// (WaitForFirstConsumer), would be bound there too: all the members on one node, unschedulable
// under a required anti-affinity and spread over nothing otherwise; on a network volume the
// Jobs would fail to attach it beside each other. The seed alone mounts it; the others receive
// the data from the seed as learners, on nodes of their own. A snapshot in S3 is read from
// anywhere: every member is prepared from it at once.
func preparesSeedAlone(src snapshotSource) bool {
	return src.Storage.PVC != nil
}

// growsTo is what a status message adds when the cluster forms from fewer members than its
// size: the others join it as learners.
func growsTo(c *etcdv1alpha1.EtcdCluster, members []string) string {
	if len(members) < int(c.Spec.Size) {
		return fmt.Sprintf(" and grows to %d", c.Spec.Size)
	}
	return ""
}

// runRestoreJobs runs the Jobs that prepare members' data, one per member, and once every one
// has succeeded with the same snapshot, records what they restored. It returns done once that
// record was there when the reconcile began, or how soon to look again; a failed Job, or Jobs
// that restored different snapshots or revisions, is a restoreFailure.
func (r *EtcdRestoreReconciler) runRestoreJobs(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, members []string, src snapshotSource) (time.Duration, bool, error) {
	jobs, err := r.restoreJobsOf(ctx, rs, len(members))
	if err != nil {
		return 0, false, err
	}
	if slices.Contains(jobs, nil) {
		return 0, false, r.startJobs(ctx, rs, c, members, jobs, src)
	}
	var (
		wait    time.Duration
		reports []*agent.RestoreResult
		running []string
	)
	for i, job := range jobs {
		succeeded, finished, err := restoreJobOutcome(ctx, r.Client, job)
		if err != nil {
			return 0, false, err
		}
		switch {
		case !finished:
			notStarting, recheck, err := jobNotStarting(ctx, r.Client, job, r.Now())
			if err != nil {
				return 0, false, err
			}
			if notStarting != "" {
				return 0, false, failed(etcdv1alpha1.ReasonJobNotStarting, "%s", notStarting)
			}
			running = append(running, members[i])
			// The Job's completion wakes this reconciler; a pod that never starts does not, and
			// the first deadline to come is the one to look again at.
			wait = sooner(wait, recheck)
			continue
		case !succeeded:
			return 0, false, failed(etcdv1alpha1.ReasonFailed, "%s", r.jobFailure(ctx, job))
		}
		report, found, err := agentReport(ctx, r.Client, job, resources.RestoreFetchContainer)
		if err != nil {
			return 0, false, err
		}
		if !found || report.Restore == nil {
			return time.Second, false, nil // the pod's status has not reached the cache yet
		}
		reports = append(reports, report.Restore)
	}
	if len(running) > 0 {
		setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoring, "restoring members %s from %s: %d of %d Jobs done",
			strings.Join(running, ", "), src.uri, len(members)-len(running), len(members))
		return wait, false, nil
	}
	if err := sameRestoredData(members, jobs, reports); err != nil {
		return 0, false, err
	}
	restored := reports[0]
	// Not the revision itself: a snapshot of a keyspace never written to is at revision 0.
	recorded := rs.Status.RestoredRevision != nil
	rs.Status.RestoredRevision, rs.Status.SnapshotSHA256 = ptr.To(restored.Revision), restored.SHA256
	// From the Jobs, not computed again: the highest revision seen may have moved since.
	rs.Status.RevisionBump = jobRevisionBump(jobs[0])
	if restored.URI != "" {
		rs.Status.SnapshotURI = restored.URI
	}
	rs.Status.MissingSnapshotURI = restored.Missing
	if !recorded && restored.Missing != "" {
		setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoring,
			"%s no longer exists; restored %s instead, the newest older snapshot of EtcdBackup %s that does", restored.Missing, restored.URI, src.backup)
		postEvent(r.Recorder, rs, corev1.EventTypeWarning, "SnapshotFallback", "Restore",
			"%s no longer exists; restoring %s (revision %d) instead, the newest older snapshot of EtcdBackup %s that does: writes after it are not restored",
			restored.Missing, restored.URI, restored.Revision, src.backup)
	}
	if !recorded {
		// Recorded before the cluster may use the data: once it does (the cut-over, the
		// cluster let form) nothing reads the Jobs' reports again, and an operator stopped
		// before this reconcile's status write would complete the restore at revision 0.
		// The status write brings the restore back.
		postEvent(r.Recorder, rs, corev1.EventTypeNormal, "MemberRestored", "Restore", "members %s of EtcdCluster %s restored from %s (revision %d, sha256 %s)",
			strings.Join(members, ", "), c.Name, restored.URI, restored.Revision, restored.SHA256)
		return time.Second, false, nil
	}
	return 0, true, nil
}

// restoreJobOutcome is jobOutcome, and a restore Job whose pod has succeeded has succeeded: its
// member's data is written and its report left, and Kubernetes' Job controller marks the Job
// Complete only seconds later (2–3 s measured, once it has counted the pod and released its
// finalizer), seconds every restore would wait. A pod that failed is left to the Job: it may
// be retried.
func restoreJobOutcome(ctx context.Context, c client.Client, job *batchv1.Job) (succeeded, finished bool, err error) {
	if succeeded, finished = jobOutcome(job); finished {
		return succeeded, finished, nil
	}
	pods, err := jobPods(ctx, c, job)
	if err != nil || len(pods) == 0 {
		return false, false, err
	}
	newest := pods[len(pods)-1].Status.Phase
	return newest == corev1.PodSucceeded, newest == corev1.PodSucceeded, nil
}

// restoreJobsOf are the restore's Jobs by the index of the member each prepares; nil for one
// not made yet.
func (r *EtcdRestoreReconciler) restoreJobsOf(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, n int) ([]*batchv1.Job, error) {
	jobs := make([]*batchv1.Job, n)
	for i := range jobs {
		job := &batchv1.Job{}
		err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: resources.RestoreJobName(rs.Name, i)}, job)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		jobs[i] = job
	}
	return jobs, nil
}

func jobRevisionBump(job *batchv1.Job) int64 {
	bump, _ := strconv.ParseInt(job.Annotations[resources.AnnotationRevisionBump], 10, 64)
	return bump
}

// sameRestoredData refuses members restored from different snapshots or with different
// revision bumps: they would start one cluster whose members disagree on its data. Each Job
// falls back on its own when the snapshot is missing, so a snapshot deleted while the Jobs ran
// could split them; the bump of Jobs made in different reconciles could differ.
func sameRestoredData(members []string, jobs []*batchv1.Job, reports []*agent.RestoreResult) error {
	first := reports[0]
	for i := 1; i < len(reports); i++ {
		got := reports[i]
		if got.URI != first.URI || got.SHA256 != first.SHA256 || got.Revision != first.Revision {
			return failed(etcdv1alpha1.ReasonFailed,
				"member %s was restored from %s (revision %d) but member %s from %s (revision %d): the snapshots changed while the restore ran; create the restore again",
				members[0], first.URI, first.Revision, members[i], got.URI, got.Revision)
		}
		if jobRevisionBump(jobs[i]) != jobRevisionBump(jobs[0]) {
			return failed(etcdv1alpha1.ReasonFailed, "members %s and %s were restored with revision bumps %d and %d: create the restore again",
				members[0], members[i], jobRevisionBump(jobs[0]), jobRevisionBump(jobs[i]))
		}
	}
	return nil
}

// ensureRestoreClaim creates the claim of member, one of members prepared from the snapshot,
// with a bootstrap plan of them all: the EtcdCluster reconciler starts them together on the
// restored data, and adds any others the spec asks for as learners. Staged for an in-place
// restore, the claim is labelled as the operator's and the restore's, not yet as the
// cluster's: until the cut-over the cluster's reconciler does not see it, and would otherwise
// delete it as an orphan. Restored in the member's pod (inPod), the claim says so.
func (r *EtcdRestoreReconciler) ensureRestoreClaim(ctx context.Context, c *etcdv1alpha1.EtcdCluster, member string, members []string, stagedFor string, inPod *resources.MemberRestore) error {
	pvc := resources.MemberPVC(c, resources.MemberSpec{Name: member, InitialCluster: resources.InitialCluster(c, members), State: "new"})
	if inPod != nil {
		pvc.Annotations[resources.AnnotationMemberRestore] = resources.MemberRestoreAnnotation(*inPod)
	}
	if stagedFor != "" {
		pvc.Labels, pvc.OwnerReferences = resources.ManagedBy(), nil
		pvc.Labels[resources.LabelRestore] = stagedFor
	}
	if err := r.Create(ctx, pvc); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("create claim %s: %w", pvc.Name, err)
	}
	return nil
}

// startJobs creates the restore Jobs not made yet, all with one revision bump: that of a Job
// already made, else the one computed now.
func (r *EtcdRestoreReconciler) startJobs(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, members []string, jobs []*batchv1.Job, src snapshotSource) error {
	if r.AgentImage == "" {
		return failed(etcdv1alpha1.ReasonAgentImageUnknown, "the operator was started without RELATED_IMAGE_OPERATOR, the image its restore Jobs run")
	}
	var made *batchv1.Job
	for _, job := range jobs {
		if job != nil {
			made = job
			break
		}
	}
	if made != nil {
		src.RevisionBump = jobRevisionBump(made)
	} else {
		bump, err := r.revisionBump(ctx, rs, c, src)
		if err != nil {
			return err
		}
		src.RevisionBump = bump
	}
	for i, member := range members {
		if jobs[i] != nil {
			continue
		}
		job, err := resources.RestoreJob(rs, c, resources.RestoreMember{Name: member, Index: i, Members: members}, src.RestoreSource, r.AgentImage, r.DefaultImages, r.Pods)
		if err != nil {
			return err
		}
		if err := ctrl.SetControllerReference(rs, job, r.Scheme()); err != nil {
			return err
		}
		if err := r.Create(ctx, job); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("create restore Job: %w", err)
		}
		// gofail: var restoreJobCreated struct{}
	}
	setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoring, "Jobs are restoring members %s from %s", strings.Join(members, ", "), src.uri)
	postEvent(r.Recorder, rs, corev1.EventTypeNormal, "RestoreStarted", "Restore", "started Jobs to restore members %s of EtcdCluster %s", strings.Join(members, ", "), c.Name)
	return nil
}

// minBumpVersion is the first etcd whose etcdutl bumps a restored revision.
const minBumpVersion = "3.5.10"

// revisionBump is the bump spec.revisionBump asks for (restoreplan.RevisionBump), on what the
// operator knows: the snapshot's revision, and the highest revision it saw the cluster reach
// that the snapshot's clients used. Restored in place, that is the cluster itself; into a new
// cluster, the cluster the EtcdBackup was taken of, if it is still there: its clients are the
// ones a restore into a new cluster usually serves.
func (r *EtcdRestoreReconciler) revisionBump(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, src snapshotSource) (int64, error) {
	rev := restoreplan.Revision{Snapshot: src.revision}
	switch {
	case rs.Spec.Target.Mode == etcdv1alpha1.RestoreInPlace:
		rev.HighestSeen = c.Status.HighestRevision
	case src.cluster != "":
		source := &etcdv1alpha1.EtcdCluster{}
		err := r.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: src.cluster}, source)
		if client.IgnoreNotFound(err) != nil {
			return 0, err
		}
		rev.HighestSeen = source.Status.HighestRevision
	}
	rev.HighestSeen = max(rev.HighestSeen, src.highestArchived)
	bump, err := restoreplan.RevisionBump(rs.Spec.RevisionBump, rev)
	if err != nil {
		return 0, failed(etcdv1alpha1.ReasonInvalidSpec, "spec.revisionBump: %v", err)
	}
	if older, known := compareVersions(c.Spec.Version, minBumpVersion, false); bump > 0 && known && older < 0 {
		return 0, failed(etcdv1alpha1.ReasonInvalidSpec,
			"etcd %s cannot bump the restored revision (etcdutl does from %s on): run %s or newer, or set spec.revisionBump: None if no client has watched the cluster",
			c.Spec.Version, minBumpVersion, minBumpVersion)
	}
	return bump, nil
}

// jobFailure says why a restore Job failed, from the first of its containers that did.
func (r *EtcdRestoreReconciler) jobFailure(ctx context.Context, job *batchv1.Job) string {
	terminated, err := lastPodTerminations(ctx, r.Client, job)
	if err == nil {
		for _, name := range []string{resources.RestoreFetchContainer, resources.RestoreEtcdutlContainer, resources.RestoreInstallContainer} {
			t, ok := terminated[name]
			if !ok || t.ExitCode == 0 {
				continue
			}
			if report, err := agent.DecodeReport(t.Message); err == nil && report.Error != "" {
				return name + ": " + report.Error
			}
			return fmt.Sprintf("%s exited %d: %s", name, t.ExitCode, strings.TrimSpace(t.Message))
		}
	}
	return failureMessage(job, false, agent.Report{})
}

// discardTarget deletes the cluster this restore created, before it ever formed: it holds
// nothing, and the name is free for another attempt. Its first member's claim follows the
// cluster's claim retention policy, as any member's.
func (r *EtcdRestoreReconciler) discardTarget(ctx context.Context, c *etcdv1alpha1.EtcdCluster) error {
	if err := r.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete EtcdCluster %s: %w", c.Name, err)
	}
	return nil
}

// awaitAvailable completes the restore once what its members restored is recorded and the
// cluster serves with all of them, each the same restored store.
func (r *EtcdRestoreReconciler) awaitAvailable(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster) (ctrl.Result, error) {
	rs.Status.Phase = etcdv1alpha1.RestoreRestoring
	if recorded, result, err := r.recordMemberRestores(ctx, rs, c); !recorded {
		return result, err
	}
	if !servesAtSize(c) {
		return r.awaitServing(rs, c, fmt.Sprintf("EtcdCluster %s has %d of %d members ready", c.Name, c.Status.ReadyMembers, c.Spec.Size)), nil
	}
	agreed, wait := r.compareRestoredData(ctx, rs, c)
	if wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.complete(rs, c, agreed)
	return ctrl.Result{}, nil
}

// Keyspaces reads, live from etcd, the keyspace digest at a revision of every member of a
// cluster, by name: EtcdClusterReconciler.KeyspacesAt, which has the cluster's certificates and
// credentials.
type Keyspaces func(ctx context.Context, c *etcdv1alpha1.EtcdCluster, revision int64) (map[string]etcd.KeyspaceDigest, error)

// Looks again at a restored cluster whose members did not all answer, or disagree.
const (
	keyspaceRetry         = 5 * time.Second
	keyspaceMismatchRetry = 30 * time.Second
)

// compareRestoredData asks every member of the serving cluster for its keyspace at the
// revision the restored data starts from (restoreplan.Disagreement decides). It returns what
// the completion says of it, or how soon to look again, with the condition saying why. A
// revision compacted away by the time every member answered can no longer be compared: the
// restore completes, and says so.
func (r *EtcdRestoreReconciler) compareRestoredData(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster) (string, time.Duration) {
	revision := ptr.Deref(rs.Status.RestoredRevision, 0) + rs.Status.RevisionBump
	digests, err := r.Keyspaces(ctx, c, revision)
	switch {
	case errors.Is(err, etcd.ErrCompacted):
		return fmt.Sprintf("; its members' data was not compared: revision %d was compacted before they all answered", revision), 0
	case err != nil:
		setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoring,
			"EtcdCluster %s serves at its size; comparing its members' data at revision %d: %v", c.Name, revision, err)
		return "", keyspaceRetry
	}
	if differs := restoreplan.Disagreement(digests, int(c.Spec.Size)); differs != "" {
		if cond := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); cond == nil || cond.Reason != etcdv1alpha1.ReasonRestoredDataDiffers {
			postEvent(r.Recorder, rs, corev1.EventTypeWarning, etcdv1alpha1.ReasonRestoredDataDiffers, "Restore",
				"the members of EtcdCluster %s do not hold the same restored data: %s", c.Name, differs)
		}
		setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoredDataDiffers,
			"EtcdCluster %s serves at its size, but its members do not hold the same restored data: %s. The restore does not complete; see docs/guide/troubleshooting.md", c.Name, differs)
		return "", keyspaceMismatchRetry
	}
	for _, d := range digests {
		return fmt.Sprintf(", every member with HashKV %d and %d keys at revision %d", d.Hash, d.Keys, revision), 0
	}
	return "", 0
}

// servesAtSize: the cluster is Available with as many ready members as its spec asks for.
func servesAtSize(c *etcdv1alpha1.EtcdCluster) bool {
	return meta.IsStatusConditionTrue(c.Status.Conditions, etcdv1alpha1.ConditionAvailable) && c.Status.ReadyMembers >= c.Spec.Size
}

// refusesTheOperator is the cluster's Degraded reason and message when etcd refuses the
// operator (AuthRequired, CredentialsRejected), or "": the cluster will not serve until someone
// acts, and says what to do, which a restore waiting on it says too rather than only count its
// ready members.
func refusesTheOperator(c *etcdv1alpha1.EtcdCluster) string {
	cond := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	if cond == nil || cond.Status != metav1.ConditionTrue ||
		(cond.Reason != etcdv1alpha1.ReasonAuthRequired && cond.Reason != etcdv1alpha1.ReasonCredentialsRejected) {
		return ""
	}
	return cond.Reason + ": " + cond.Message
}

// restoreServeDeadline bounds how long a restore whose data is installed waits for its cluster
// to serve before it says so and stops holding OLM upgrades back. It is not failed: the data
// is the cluster's now, and the cluster reconciler goes on bringing it up.
const restoreServeDeadline = 15 * time.Minute

// awaitServing reports a restore waiting, after its data was installed, for its cluster to
// serve at its size: as progress until restoreServeDeadline, then as ClusterNotServing, with a
// Warning event when that starts. Either says why when etcd refuses the operator.
func (r *EtcdRestoreReconciler) awaitServing(rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, progress string) ctrl.Result {
	if refused := refusesTheOperator(c); refused != "" {
		progress += "; " + refused
	}
	if rs.Status.InstallTime == nil {
		rs.Status.InstallTime = ptrTime(r.Now())
	}
	left := restoreServeDeadline - r.Now().Sub(rs.Status.InstallTime.Time)
	if left > 0 {
		setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonRestoring, "%s", progress)
		return ctrl.Result{RequeueAfter: left} // the cluster's status changes wake this reconciler sooner
	}
	if !restoreNotServing(rs) {
		postEvent(r.Recorder, rs, corev1.EventTypeWarning, etcdv1alpha1.ReasonClusterNotServing, "Restore",
			"EtcdCluster %s has not served at its size for %s since the restored data was installed; see its conditions", c.Name, restoreServeDeadline)
	}
	setRestoreCondition(rs, metav1.ConditionUnknown, etcdv1alpha1.ReasonClusterNotServing,
		"%s, %s after the restored data was installed: see EtcdCluster %s's conditions and events. The restore completes when it serves; OLM upgrades no longer wait for it",
		progress, restoreServeDeadline, c.Name)
	return ctrl.Result{}
}

// restoreNotServing: the restore waits past restoreServeDeadline for its cluster to serve.
func restoreNotServing(rs *etcdv1alpha1.EtcdRestore) bool {
	cond := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
	return cond != nil && cond.Reason == etcdv1alpha1.ReasonClusterNotServing
}

// complete records a restore as done, once its cluster serves the restored data at its size;
// cleanUp takes down its Job and hold once that is in status.
func (r *EtcdRestoreReconciler) complete(rs *etcdv1alpha1.EtcdRestore, c *etcdv1alpha1.EtcdCluster, how string) {
	rs.Status.Phase, rs.Status.CompletionTime = etcdv1alpha1.RestoreCompleted, ptrTime(r.Now())
	if missing := rs.Status.MissingSnapshotURI; missing != "" {
		how += fmt.Sprintf("; the snapshot is %s, the newest older one that existed: %s, the one asked for, did not", rs.Status.SnapshotURI, missing)
	}
	setRestoreCondition(rs, metav1.ConditionTrue, etcdv1alpha1.ReasonCompleted,
		"EtcdCluster %s serves the snapshot's data from revision %d with %d members%s", c.Name, ptr.Deref(rs.Status.RestoredRevision, 0), c.Status.ReadyMembers, how)
	postEvent(r.Recorder, rs, corev1.EventTypeNormal, "RestoreCompleted", "Restore", "EtcdCluster %s is Available with the restored data%s", c.Name, how)
}

func (r *EtcdRestoreReconciler) fail(rs *etcdv1alpha1.EtcdRestore, f *restoreFailure) {
	rs.Status.Phase, rs.Status.CompletionTime = etcdv1alpha1.RestoreFailed, ptrTime(r.Now())
	setRestoreCondition(rs, metav1.ConditionFalse, f.reason, "%s", f.message)
	postEvent(r.Recorder, rs, corev1.EventTypeWarning, "RestoreFailed", "Restore", "%s", f.message)
}

// setRestoreCondition sets the restore's one condition, Succeeded.
func setRestoreCondition(rs *etcdv1alpha1.EtcdRestore, status metav1.ConditionStatus, reason, format string, args ...any) {
	setConditionAt(&rs.Status.Conditions, rs, etcdv1alpha1.ConditionSucceeded, status, reason, format, args...)
}

// SetupWithManager registers the reconciler and what it watches. The restored cluster's
// progress completes the restore. Its Jobs' pods are followed: one that has succeeded has
// prepared its member (restoreJobOutcome), and the Job itself changes only seconds later.
func (r *EtcdRestoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return setUpJobRunner(mgr, "etcdrestore", &etcdv1alpha1.EtcdRestore{}, restoreOfCluster, r, resources.LabelRestore)
}

func restoreOfCluster(_ context.Context, obj client.Object) []reconcile.Request {
	var requests []reconcile.Request
	seen := map[string]bool{}
	for _, key := range []string{resources.AnnotationRestoredBy, resources.AnnotationRestorePending} {
		if name := obj.GetAnnotations()[key]; name != "" && !seen[name] {
			seen[name] = true
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}})
		}
	}
	return requests
}
