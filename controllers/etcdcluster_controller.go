package controllers

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"golang.org/x/time/rate"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/metrics"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// How soon to look again: right after a step (its effect shows in seconds), while waiting on
// something that should settle, and in steady state (to notice failures etcd does not signal
// through the API server). Only changes to the objects the reconciler watches bring it sooner:
// not its own status writes (SetupWithManager). So a wait is short: a member whose pod has just
// turned Ready, say, may answer etcd's status a second later, and status should say so then.
const (
	requeueAfterStep = 2 * time.Second
	requeueWaiting   = 2 * time.Second
	requeueSteady    = 30 * time.Second
	// steadyLookSpread spreads the steady-state looks over requeueSteady ± 20 % (nextSteadyLook).
	steadyLookSpread = 0.2
	// requeueAfterConflict: a status write refused as written over a newer cluster object; the
	// cache has it, or will within a moment.
	requeueAfterConflict = time.Second
)

// nextSteadyLook is when a cluster with nothing to do is looked at again: requeueSteady on
// average, drawn uniformly within steadyLookSpread of it. Clusters made together would
// otherwise keep the cadence they started with, and be looked at all at once: at 1000 clusters
// most of a minute's 2000 looks came in two bursts to four workers, and the bursts made the tail
// of a look's duration (docs/performance.md, Many clusters per operator).
func nextSteadyLook() time.Duration {
	spread := float64(requeueSteady) * steadyLookSpread
	return requeueSteady + time.Duration((2*rand.Float64()-1)*spread)
}

// EtcdClusterReconciler runs etcd clusters: one pod and one claim per member, membership
// changed one safe step at a time.
type EtcdClusterReconciler struct {
	client.Client
	// APIReader reads from the API server, not the cache: a bootstrap, which cannot be taken
	// back, is confirmed against it (deletes carry preconditions instead), and the user's
	// Secrets a spec names, which the cache does not hold, are read through it.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// CertManager: the API server served cert-manager's Certificates when the operator
	// started, so provider CertManager can be honoured and its Certificates are watched.
	CertManager bool
	// Clock is time.Now, replaced in tests.
	Clock func() time.Time
	Etcd  *etcd.Cache
	// defrags are the defragmentations running in the background.
	defrags defragmentations
	// consistency are the comparisons of members' keyspace hashes running in the background.
	consistency consistencyChecks
	// stuckCauses are the causes last read from the events of member pods that do not start.
	stuckCauses stuckCauses
	// DefaultImages are the etcd images of clusters whose spec.repository is empty.
	DefaultImages resources.EtcdImages
	// Pods are what its install and platform give the pods it creates: proxy settings for the
	// agent Jobs it starts (never for members), the platform's own pod IDs.
	Pods resources.PodSettings
	// AgentImage is the operator's own image, which copies a member's data before a quorum
	// recovery rewrites it.
	AgentImage string
	// ProbeAddresses finds whether anything answers at a member's addresses while quorum is
	// lost (etcd.FirstAnswer when nil; replaced in tests).
	ProbeAddresses func(ctx context.Context, addrs []string) string
	// ProbeTrust asks a member's TLS port which CAs it trusts, during a CA rotation
	// (etcd.TrustOf when nil; replaced in tests).
	ProbeTrust func(ctx context.Context, addr string, cas map[string]*x509.Certificate, probes []etcd.TrustProbe) (etcd.TrustSeen, error)
}

// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdclusters,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdrestores,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// Reconcile observes one EtcdCluster, takes the one next safe step, and reports what it saw.
// Status is written once, in the deferred patch, on every path: a reconcile that fails half-way
// still says why in its conditions.
func (r *EtcdClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	cluster := &etcdv1alpha1.EtcdCluster{}
	if err := r.Get(ctx, req.NamespacedName, cluster); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.Etcd.Forget(req.String())
			metrics.Clusters.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		// Owner references let the garbage collector delete pods, Services and the claims
		// the retention policy does not keep.
		r.Etcd.Forget(req.String())
		metrics.Clusters.Forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	before := cluster.DeepCopy()
	announce := false // the reconcile reported on the cluster: what status newly says is announced
	defer func() {
		patchErr := r.writeStatus(ctx, cluster, before, announce)
		if apierrors.IsConflict(patchErr) {
			// The cluster changed since it was read: most often this reconciler's own last
			// status write, not yet in the cache it read from. Nothing else would bring the
			// unwritten status back before the next requeue (up to requeueSteady): its own
			// writes do not wake the reconciler. So look again shortly, from the newer object.
			patchErr, result = nil, ctrl.Result{RequeueAfter: requeueAfterConflict}
		}
		metrics.Clusters.Record(cluster, before.Status.Leader, reconcileErrorReason(cluster, retErr, patchErr), r.now())
		retErr = errors.Join(retErr, patchErr)
	}()

	access, err := r.etcdAccess(ctx, cluster)
	if wait := asCertManagerWait(err); wait != nil {
		setCertManagerWait(cluster, wait)
		announce = true
		// A Certificate's change brings the next look sooner (watchCertificates). Looked at
		// now and then meanwhile, as an invalid spec is: its reconcile heartbeat
		// (etcd_operator_cluster_last_successful_reconcile_timestamp_seconds) stays fresh, and
		// the stale-heartbeat alert fires only for a cluster the operator stopped minding.
		return ctrl.Result{RequeueAfter: requeueSteady}, nil
	}
	if apierrors.IsConflict(err) {
		// A certificate Secret written from a cache behind the API server, most often this
		// reconciler's own last write not seen yet: nothing is wrong with the certificates, and
		// status must not say so (it would turn Available Unknown). Look again shortly.
		return ctrl.Result{RequeueAfter: requeueAfterConflict}, nil
	}
	if err != nil {
		setAccessError(cluster, err)
		postEvent(r.Recorder, cluster, corev1.EventTypeWarning, accessErrorReason(err), "Configure", "%v", err)
		if accessErrorReason(err) == etcdv1alpha1.ReasonInvalidSpec {
			// The user must fix it; look again now and then rather than back off into hours.
			return ctrl.Result{RequeueAfter: requeueSteady}, nil
		}
		return ctrl.Result{}, err
	}
	obs, err := r.observe(ctx, cluster, access)
	if err == nil && errors.As(obs.etcdErr, new(*accessError)) {
		// Credentials etcd refuses: nothing can be observed or done until the user fixes them.
		setAccessError(cluster, obs.etcdErr)
		announce = true
		return ctrl.Result{RequeueAfter: requeueSteady}, nil
	}
	if err == nil {
		err = r.dropStaleLeaves(ctx, cluster, obs)
	}
	if err == nil {
		err = r.recordRootPassword(ctx, cluster, obs)
	}
	if err == nil {
		err = r.markCorruptClaims(ctx, obs)
	}
	if err == nil {
		err = r.ensureClientEndpointLabels(ctx, obs)
	}
	if err == nil {
		err = r.ensureServices(ctx, cluster)
	}
	if err == nil {
		err = r.ensureDisruptionBudget(ctx, cluster, obs)
	}
	if err != nil {
		setReconcileError(cluster, err)
		return ctrl.Result{}, err
	}
	input := obs.decisionInput(cluster, r.now())
	step := membership.Next(input)
	if membership.Settled(step) {
		if step, err = r.decideCARotation(ctx, cluster, obs, input, step); err != nil {
			setReconcileError(cluster, err)
			return ctrl.Result{}, err
		}
	}
	checking := membership.Settled(step) && consistencyCheckDue(cluster, obs, r.now())
	if checking {
		r.checkConsistencyInBackground(cluster, obs)
	}
	result, actErr := r.act(ctx, cluster, obs, step)
	if checking && actErr == nil {
		// Its result is acted on at the next look: soon, not at the steady pace.
		result.RequeueAfter = min(result.RequeueAfter, requeueAfterStep)
	}
	if held := (*disruptionHeld)(nil); errors.As(actErr, &held) {
		step, actErr = held.waiting(step), nil
	}

	report(cluster, obs, step, actErr, r.now())
	announce = true
	if actErr != nil {
		return result, actErr
	}
	return untilRenewal(result, cluster, r.now()), nil
}

// reconcileErrorReason is the reason a failed reconcile gives in status, for the error count:
// the access problem, or the Progressing reason (ReconcileError, or the step that failed); ""
// when the reconcile did not fail.
func reconcileErrorReason(c *etcdv1alpha1.EtcdCluster, err, patchErr error) string {
	switch {
	case err == nil && patchErr == nil:
		return ""
	case errors.As(err, new(*accessError)):
		return accessErrorReason(err)
	case err == nil:
		return reasonStatusNotWritten
	}
	if p := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing); p != nil {
		return p.Reason
	}
	return etcdv1alpha1.ReasonReconcileError
}

// reasonStatusNotWritten counts the reconciles whose only failure was writing status.
const reasonStatusNotWritten = "StatusNotWritten"

// untilRenewal brings the next reconcile forward to the earliest certificate renewal, so that
// a short-lived certificate is renewed on time rather than at the next steady-state look.
func untilRenewal(result ctrl.Result, c *etcdv1alpha1.EtcdCluster, now time.Time) ctrl.Result {
	for _, cs := range c.Status.Certificates {
		if cs.RenewalTime == nil {
			continue
		}
		wait := max(cs.RenewalTime.Sub(now), time.Second)
		if result.RequeueAfter == 0 || wait < result.RequeueAfter {
			result.RequeueAfter = wait
		}
	}
	return result
}

