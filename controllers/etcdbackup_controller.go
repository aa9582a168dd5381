package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// EtcdBackupReconciler takes snapshots of EtcdClusters.
type EtcdBackupReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=etcd.database.dev,resources=etcdbackups/status,verbs=get;update;patch

// Reconcile moves one EtcdBackup through its runs and reports them.
func (r *EtcdBackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	backup := &etcdv1alpha1.EtcdBackup{}
	if err := r.Get(ctx, req.NamespacedName, backup); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := backup.DeepCopy()

	backup.Status.ObservedGeneration = backup.Generation
	if backup.Status.Phase == "" {
		backup.Status.Phase = etcdv1alpha1.BackupPending
	}
	meta.SetStatusCondition(&backup.Status.Conditions, metav1.Condition{
		Type:               etcdv1alpha1.ConditionReady,
		Status:             metav1.ConditionUnknown,
		Reason:             etcdv1alpha1.ReasonNotYetImplemented,
		Message:            "this operator build accepts EtcdBackups but does not take snapshots yet",
		ObservedGeneration: backup.Generation,
	})

	return ctrl.Result{}, patchStatusIfChanged(ctx, r.Client, backup, before, func(o client.Object) any {
		return o.(*etcdv1alpha1.EtcdBackup).Status
	})
}

// SetupWithManager registers the reconciler and what it watches.
func (r *EtcdBackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&etcdv1alpha1.EtcdBackup{}).
		Named("etcdbackup").
		Complete(r)
}
