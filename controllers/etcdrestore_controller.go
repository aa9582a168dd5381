package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// EtcdRestoreReconciler restores snapshots into EtcdClusters.
type EtcdRestoreReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdrestores,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdrestores/status,verbs=get;update;patch

// Reconcile carries out one EtcdRestore and reports it.
func (r *EtcdRestoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	restore := &etcdv1alpha1.EtcdRestore{}
	if err := r.Get(ctx, req.NamespacedName, restore); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := restore.DeepCopy()

	restore.Status.ObservedGeneration = restore.Generation
	if restore.Status.Phase == "" {
		restore.Status.Phase = etcdv1alpha1.RestorePending
	}
	meta.SetStatusCondition(&restore.Status.Conditions, metav1.Condition{
		Type:               etcdv1alpha1.ConditionSucceeded,
		Status:             metav1.ConditionUnknown,
		Reason:             etcdv1alpha1.ReasonNotYetImplemented,
		Message:            "this operator build accepts EtcdRestores but does not restore snapshots yet",
		ObservedGeneration: restore.Generation,
	})

	return ctrl.Result{}, patchStatusIfChanged(ctx, r.Client, restore, before, func(o client.Object) any {
		return o.(*etcdv1alpha1.EtcdRestore).Status
	})
}

// SetupWithManager registers the reconciler and what it watches.
func (r *EtcdRestoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&etcdv1alpha1.EtcdRestore{}).
		Named("etcdrestore").
		Complete(r)
}
