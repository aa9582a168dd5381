package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// A reconcile that fails before it can decide — the pods cannot be listed, a Service cannot
// be created — still writes status, saying why (Progressing, ReconcileError), and does not
// claim to have seen the spec's generation.
func TestClusterStatusIsWrittenWhenObserveOrServicesFail(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("the API server is busy")
	for _, tc := range []struct {
		name  string
		funcs interceptor.Funcs
	}{
		{"observe fails", interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if _, pods := list.(*corev1.PodList); pods {
					return unavailable
				}
				return c.List(ctx, list, opts...)
			},
		}},
		{"ensureServices fails", interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, service := obj.(*corev1.Service); service {
					return unavailable
				}
				return c.Create(ctx, obj, opts...)
			},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newScriptedCluster(t, 3, nil, nil)
			a.r.Client = interceptor.NewClient(a.r.Client.(client.WithWatch), tc.funcs)
			if _, err := a.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)}); err == nil {
				t.Fatal("the reconcile reported success")
			}
			got := &etcdv1alpha1.EtcdCluster{}
			if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), got); err != nil {
				t.Fatal(err)
			}
			progressing := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionProgressing)
			if progressing == nil || progressing.Reason != etcdv1alpha1.ReasonReconcileError || !strings.Contains(progressing.Message, "the API server is busy") {
				t.Fatalf("Progressing after a failed reconcile: %+v, want reason %s with the error", progressing, etcdv1alpha1.ReasonReconcileError)
			}
			if got.Status.ObservedGeneration == got.Generation {
				t.Fatalf("observedGeneration %d recorded by a reconcile that failed", got.Status.ObservedGeneration)
			}
		})
	}
}

// observedGeneration says the spec of that generation was acted on: a backup reconcile that
// fails before it does anything leaves it as it was.
func TestBackupObservedGenerationOnlyOnSuccess(t *testing.T) {
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "backup-uid", Generation: 2},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c",
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
		Status: etcdv1alpha1.EtcdBackupStatus{ObservedGeneration: 1},
	}
	failing := true
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(backup).WithStatusSubresource(backup).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if failing {
				return apierrors.NewServiceUnavailable("the API server is busy")
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	r := &EtcdBackupReconciler{Client: k8s, APIReader: k8s, Now: time.Now}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}
	observed := func() int64 {
		t.Helper()
		got := &etcdv1alpha1.EtcdBackup{}
		if err := k8s.Get(t.Context(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return got.Status.ObservedGeneration
	}

	if _, err := r.Reconcile(t.Context(), req); err == nil {
		t.Fatal("a reconcile that could not list its Jobs reported success")
	}
	if got := observed(); got != 1 {
		t.Fatalf("observedGeneration after a failed reconcile: %d, want 1", got)
	}
	failing = false
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := observed(); got != 2 {
		t.Fatalf("observedGeneration after a reconcile that succeeded: %d, want 2", got)
	}
}

// The same for a restore: a transient failure to read its source leaves observedGeneration; a
// source found missing is a verdict on this generation's spec, and records it.
func TestRestoreObservedGenerationOnlyOnSuccess(t *testing.T) {
	rs := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "restore-uid", Generation: 2, Finalizers: []string{restoreFinalizer}},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "b"}},
			Target: etcdv1alpha1.RestoreTarget{ClusterName: "c"},
		},
		// Started past the wait for a source that may yet come (sourceWait): missing is final.
		Status: etcdv1alpha1.EtcdRestoreStatus{ObservedGeneration: 1, Phase: etcdv1alpha1.RestorePending, StartTime: ptrTime(time.Now().Add(-2 * sourceWait))},
	}
	failing := true
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(rs).WithStatusSubresource(rs).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, backup := obj.(*etcdv1alpha1.EtcdBackup); backup && failing {
				return apierrors.NewServiceUnavailable("the API server is busy")
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	r := &EtcdRestoreReconciler{Client: k8s, APIReader: k8s, Now: time.Now, Keyspaces: sameKeyspaceEverywhere}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rs)}
	observed := func() *etcdv1alpha1.EtcdRestore {
		t.Helper()
		got := &etcdv1alpha1.EtcdRestore{}
		if err := k8s.Get(t.Context(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	if _, err := r.Reconcile(t.Context(), req); err == nil {
		t.Fatal("a reconcile that could not read its source reported success")
	}
	if got := observed(); got.Status.ObservedGeneration != 1 {
		t.Fatalf("observedGeneration after a failed reconcile: %d, want 1", got.Status.ObservedGeneration)
	}
	failing = false
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := observed(); got.Status.Phase != etcdv1alpha1.RestoreFailed || got.Status.ObservedGeneration != 2 {
		t.Fatalf("after the missing source was seen: phase %s, observedGeneration %d; want Failed, 2", got.Status.Phase, got.Status.ObservedGeneration)
	}
}
