package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Labels the operator puts on every object it makes for a cluster.
const (
	LabelCluster = "etcd.database.dev/cluster"
	LabelMember  = "etcd.database.dev/member"
)

// EtcdClusterReconciler runs etcd clusters.
type EtcdClusterReconciler struct {
	client.Client
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdclusters,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one EtcdCluster a step closer to its spec and reports what it observed.
func (r *EtcdClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &etcdv1alpha1.EtcdCluster{}
	if err := r.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := cluster.DeepCopy()

	cluster.Status.ObservedGeneration = cluster.Generation
	cluster.Status.Selector = labels.SelectorFromSet(labels.Set{LabelCluster: cluster.Name}).String()
	// Until member management lands, say so instead of guessing at the cluster's health.
	meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{
		Type:               etcdv1alpha1.ConditionAvailable,
		Status:             metav1.ConditionUnknown,
		Reason:             etcdv1alpha1.ReasonNotYetImplemented,
		Message:            "this operator build accepts EtcdClusters but does not run members yet",
		ObservedGeneration: cluster.Generation,
	})

	return ctrl.Result{}, patchStatusIfChanged(ctx, r.Client, cluster, before, func(o client.Object) any {
		return o.(*etcdv1alpha1.EtcdCluster).Status
	})
}

// SetupWithManager registers the reconciler and what it watches.
func (r *EtcdClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&etcdv1alpha1.EtcdCluster{}).
		Named("etcdcluster").
		Complete(r)
}
