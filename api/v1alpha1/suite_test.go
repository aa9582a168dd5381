package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// These tests run the CRDs in a real kube-apiserver (envtest), because only the API server can
// tell whether the OpenAPI schema, the defaults and the CEL rules do what the contract says.

var (
	testEnv    *envtest.Environment
	restConfig *rest.Config
	k8sClient  client.Client
	nameSeq    atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(runWithEnvtest(m))
}

func runWithEnvtest(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run these tests with `make test`, which builds kube-apiserver and etcd")
		return 1
	}
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	restConfig, err = testEnv.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := etcdv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	k8sClient, err = client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		return 1
	}
	return m.Run()
}

// object parses a manifest of one of our kinds into an unstructured object in the default
// namespace, with a unique name unless the manifest sets one.
func object(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("bad test manifest: %v\n%s", err, manifest)
	}
	if u.GetAPIVersion() == "" {
		u.SetAPIVersion(etcdv1alpha1.GroupVersion.String())
	}
	if u.GetName() == "" {
		u.SetName(fmt.Sprintf("%s-%d", strings.ToLower(u.GetKind()), nameSeq.Add(1)))
	}
	u.SetNamespace("default")
	return u
}

func ctx(t *testing.T) context.Context {
	return t.Context()
}

// create creates obj and fails the test if the API server refuses it.
func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8sClient.Create(ctx(t), obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), obj) })
}

// expectRejected fails the test unless err is a rejection whose message contains want.
func expectRejected(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want rejection containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("rejected with\n  %v\nwant a message containing\n  %q", err, want)
	}
}
