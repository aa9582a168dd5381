package controllers

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/operator-framework/api/crds"
	operatorsv2 "github.com/operator-framework/api/pkg/operators/v2"
	"github.com/operator-framework/operator-lib/conditions"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

func TestUpgradeableIsFalseWhileABackupOrRestoreRuns(t *testing.T) {
	deleting := &metav1.Time{Time: time.Now()}
	backup := func(ns, name, activeJob string) etcdv1alpha1.EtcdBackup {
		return etcdv1alpha1.EtcdBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status:     etcdv1alpha1.EtcdBackupStatus{ActiveJob: activeJob},
		}
	}
	restore := func(ns, name string, phase etcdv1alpha1.RestorePhase) etcdv1alpha1.EtcdRestore {
		return etcdv1alpha1.EtcdRestore{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status:     etcdv1alpha1.EtcdRestoreStatus{Phase: phase},
		}
	}
	deleted := func(o metav1.Object) { o.SetDeletionTimestamp(deleting) }
	deletedBackup, deletedRestore := backup("a", "gone", "gone-1"), restore("a", "gone", etcdv1alpha1.RestoreRestoring)
	deleted(&deletedBackup)
	deleted(&deletedRestore)

	for _, tc := range []struct {
		name     string
		backups  []etcdv1alpha1.EtcdBackup
		restores []etcdv1alpha1.EtcdRestore
		want     metav1.ConditionStatus
		message  string
	}{
		{name: "nothing", want: metav1.ConditionTrue, message: "no backup or restore is running"},
		{
			name:     "backups between runs and finished restores",
			backups:  []etcdv1alpha1.EtcdBackup{backup("a", "nightly", ""), backup("b", "once", "")},
			restores: []etcdv1alpha1.EtcdRestore{restore("a", "ok", etcdv1alpha1.RestoreCompleted), restore("a", "bad", etcdv1alpha1.RestoreFailed)},
			want:     metav1.ConditionTrue, message: "no backup or restore is running",
		},
		{
			name:    "a backup Job under way",
			backups: []etcdv1alpha1.EtcdBackup{backup("a", "idle", ""), backup("a", "nightly", "nightly-29")},
			want:    metav1.ConditionFalse,
			message: "1 backup(s) or restore(s) running (EtcdBackup a/nightly); the operator can be upgraded once they finish",
		},
		{
			name:     "a restore pending",
			restores: []etcdv1alpha1.EtcdRestore{restore("a", "r", etcdv1alpha1.RestorePending)},
			want:     metav1.ConditionFalse,
			message:  "1 backup(s) or restore(s) running (EtcdRestore a/r); the operator can be upgraded once they finish",
		},
		{
			name:     "a restore restoring",
			restores: []etcdv1alpha1.EtcdRestore{restore("a", "r", etcdv1alpha1.RestoreRestoring)},
			want:     metav1.ConditionFalse,
			message:  "1 backup(s) or restore(s) running (EtcdRestore a/r); the operator can be upgraded once they finish",
		},
		{
			name:     "a restore not picked up yet",
			restores: []etcdv1alpha1.EtcdRestore{restore("a", "r", "")},
			want:     metav1.ConditionFalse,
			message:  "1 backup(s) or restore(s) running (EtcdRestore a/r); the operator can be upgraded once they finish",
		},
		{
			name:     "objects being deleted",
			backups:  []etcdv1alpha1.EtcdBackup{deletedBackup},
			restores: []etcdv1alpha1.EtcdRestore{deletedRestore},
			want:     metav1.ConditionTrue, message: "no backup or restore is running",
		},
		{
			name:     "many: a few named, sorted",
			backups:  []etcdv1alpha1.EtcdBackup{backup("b", "x", "x-1"), backup("a", "y", "y-1"), backup("c", "z", "z-1")},
			restores: []etcdv1alpha1.EtcdRestore{restore("a", "r", etcdv1alpha1.RestoreRestoring), restore("a", "q", etcdv1alpha1.RestorePending)},
			want:     metav1.ConditionFalse,
			message: "5 backup(s) or restore(s) running (EtcdBackup a/y, EtcdBackup b/x, EtcdBackup c/z and 2 more); " +
				"the operator can be upgraded once they finish",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := upgradeable(tc.backups, tc.restores)
			wantReason := etcdv1alpha1.ReasonNoBackupOrRestoreRunning
			if tc.want == metav1.ConditionFalse {
				wantReason = etcdv1alpha1.ReasonBackupOrRestoreRunning
			}
			if got.Type != operatorsv2.Upgradeable || got.Status != tc.want || got.Reason != wantReason || got.Message != tc.message {
				t.Errorf("got %s=%s %s %q\nwant Upgradeable=%s %s %q", got.Type, got.Status, got.Reason, got.Message, tc.want, wantReason, tc.message)
			}
			// The order the cache lists objects in must not change the condition.
			reversed := upgradeable(reversedCopy(tc.backups), reversedCopy(tc.restores))
			if reversed != got {
				t.Errorf("listed in reverse: %+v, want %+v", reversed, got)
			}
		})
	}
}

func reversedCopy[T any](items []T) []T {
	out := slices.Clone(items)
	slices.Reverse(out)
	return out
}

func TestNoUpgradeableConditionOutsideOLM(t *testing.T) {
	t.Setenv(operatorConditionNameEnv, "")
	cond, err := OLMUpgradeableCondition(nil)
	if cond != nil || err != nil {
		t.Errorf("without %s: %v, %v; want no condition and no error", operatorConditionNameEnv, cond, err)
	}
}

