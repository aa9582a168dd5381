package controllers_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Where cert-manager is not installed (a kube-apiserver of its own, without cert-manager's
// CRDs), the operator starts and runs the other providers; a cluster that asks for cert-manager
// is told what to install, with a Warning event, and nothing of it is created.
func TestWithoutCertManagerItsClustersAreToldWhatToInstallAndNothingIsCreated(t *testing.T) {
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := etcdv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := newTestManager(cfg, scheme)
	if err != nil {
		t.Fatalf("the operator does not start without cert-manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-stopped })
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "no-cert-manager"}}
	if err := k8s.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	wanting := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "wants-cm", Namespace: ns.Name}}
	wanting.Spec.Size = 1
	certManagerSpec(wanting)
	other := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "operator-tls", Namespace: ns.Name},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 1, TLS: &etcdv1alpha1.TLSSpec{}}}
	for _, c := range []*etcdv1alpha1.EtcdCluster{wanting, other} {
		if err := k8s.Create(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}

	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(wanting), wanting); err != nil {
			return err
		}
		for _, condType := range []string{etcdv1alpha1.ConditionDegraded, etcdv1alpha1.ConditionAvailable} {
			want := map[string]metav1.ConditionStatus{etcdv1alpha1.ConditionDegraded: metav1.ConditionTrue, etcdv1alpha1.ConditionAvailable: metav1.ConditionFalse}[condType]
			cond := meta.FindStatusCondition(wanting.Status.Conditions, condType)
			if cond == nil || cond.Status != want || cond.Reason != etcdv1alpha1.ReasonCertManagerNotInstalled ||
				!strings.Contains(cond.Message, "install cert-manager") || !strings.Contains(cond.Message, "cert-manager.io/v1") {
				return fmt.Errorf("%s = %+v, want %s %s naming what to install", condType, cond, want, etcdv1alpha1.ReasonCertManagerNotInstalled)
			}
		}
		return nil
	})
	eventually(t, 20*time.Second, func() error {
		events := &eventsv1.EventList{}
		if err := k8s.List(t.Context(), events, client.InNamespace(ns.Name)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Regarding.Name == wanting.Name && e.Type == corev1.EventTypeWarning && e.Reason == etcdv1alpha1.ReasonCertManagerNotInstalled {
				return nil
			}
		}
		return fmt.Errorf("no Warning event %s", etcdv1alpha1.ReasonCertManagerNotInstalled)
	})
	// The other provider's cluster is run meanwhile: its CA and first member are made.
	eventually(t, 20*time.Second, func() error {
		pods := &corev1.PodList{}
		if err := k8s.List(t.Context(), pods, client.InNamespace(ns.Name), client.MatchingLabels{resources.LabelCluster: other.Name}); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no member of the cluster of provider Operator")
		}
		return nil
	})

	selector := client.MatchingLabels{resources.LabelCluster: wanting.Name}
	for _, list := range []client.ObjectList{&corev1.PodList{}, &corev1.SecretList{}, &corev1.ServiceList{}, &corev1.PersistentVolumeClaimList{}} {
		if err := k8s.List(t.Context(), list, client.InNamespace(ns.Name), selector); err != nil {
			t.Fatal(err)
		}
		if n := meta.LenList(list); n != 0 {
			t.Errorf("%T: %d objects made for a cluster whose certificates cannot be had", list, n)
		}
	}
}
