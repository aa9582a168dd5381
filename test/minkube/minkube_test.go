// Package minkube proves the CSV's minKubeVersion: the bundle's CRDs install on a real
// kube-apiserver of that minor version (built from the module proxy by hack/tools/kube-min), the
// samples are accepted there, and the version rules judge updates.
// `make test-minkube` also runs api/'s contract tests against that server.
//
// 1.30 (OpenShift 4.17): the two version rules compare major and minor with split() and int(),
// which 1.30 has. Until 2026-11-26 they used CEL's semver() and isSemver(): Kubernetes added that
// library in 1.33, and an API server offers a library to new expressions only from its
// compatibility version on, one minor below its own, so the floor was 1.34. v1.30.14 refused the
// EtcdCluster CRD with those rules (seen: "undeclared reference to 'isSemver'", "... to 'minor'").
//
// The version the server reports is the one stamped into it at build time, and the stamp also
// sets its compatibility version; so the test checks the stamp against the pinned module too.
package minkube

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

const repoRoot = "../.."

var (
	restConfig *rest.Config
	k8sClient  client.Client
	// installErr is why the bundle's CRDs did not install, if they did not: reported by a test
	// rather than by TestMain, so that the version checks still run and say which server it was.
	installErr error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets := os.Getenv("MIN_KUBE_ASSETS")
	if assets == "" {
		fmt.Fprintln(os.Stderr, "MIN_KUBE_ASSETS is not set: run these tests with `make test` or `make test-minkube`, which build the oldest supported kube-apiserver")
		return 1
	}
	// Paths, not KUBEBUILDER_ASSETS: `make test` sets that to the current Kubernetes for the
	// other packages, and envtest would prefer it to any directory given here.
	env := &envtest.Environment{}
	env.ControlPlane.GetAPIServer().Path = filepath.Join(assets, "kube-apiserver")
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(assets, "etcd")}
	var err error
	restConfig, err = env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest with %s: %v\n", assets, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	k8sClient, err = client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		return 1
	}
	installErr = installBundleCRDs()
	return m.Run()
}

// The server must be the minor version the CSV names as the oldest, so that the two cannot
// drift apart: raising minKubeVersion without moving hack/tools/kube-min (or the reverse) fails.
func TestServerIsTheCSVMinKubeVersion(t *testing.T) {
	server := serverVersion(t)
	csv := bundleCSV(t)
	if csv.Spec.MinKubeVersion == "" {
		t.Fatal("the bundle's CSV has no minKubeVersion")
	}
	minKube, err := utilversion.ParseGeneric(csv.Spec.MinKubeVersion)
	if err != nil {
		t.Fatalf("CSV minKubeVersion %q: %v", csv.Spec.MinKubeVersion, err)
	}
	if server.Major() != minKube.Major() || server.Minor() != minKube.Minor() {
		t.Fatalf("the CSV's minKubeVersion is %s, but these tests ran against kube-apiserver %s: "+
			"set minKubeVersion to %d.%d.0 in config/manifests/bases and run `make bundle catalog`, "+
			"or pin hack/tools/kube-min at the version minKubeVersion names", minKube, server, server.Major(), server.Minor())
	}
}

// The version stamped into the binary must be the module it was built from: the stamp sets the
// server's compatibility version, hence which CEL libraries new CRDs may use.
func TestServerIsThePinnedKubernetes(t *testing.T) {
	server := serverVersion(t)
	mod, err := os.ReadFile(filepath.Join(repoRoot, "hack", "tools", "kube-min", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^require k8s\.io/kubernetes (v\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("hack/tools/kube-min/go.mod: no `require k8s.io/kubernetes vX.Y.Z` line")
	}
	if got, want := "v"+server.String(), string(m[1]); got != want {
		t.Fatalf("kube-apiserver reports %s, hack/tools/kube-min pins %s: rebuild it with `make envtest-min-assets`", got, want)
	}
}

func TestBundleCRDsInstall(t *testing.T) {
	if installErr != nil {
		t.Fatalf("kube-apiserver %s refused the bundle's CRDs: %v", serverVersion(t), installErr)
	}
}

// Every sample (they are also the CSV's alm-examples) is accepted, so each kind's CEL rules
// compile and run on create.
func TestSamplesAreAccepted(t *testing.T) {
	requireCRDs(t)
	files, err := filepath.Glob(filepath.Join(repoRoot, "config", "samples", "etcd_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, file := range files {
		obj := readObject(t, file)
		kinds[obj.GetKind()] = true
		if err := k8sClient.Create(t.Context(), obj); err != nil {
			t.Errorf("%s refused: %v", filepath.Base(file), err)
			continue
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), obj) })
	}
	for _, kind := range []string{"EtcdCluster", "EtcdBackup", "EtcdRestore"} {
		if !kinds[kind] {
			t.Errorf("config/samples has no %s", kind)
		}
	}
}