// operatorCondition does what operator-lib's condition does (get the object, set the condition
// in spec.conditions, update), for an OperatorCondition named here rather than found from the
// pod's environment, and counts the calls.
type operatorCondition struct {
	client     client.Client
	key        types.NamespacedName
	gets, sets atomic.Int32
}

func (c *operatorCondition) Get(ctx context.Context) (*metav1.Condition, error) {
	c.gets.Add(1)
	oc := &operatorsv2.OperatorCondition{}
	if err := c.client.Get(ctx, c.key, oc); err != nil {
		return nil, err
	}
	if cond := meta.FindStatusCondition(oc.Spec.Conditions, operatorsv2.Upgradeable); cond != nil {
		return cond, nil
	}
	return nil, fmt.Errorf("conditionType %s not found", operatorsv2.Upgradeable)
}

func (c *operatorCondition) Set(ctx context.Context, status metav1.ConditionStatus, opts ...conditions.Option) error {
	c.sets.Add(1)
	oc := &operatorsv2.OperatorCondition{}
	if err := c.client.Get(ctx, c.key, oc); err != nil {
		return err
	}
	cond := metav1.Condition{Type: operatorsv2.Upgradeable, Status: status}
	for _, opt := range opts {
		opt(&cond)
	}
	meta.SetStatusCondition(&oc.Spec.Conditions, cond)
	return c.client.Update(ctx, oc)
}

// Against a kube-apiserver with OLM's OperatorCondition CRD, and only this reconciler running:
// the statuses the test writes are the only ones there are.
func TestUpgradeableFollowsBackupsAndRestores(t *testing.T) {
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		CRDs:                  []*apiextensionsv1.CustomResourceDefinition{crds.OperatorCondition()},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, etcdv1alpha1.AddToScheme, operatorsv2.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, ns := range []string{"operators", "team"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	oc := &operatorsv2.OperatorCondition{ObjectMeta: metav1.ObjectMeta{Namespace: "operators", Name: "etcd-operator.v0.2.0"}}
	if err := c.Create(ctx, oc); err != nil {
		t.Fatal(err)
	}
	cond := &operatorCondition{client: c, key: client.ObjectKeyFromObject(oc)}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&UpgradeableReconciler{Client: mgr.GetClient(), Condition: cond}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mgrCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mgrCtx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { stop(); <-done })

	waitUpgradeable := func(status metav1.ConditionStatus, reason string, named ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := &operatorsv2.OperatorCondition{}
			err := c.Get(ctx, cond.key, got)
			var last *metav1.Condition
			if err == nil {
				last = meta.FindStatusCondition(got.Spec.Conditions, operatorsv2.Upgradeable)
				if last != nil && last.Status == status && last.Reason == reason &&
					!slices.ContainsFunc(named, func(n string) bool { return !strings.Contains(last.Message, n) }) {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("Upgradeable is %+v (%v); want %s, %s, naming %v", last, err, status, reason, named)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	setStatus := func(obj client.Object, mutate func()) {
		t.Helper()
		mutate()
		if err := c.Status().Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	// At start, with nothing running.
	waitUpgradeable(metav1.ConditionTrue, etcdv1alpha1.ReasonNoBackupOrRestoreRunning)

	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "nightly"},
		Spec: etcdv1alpha1.EtcdBackupSpec{
			ClusterName: "main",
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}},
		},
	}
	if err := c.Create(ctx, backup); err != nil {
		t.Fatal(err)
	}
	setStatus(backup, func() { backup.Status.Phase, backup.Status.ActiveJob = etcdv1alpha1.BackupRunning, "nightly-1" })
	waitUpgradeable(metav1.ConditionFalse, etcdv1alpha1.ReasonBackupOrRestoreRunning, "EtcdBackup team/nightly")

	restore := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "rollback"},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "nightly"}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: "main"},
		},
	}
	if err := c.Create(ctx, restore); err != nil {
		t.Fatal(err)
	}
	waitUpgradeable(metav1.ConditionFalse, etcdv1alpha1.ReasonBackupOrRestoreRunning, "EtcdBackup team/nightly", "EtcdRestore team/rollback")
	setStatus(restore, func() { restore.Status.Phase = etcdv1alpha1.RestoreRestoring })
	setStatus(backup, func() { backup.Status.Phase, backup.Status.ActiveJob = etcdv1alpha1.BackupCompleted, "" })
	waitUpgradeable(metav1.ConditionFalse, etcdv1alpha1.ReasonBackupOrRestoreRunning, "1 backup(s)", "EtcdRestore team/rollback")
	setStatus(restore, func() { restore.Status.Phase = etcdv1alpha1.RestoreCompleted })
	waitUpgradeable(metav1.ConditionTrue, etcdv1alpha1.ReasonNoBackupOrRestoreRunning)

	// Reconciles that find the condition as it should be do not write it. The reconciler works
	// on one key, one reconcile at a time: once the second has read the condition, the first
	// has ended.
	if err := c.Get(ctx, cond.key, oc); err != nil {
		t.Fatal(err)
	}
	sets := cond.sets.Load()
	for _, name := range []string{"weekly", "monthly"} {
		gets := cond.gets.Load()
		idle := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Spec: backup.Spec}
		if err := c.Create(ctx, idle); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for cond.gets.Load() == gets {
			if time.Now().After(deadline) {
				t.Fatalf("creating EtcdBackup %s did not wake the reconciler", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	after := &operatorsv2.OperatorCondition{}
	if err := c.Get(ctx, cond.key, after); err != nil {
		t.Fatal(err)
	}
	if cond.sets.Load() != sets || after.ResourceVersion != oc.ResourceVersion {
		t.Errorf("an unchanged condition was written again: %d set(s), resourceVersion %s → %s",
			cond.sets.Load()-sets, oc.ResourceVersion, after.ResourceVersion)
	}
}
