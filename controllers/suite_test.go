package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/controllers"
	"github.com/etcd-database/etcd-operator/internal/platform"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/test/certmanager"
)

// The reconcilers run in a real manager against a real kube-apiserver (envtest), with the
// cache the operator runs with. The tests read and write through a client of their own, past
// that cache, as users do.
var (
	k8sClient client.Client
	// managerCache is the manager's cache, to see what the operator holds in memory.
	managerCache cache.Cache
)

func TestMain(m *testing.M) {
	os.Exit(runWithManager(m))
}

func runWithManager(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run these tests with `make test`")
		return 1
	}
	// Reconcile errors show in the test output; the rest of the manager's logs would drown them.
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	// With cert-manager's CRDs, as where it is installed; the tests play cert-manager's part.
	certManagerCRDs, err := certmanager.CRDs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager's CRDs: %v\n", err)
		return 1
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases"), certManagerCRDs},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := etcdv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	mgr, err := newTestManager(cfg, scheme)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager stopped: %v\n", err)
		}
	}()
	if k8sClient, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		return 1
	}
	managerCache = mgr.GetCache()
	return m.Run()
}

// newTestManager is the manager as main.go makes it: cert-manager found, or not, from what the
// API server serves.
func newTestManager(cfg *rest.Config, scheme *runtime.Scheme) (ctrl.Manager, error) {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	certManager, err := platform.CertManagerServed(d)
	if err != nil {
		return nil, err
	}
	cacheOptions := controllers.CacheOptions(nil)
	if certManager {
		cacheOptions = controllers.WithCertificates(cacheOptions)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, Cache: cacheOptions,
		// A test may run a manager of its own beside the suite's, with controllers of the same names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	if err := controllers.SetupWithManager(mgr, controllers.Options{
		DefaultEtcdImages: resources.EtcdImages{Repository: "registry.test/etcd"}, AgentImage: "registry.test/etcd-operator:test",
		CertManager: certManager, ArchiverReports: archiverReports,
	}); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	return mgr, nil
}

// eventually polls check until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
