package guide

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-database/etcd-operator/test/certmanager"
)

// The namespace the pages' namespaced objects are validated in.
const checkNamespace = "guide-check"

// Groups whose objects the pages show but whose APIs envtest does not serve (OLM's): they are
// decoded, not validated.
var unservedGroups = []string{"operators.coreos.com"}

// Every object the README and the guide's pages show is one the API server accepts as written
// (a dry-run create with strict field validation against this tree's CRDs), so a renamed or
// misspelt field, a wrong enum or a broken CEL rule in a page is caught by `make test`, not by
// a user pasting it. make test-guide runs the pages on a real cluster.
func TestPagesShowValidObjects(t *testing.T) {
	k8s := startAPIServer(t)
	pages, err := Pages(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	validated := 0
	for _, page := range pages {
		blocks, err := Blocks(page.Text)
		if err != nil {
			t.Fatalf("%s: %v", page.Name, err)
		}
		for _, block := range blocks {
			for _, text := range Manifests(block) {
				objects, err := Objects(text)
				if err != nil {
					t.Errorf("%s:%d: %v", page.Name, block.Line, err)
					continue
				}
				for _, obj := range objects {
					if !served(obj) {
						continue
					}
					if err := validate(k8s, obj); err != nil {
						t.Errorf("%s:%d: %s %s: %v", page.Name, block.Line, obj.GetKind(), obj.GetName(), err)
					}
					validated++
				}
			}
		}
	}
	if validated == 0 {
		t.Fatal("no object found in the README or docs/guide")
	}
	t.Logf("%d objects validated", validated)
}

// The check refuses what a user's API server would: a misspelt field, a value out of its enum.
func TestValidateRefusesWhatTheAPIServerRefuses(t *testing.T) {
	k8s := startAPIServer(t)
	for name, manifest := range map[string]string{
		"unknown field": "apiVersion: etcd.database.dev/v1alpha1\nkind: EtcdCluster\nmetadata: {name: a}\nspec: {size: 3, version: 3.6.16, storage: {size: 1Gi}, sise: 3}\n",
		"enum":          "apiVersion: etcd.database.dev/v1alpha1\nkind: EtcdRestore\nmetadata: {name: a}\nspec: {source: {backup: {name: b}}, target: {mode: Sideways, clusterName: c}}\n",
	} {
		objects, err := Objects(manifest)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(k8s, objects[0]); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func served(obj *unstructured.Unstructured) bool {
	group := obj.GroupVersionKind().Group
	for _, g := range unservedGroups {
		if group == g {
			return false
		}
	}
	return true
}

// validate asks the API server to create obj without storing it. Names a page leaves to the
// shell (`$image`) stay as they are: they are values, which the schemas do not constrain.
func validate(k8s client.Client, obj *unstructured.Unstructured) error {
	obj = obj.DeepCopy()
	if obj.GetKind() != "Namespace" {
		obj.SetNamespace(checkNamespace)
	}
	return k8s.Create(context.Background(), obj, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
}

// One API server for the package's tests, started by the first that needs it.
var apiServer struct {
	once   sync.Once
	env    *envtest.Environment
	client client.Client
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if apiServer.env != nil {
		if err := apiServer.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}
	os.Exit(code)
}

func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run these tests with `make test`, which builds kube-apiserver and etcd")
	}
	root := repoRoot(t)
	apiServer.once.Do(func() {
		ctrllog.SetLogger(logr.Discard())
		// cert-manager's CRDs too: the pages show its issuers and Certificates.
		certManagerCRDs, err := certmanager.CRDs()
		if err != nil {
			apiServer.err = err
			return
		}
		apiServer.env = &envtest.Environment{
			CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases"), certManagerCRDs},
			ErrorIfCRDPathMissing: true,
		}
		cfg, err := apiServer.env.Start()
		if err != nil {
			apiServer.err = fmt.Errorf("start envtest: %w", err)
			return
		}
		k8s, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
		if err != nil {
			apiServer.err = err
			return
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: checkNamespace}}
		apiServer.client, apiServer.err = k8s, k8s.Create(context.Background(), ns)
	})
	if apiServer.err != nil {
		t.Fatal(apiServer.err)
	}
	return apiServer.client
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(fmt.Errorf("the repository's root: %w", err))
	}
	return root
}
