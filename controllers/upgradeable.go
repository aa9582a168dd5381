package controllers

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	operatorsv2 "github.com/operator-framework/api/pkg/operators/v2"
	"github.com/operator-framework/operator-lib/conditions"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// UpgradeableReconciler tells OLM not to upgrade the operator while a backup or restore is under
// way: each spans many reconciles and a Job running the operator's own image that reports to
// the operator that started it, and an in-place restore stops its cluster until it ends. It sets
// the Upgradeable condition of the OperatorCondition OLM made for this operator; OLM holds an
// upgrade back while that is False.
type UpgradeableReconciler struct {
	client.Client
	// Condition is the OperatorCondition's Upgradeable condition.
	Condition conditions.Condition
}

// operatorConditionNameEnv names the OperatorCondition OLM made for this operator; OLM sets it on
// the Deployments of the CSV it installs.
const operatorConditionNameEnv = "OPERATOR_CONDITION_NAME"

// upgradeableNamesShown is how many running backups and restores the message names.
const upgradeableNamesShown = 3

// OLMUpgradeableCondition is the Upgradeable condition of the operator's OperatorCondition, or
// nil when OLM did not install the operator (OPERATOR_CONDITION_NAME is unset).
//
// OLM grants the operator's service accounts get, update and patch on that one object (a Role
// it makes beside the OperatorCondition), and neither list nor watch: hence a client without
// a cache, and no RBAC of the operator's own.
func OLMUpgradeableCondition(cfg *rest.Config) (conditions.Condition, error) {
	if os.Getenv(operatorConditionNameEnv) == "" {
		return nil, nil
	}
	scheme := runtime.NewScheme()
	if err := operatorsv2.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register OperatorCondition: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client for the OperatorCondition: %w", err)
	}
	cond, err := conditions.InClusterFactory{Client: c}.NewCondition(operatorsv2.ConditionType(operatorsv2.Upgradeable))
	if err != nil {
		return nil, fmt.Errorf("OLM's OperatorCondition (%s is set): %w", operatorConditionNameEnv, err)
	}
	return cond, nil
}

// Reconcile sets Upgradeable from every EtcdBackup and EtcdRestore the operator watches; it
// writes only when the condition changes.
func (r *UpgradeableReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	backups := &etcdv1alpha1.EtcdBackupList{}
	if err := r.List(ctx, backups); err != nil {
		return ctrl.Result{}, fmt.Errorf("list EtcdBackups: %w", err)
	}
	restores := &etcdv1alpha1.EtcdRestoreList{}
	if err := r.List(ctx, restores); err != nil {
		return ctrl.Result{}, fmt.Errorf("list EtcdRestores: %w", err)
	}
	want := upgradeable(backups.Items, restores.Items)

	// Get also fails when the condition was never set; Set then adds it, or fails for a reason
	// worth reporting.
	if current, err := r.Condition.Get(ctx); err == nil &&
		current.Status == want.Status && current.Reason == want.Reason && current.Message == want.Message {
		return ctrl.Result{}, nil
	}
	if err := r.Condition.Set(ctx, want.Status, conditions.WithReason(want.Reason), conditions.WithMessage(want.Message)); err != nil {
		return ctrl.Result{}, fmt.Errorf("set OperatorCondition Upgradeable=%s: %w", want.Status, err)
	}
	ctrl.LoggerFrom(ctx).Info("set OLM's Upgradeable condition", "status", want.Status, "reason", want.Reason, "message", want.Message)
	return ctrl.Result{}, nil
}

// upgradeable is the Upgradeable condition for these backups and restores: False while any
// backup has a Job under way or any restore has not finished, naming a few of them.
func upgradeable(backups []etcdv1alpha1.EtcdBackup, restores []etcdv1alpha1.EtcdRestore) metav1.Condition {
	var running []string
	for i := range backups {
		if backupRunning(&backups[i]) {
			running = append(running, "EtcdBackup "+backups[i].Namespace+"/"+backups[i].Name)
		}
	}
	for i := range restores {
		if restoreRunning(&restores[i]) {
			running = append(running, "EtcdRestore "+restores[i].Namespace+"/"+restores[i].Name)
		}
	}
	if len(running) == 0 {
		return metav1.Condition{
			Type: operatorsv2.Upgradeable, Status: metav1.ConditionTrue,
			Reason: etcdv1alpha1.ReasonNoBackupOrRestoreRunning, Message: "no backup or restore is running",
		}
	}
	// Sorted, so that the message, and with it the object, changes only when the set does.
	slices.Sort(running)
	shown := running[:min(len(running), upgradeableNamesShown)]
	msg := strings.Join(shown, ", ")
	if more := len(running) - len(shown); more > 0 {
		msg += fmt.Sprintf(" and %d more", more)
	}
	return metav1.Condition{
		Type: operatorsv2.Upgradeable, Status: metav1.ConditionFalse, Reason: etcdv1alpha1.ReasonBackupOrRestoreRunning,
		Message: fmt.Sprintf("%d backup(s) or restore(s) running (%s); the operator can be upgraded once they finish",
			len(running), msg),
	}
}

// backupRunning: the backup has an agent Job under way. Waiting for its cluster or its next
// scheduled run is not running: it may last indefinitely.
func backupRunning(b *etcdv1alpha1.EtcdBackup) bool {
	return b.DeletionTimestamp.IsZero() && b.Status.ActiveJob != ""
}

// restoreRunning: the restore has not finished. One without a phase yet is about to start.
func restoreRunning(rs *etcdv1alpha1.EtcdRestore) bool {
	if !rs.DeletionTimestamp.IsZero() {
		return false // the reconciler leaves a restore being deleted alone
	}
	if restoreNotServing(rs) {
		return false // its data is installed and its cluster will not serve soon: an upgrade may be the cure
	}
	if waiting := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); rs.Status.Phase == etcdv1alpha1.RestorePending &&
		waiting != nil && waiting.Reason == etcdv1alpha1.ReasonWaitingForSource {
		return false // it waits for its source, having touched nothing, as a backup waits for its schedule
	}
	return rs.Status.Phase != etcdv1alpha1.RestoreCompleted && rs.Status.Phase != etcdv1alpha1.RestoreFailed
}

// upgradeableRequest is the one key the reconciler works on: the answer is about the operator.
var upgradeableRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "upgradeable"}}

// SetupWithManager registers the reconciler: it runs once at start, so a condition left by a
// previous process is corrected, and again whenever a backup or restore starts or ends.
func (r *UpgradeableReconciler) SetupWithManager(mgr ctrl.Manager) error {
	toOperator := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{upgradeableRequest}
	})
	startedOrEnded := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return running(e.ObjectOld) != running(e.ObjectNew)
	}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("upgradeable").
		Watches(&etcdv1alpha1.EtcdBackup{}, toOperator, builder.WithPredicates(startedOrEnded)).
		Watches(&etcdv1alpha1.EtcdRestore{}, toOperator, builder.WithPredicates(startedOrEnded)).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			q.Add(upgradeableRequest)
			return nil
		})).
		Complete(r)
}

func running(obj client.Object) bool {
	switch o := obj.(type) {
	case *etcdv1alpha1.EtcdBackup:
		return backupRunning(o)
	case *etcdv1alpha1.EtcdRestore:
		return restoreRunning(o)
	}
	return false
}
