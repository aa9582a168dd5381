//go:build e2e

// Package e2e tests the operator as users run it: its image deployed in a real cluster, talking
// to a real API server, kubelet and container runtime. `make test-e2e` brings up the local
// cluster (hack/cluster), deploys the operator image built from this tree with `make deploy` and
// runs these tests with KUBECONFIG pointing at that cluster.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Where `make deploy` (config/default) puts the operator; overridable for other installs, such
// as OLM's.
var (
	operatorNamespace  = envOr("E2E_OPERATOR_NAMESPACE", "etcd-operator-system")
	operatorDeployment = envOr("E2E_OPERATOR_DEPLOYMENT", "etcd-operator-controller-manager")
	// The image make test-e2e built and deployed; empty skips the check that it is what runs.
	operatorImage = os.Getenv("E2E_OPERATOR_IMAGE")
)

const (
	// Generous for a loaded 2-core machine running four tests at once; a healthy local cluster
	// needs a few seconds.
	readyTimeout = 4 * time.Minute
	repoRoot     = "../.."
)

var k8sClient client.Client

func TestMain(m *testing.M) {
	if os.Getenv("KUBECONFIG") == "" {
		fmt.Fprintln(os.Stderr, "KUBECONFIG is not set: run these tests with make test-e2e")
		os.Exit(1)
	}
	cfg, err := config.GetConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeconfig: %v\n", err)
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, etcdv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		os.Exit(1)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "clientset: %v\n", err)
		os.Exit(1)
	}
	suiteLogs = startLogCollector(clientset)
	code := m.Run()
	// After every test: a secret logged by any of them is found here.
	followed := suiteLogs.stop()
	if err := operatorKeptItsLease(followed); err != nil {
		fmt.Fprintf(os.Stderr, "--- FAIL: OperatorKeptItsLease: %v\n", err)
		code = max(code, 1)
	}
	if checked, err := operatorLogsHoldNoSecret(clientset, followed); err != nil {
		fmt.Fprintf(os.Stderr, "--- FAIL: OperatorLogsHoldNoSecret: %v\n", err)
		code = max(code, 1)
	} else {
		fmt.Println("ok: the operator's logs:", checked)
	}
	os.Exit(code)
}

func TestCRDsAreEstablished(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "config/crd/bases/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases (err %v)", err)
	}
	for _, file := range files {
		for _, crd := range readObjects(t, file) {
			t.Run(crd.GetName(), func(t *testing.T) {
				live := &unstructured.Unstructured{}
				live.SetGroupVersionKind(crd.GroupVersionKind())
				waitFor(t, "CRD "+crd.GetName()+" Established", func(ctx context.Context) (bool, error) {
					// Not found is final: make test-e2e applied the CRDs before the tests started.
					if err := k8sClient.Get(ctx, client.ObjectKey{Name: crd.GetName()}, live); err != nil {
						return false, err
					}
					return conditionTrue(live, "Established"), nil
				})
			})
		}
	}
}

func TestOperatorDeploymentBecomesReady(t *testing.T) {
	deployment := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}
	waitFor(t, "operator Deployment "+key.String()+" rolled out and Available", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, key, deployment); err != nil {
			return false, err
		}
		return rolledOut(deployment), nil
	})

	if operatorImage == "" {
		return
	}
	manager := deployment.Spec.Template.Spec.Containers[0]
	if manager.Image != operatorImage {
		t.Fatalf("Deployment runs image %q, want %q (the one make test-e2e built)", manager.Image, operatorImage)
	}
	selector, err := metav1.LabelSelectorAsSelector(deployment.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := k8sClient.List(context.Background(), pods, client.InNamespace(operatorNamespace),
		client.MatchingLabelsSelector{Selector: selector}); err != nil {
		t.Fatal(err)
	}
	var ready int
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil && pod.Spec.Containers[0].Image == operatorImage && podReady(&pod) {
			ready++
		}
	}
	if want := int(*deployment.Spec.Replicas); ready != want {
		t.Fatalf("%d ready operator pods run %s, want %d", ready, operatorImage, want)
	}
}

func TestSampleEtcdClusterIsAccepted(t *testing.T) {
	ctx := context.Background()
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-smoke-"}}
	if err := k8sClient.Create(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Not waited for: the operator finishes the cleanup of what it created in the background.
		if err := k8sClient.Delete(context.Background(), namespace); err != nil {
			t.Errorf("delete namespace %s: %v", namespace.Name, err)
		}
	})

	samples, err := filepath.Glob(filepath.Join(repoRoot, "config/samples/etcd_*.yaml"))
	if err != nil || len(samples) == 0 {
		t.Fatalf("no samples in config/samples (err %v)", err)
	}
	for _, file := range samples {
		for _, sample := range readObjects(t, file) {
			sample.SetNamespace(namespace.Name)
			// Every sample must pass the API server's validation (schema, CEL); the EtcdCluster
			// is also stored, for the operator to act on.
			var opts []client.CreateOption
			if sample.GetKind() != "EtcdCluster" {
				opts = append(opts, client.DryRunAll)
			}
			if err := k8sClient.Create(ctx, sample, opts...); err != nil {
				t.Fatalf("%s %s from %s rejected: %v", sample.GetKind(), sample.GetName(), filepath.Base(file), err)
			}
		}
	}

	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(schema.GroupVersionKind{Group: "etcd.database.dev", Version: "v1alpha1", Kind: "EtcdCluster"})
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace.Name, Name: "example"}, cluster); err != nil {
		t.Fatalf("the sample EtcdCluster was not stored: %v", err)
	}
	if size, _, _ := unstructured.NestedInt64(cluster.Object, "spec", "size"); size != 3 {
		t.Fatalf("stored EtcdCluster has spec.size %d, want the sample's 3", size)
	}
}

// readObjects decodes every document of a YAML file.
func readObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	decoder := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objects []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objects
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(obj.Object) > 0 {
			objects = append(objects, obj)
		}
	}
}