// The version rules compare versions: a downgrade below the running version and a skipped minor
// are refused, the next minor is accepted.
func TestVersionChangesAreJudged(t *testing.T) {
	requireCRDs(t)
	cluster := readObject(t, filepath.Join(repoRoot, "config", "samples", "etcd_v1alpha1_etcdcluster.yaml"))
	cluster.SetName("semver")
	if err := unstructured.SetNestedField(cluster.Object, "3.6.16", "spec", "version"); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(t.Context(), cluster); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), cluster) })
	if err := unstructured.SetNestedField(cluster.Object, "3.6.16", "status", "currentVersion"); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Status().Update(t.Context(), cluster); err != nil {
		t.Fatalf("write status.currentVersion: %v", err)
	}

	for _, tc := range []struct {
		version string
		want    string // empty: accepted
	}{
		{"3.5.21", "version cannot be downgraded below the running version 3.6.16"},
		{"3.8.0", "version can be at most one minor version above the running version 3.6.16"},
		{"3.7.3", ""},
	} {
		update := cluster.DeepCopy()
		if err := unstructured.SetNestedField(update.Object, tc.version, "spec", "version"); err != nil {
			t.Fatal(err)
		}
		err := k8sClient.Update(t.Context(), update)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("3.6.16 -> %s refused: %v", tc.version, err)
		case tc.want != "" && err == nil:
			t.Errorf("3.6.16 -> %s accepted; want refused with %q", tc.version, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("3.6.16 -> %s refused with\n  %v\nwant a message containing\n  %q", tc.version, err, tc.want)
		}
	}
}

// installBundleCRDs creates the CRDs of bundle/manifests, the files OLM installs (test/olm checks
// they are config/crd's), and waits until they are served.
func installBundleCRDs() error {
	files, err := filepath.Glob(filepath.Join(repoRoot, "bundle", "manifests", "*.yaml"))
	if err != nil {
		return err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if !bytes.Contains(data, []byte("\nkind: CustomResourceDefinition\n")) {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(file), err)
		}
		crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
		if err := k8sClient.Create(context.Background(), crd); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Base(file), err)
		}
		crds = append(crds, crd)
	}
	if len(crds) != 3 {
		return fmt.Errorf("bundle/manifests has %d CRDs, want 3", len(crds))
	}
	return envtest.WaitForCRDs(restConfig, crds, envtest.CRDInstallOptions{MaxTime: time.Minute, PollInterval: 100 * time.Millisecond})
}

func requireCRDs(t *testing.T) {
	t.Helper()
	if installErr != nil {
		t.Fatal("the bundle's CRDs did not install (see TestBundleCRDsInstall)")
	}
}

func serverVersion(t *testing.T) *utilversion.Version {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	v, err := utilversion.ParseSemantic(info.GitVersion)
	if err != nil {
		t.Fatalf("server version %q: %v", info.GitVersion, err)
	}
	return v
}

func bundleCSV(t *testing.T) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "bundle", "manifests", "etcd-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.Unmarshal(data, csv); err != nil {
		t.Fatalf("bundle CSV: %v", err)
	}
	return csv
}

func readObject(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &obj.Object); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	obj.SetNamespace("default")
	return obj
}