func (r *EtcdClusterReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

// patchStatus writes the cluster's status if it changed, and returns a conflict: the caller
// looks again.
func (r *EtcdClusterReconciler) patchStatus(ctx context.Context, cluster, before *etcdv1alpha1.EtcdCluster) error {
	return writeStatusNow(ctx, r.Client, cluster, before, func(o client.Object) any {
		return o.(*etcdv1alpha1.EtcdCluster).Status
	})
}

// writeStatus patches status, then, when announce is set, posts the events of what it newly
// says: only once it is written. A reconcile that starts from a cache not yet holding the
// status the one before wrote computes the same change again; its patch is refused (optimistic
// lock), and its events must be too, or the same Warning is posted twice.
func (r *EtcdClusterReconciler) writeStatus(ctx context.Context, cluster, before *etcdv1alpha1.EtcdCluster, announce bool) error {
	if err := r.patchStatus(ctx, cluster, before); err != nil || !announce {
		return err
	}
	r.announceDegraded(cluster, before)
	r.announceQuorumRecovered(ctx, cluster, before)
	return nil
}

// ensureServices creates the peer and client Services, and keeps the client Service's type and
// annotations those of spec.clientService. It also brings a client Service made by an older
// operator, which selected every pod of the cluster, to ClientEndpointSelector: it runs after
// ensureClientEndpointLabels, since with a pod not yet labelled the new selector would drop a
// serving member from the Service.
func (r *EtcdClusterReconciler) ensureServices(ctx context.Context, c *etcdv1alpha1.EtcdCluster) error {
	if err := r.createIfMissing(ctx, c, resources.PeerService(c)); err != nil {
		return err
	}
	desired := resources.ClientService(c)
	current := &corev1.Service{}
	err := r.Get(ctx, client.ObjectKeyFromObject(desired), current)
	switch {
	case apierrors.IsNotFound(err):
		return r.createOwned(ctx, c, desired)
	case err != nil:
		return fmt.Errorf("get Service %s: %w", desired.Name, err)
	}
	updated, changed := resources.ClientServiceUpdate(current, desired)
	if !changed {
		return nil
	}
	if err := r.Update(ctx, updated); err != nil {
		return fmt.Errorf("update Service %s: %w", desired.Name, err)
	}
	return nil
}

// ensureClientEndpointLabels puts LabelServesClients on member pods made before it existed, so
// that they stay in the client Service's selection. A fenced pod never gets it back, nor does a
// pod being deleted: a member stopped on purpose has nothing to serve.
func (r *EtcdClusterReconciler) ensureClientEndpointLabels(ctx context.Context, obs *observation) error {
	for _, name := range slices.Sorted(maps.Keys(obs.pods)) {
		pod := obs.pods[name]
		if pod.Labels[resources.LabelServesClients] == "true" || resources.Fenced(pod) || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
		labelled := pod.DeepCopy()
		if labelled.Labels == nil {
			labelled.Labels = map[string]string{}
		}
		labelled.Labels[resources.LabelServesClients] = "true"
		if err := r.Patch(ctx, labelled, patch); err != nil {
			return fmt.Errorf("label pod %s as a client endpoint: %w", name, err)
		}
	}
	return nil
}

func (r *EtcdClusterReconciler) createIfMissing(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	err := r.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("get %T %s: %w", obj, obj.GetName(), err)
	}
	if err == nil {
		return nil
	}
	return r.createOwned(ctx, c, obj)
}

// createOwned creates obj owned by the cluster, so that deleting the cluster deletes it.
func (r *EtcdClusterReconciler) createOwned(ctx context.Context, c *etcdv1alpha1.EtcdCluster, obj client.Object) error {
	if err := ctrl.SetControllerReference(c, obj, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, obj); err != nil && client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// SetupWithManager registers the reconciler and what it watches.
func (r *EtcdClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return r.watchCertificates(ctrl.NewControllerManagedBy(mgr).
		// Its spec, labels and annotations (the recovery go-ahead) are what ask for a change; a
		// status write is the operator's own record, and reconciling on it would retry a failed
		// step at once whenever the record changed (a learner's new name in each failure),
		// around the backoff, hundreds of times a second.
		For(&etcdv1alpha1.EtcdCluster{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Owns(&corev1.Pod{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&batchv1.Job{}).
		// A quorum-loss recovery from a backup completes with its EtcdRestore.
		Owns(&etcdv1alpha1.EtcdRestore{}).
		// Claims are owned only when the retention policy deletes them, so they are matched
		// by label instead.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(clusterOfLabelledObject))).
		Named("etcdcluster").
		// A cluster whose members do not answer holds its reconcile for the etcd call
		// timeout; others must not queue behind it.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, RateLimiter: stepRetryRateLimiter()}).
		Complete(r)
}

// stepRetryRateLimiter spaces the retries of a failed reconcile as controller-runtime's default
// does (waits doubling from 5 ms; ten a second at most, overall), but never more than
// requeueSteady apart: a step etcd refuses for minutes (a member connected for less than five
// seconds makes it refuse a removal) is tried again within half a minute of it being allowed,
// not after the default's sixteen.
func stepRetryRateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, requeueSteady),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

func clusterOfLabelledObject(_ context.Context, obj client.Object) []reconcile.Request {
	name, ok := obj.GetLabels()[resources.LabelCluster]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
}
