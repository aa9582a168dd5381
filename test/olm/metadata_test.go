package olm

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// openShiftFeatures are the features.operators.openshift.io annotations OpenShift's console
// filters operators by (OpenShift 4.14 on), with the value each must have and why: the CSV
// claims a feature only where the code and its tests show it. disconnected is judged from the
// images themselves (imagesPinnedByDigest).
var openShiftFeatures = map[string]string{
	// Pinned by digest only in a release's bundle (make bundle USE_IMAGE_DIGESTS=1).
	"disconnected": "",
	// The operator hands OLM's proxy variables to its pods (operator-lib's proxy package); on a
	// cluster, a backup reaches object storage known only to a proxy through it, and the operator's
	// and the agent's etcd traffic never takes it (test/e2e's
	// TestABackupReachesObjectStorageOnlyThroughTheProxy).
	"proxy-aware": "true",
	// Not built with FIPS-validated cryptography, nor tested in a FIPS cluster.
	"fips-compliant": "false",
	// The operator and etcd keep their own TLS settings; OpenShift's TLS security profile is not read.
	"tls-profiles": "false",
	// S3 backups use static keys from a Secret: no short-lived cloud tokens.
	"token-auth-aws":   "false",
	"token-auth-azure": "false",
	"token-auth-gcp":   "false",
	// Not a network function, a network plugin or a storage driver.
	"cnf": "false",
	"cni": "false",
	"csi": "false",
}

const featurePrefix = "features.operators.openshift.io/"

// The CSV states every OpenShift feature, "true" or "false" (an absent one is read as unknown),
// and claims disconnected installs only when every image it runs is pinned by digest: mirrors
// for disconnected clusters serve images by digest.
func TestCSVStatesItsOpenShiftFeatures(t *testing.T) {
	checkOpenShiftFeatures(t, loadBundle(t).CSV)
}

func checkOpenShiftFeatures(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion) {
	t.Helper()
	for name, value := range csv.Annotations {
		if feature, ok := strings.CutPrefix(name, featurePrefix); ok {
			if _, known := openShiftFeatures[feature]; !known {
				t.Errorf("the CSV claims %s, which this test does not know: add it to openShiftFeatures with the evidence", name)
			}
			if value != "true" && value != "false" {
				t.Errorf("%s: %q, want \"true\" or \"false\"", name, value)
			}
		}
	}
	for _, feature := range slices.Sorted(maps.Keys(openShiftFeatures)) {
		want := openShiftFeatures[feature]
		if feature == "disconnected" {
			want = fmt.Sprint(imagesPinnedByDigest(t, csv))
		}
		got, ok := csv.Annotations[featurePrefix+feature]
		switch {
		case !ok:
			t.Errorf("the CSV lacks %s%s: want %q", featurePrefix, feature, want)
		case got != want:
			t.Errorf("%s%s: %q, want %q", featurePrefix, feature, got, want)
		}
	}
}

var digestReference = regexp.MustCompile(`^[a-z0-9]+([._:/-][a-z0-9]+)*@sha256:[a-f0-9]{64}$`)

// imagesPinnedByDigest says whether every image of the CSV is pinned by digest: the operator's
// (containerImage, its container's), every RELATED_IMAGE_* it hands on, and every relatedImage.
func imagesPinnedByDigest(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion) bool {
	t.Helper()
	images := []string{csv.Annotations["containerImage"]}
	for _, c := range managerDeployment(t, csv).Spec.Template.Spec.Containers {
		images = append(images, c.Image)
		for _, env := range c.Env {
			if strings.HasPrefix(env.Name, "RELATED_IMAGE_") {
				images = append(images, env.Value)
			}
		}
	}
	for _, ri := range csv.Spec.RelatedImages {
		images = append(images, ri.Image)
	}
	return !slices.ContainsFunc(images, func(image string) bool { return !digestReference.MatchString(image) })
}

// The bundle says which versions it upgrades from in one step, as the catalog's head entry does
// (make catalog copies it there): every release the catalog serves (OLM_RELEASES), not itself.
func TestBundleSkipsEveryEarlierRelease(t *testing.T) {
	csv := loadBundle(t).CSV
	skipRange, ok := csv.Annotations["olm.skipRange"]
	if !ok {
		t.Fatal("the CSV has no olm.skipRange annotation: make bundle sets it from OLM_RELEASES")
	}
	oldest := semver.Version{}
	releases := olmReleases(t)
	for i, v := range slices.Sorted(maps.Keys(releases)) {
		if version := semver.MustParse(v); i == 0 || version.LT(oldest) {
			oldest = version
		}
	}
	version := csv.Spec.Version.Version
	if want := fmt.Sprintf(">=%s <%s", oldest, version); skipRange != want {
		t.Errorf("olm.skipRange %q, want %q (the oldest release in OLM_RELEASES up to this version)", skipRange, want)
	}
	skipped, err := semver.ParseRange(skipRange)
	if err != nil {
		t.Fatalf("olm.skipRange %q: %v", skipRange, err)
	}
	for v := range releases {
		if !skipped(semver.MustParse(v)) {
			t.Errorf("olm.skipRange %q does not cover release %s", skipRange, v)
		}
	}
	if skipped(version) {
		t.Errorf("olm.skipRange %q covers the bundle's own version %s", skipRange, version)
	}
}

// almExamples decodes the CSV's alm-examples.
func almExamples(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion) map[string]*unstructured.Unstructured {
	t.Helper()
	var examples []map[string]any
	if err := json.Unmarshal([]byte(csv.Annotations["alm-examples"]), &examples); err != nil {
		t.Fatalf("alm-examples: %v", err)
	}
	byKind := map[string]*unstructured.Unstructured{}
	for _, e := range examples {
		u := &unstructured.Unstructured{Object: e}
		if _, dup := byKind[u.GetKind()]; dup {
			t.Fatalf("alm-examples has two %s", u.GetKind())
		}
		byKind[u.GetKind()] = u
	}
	return byKind
}

// The console's "Create" forms start from alm-examples, so together they make a working set: the
// EtcdBackup backs up the example EtcdCluster, the EtcdRestore restores that backup into a new
// cluster whose name is free, and the clusters run the default etcd version, the one whose image
// the CSV lists in relatedImages (and a disconnected cluster has mirrored).
func TestALMExamplesWorkTogether(t *testing.T) {
	examples := almExamples(t, loadBundle(t).CSV)
	field := func(kind string, path ...string) string {
		t.Helper()
		u, ok := examples[kind]
		if !ok {
			t.Fatalf("alm-examples has no %s", kind)
		}
		v, _, err := unstructured.NestedString(u.Object, path...)
		if err != nil || v == "" {
			t.Fatalf("alm-examples: %s has no %s (%v)", kind, strings.Join(path, "."), err)
		}
		return v
	}
	cluster := examples["EtcdCluster"].GetName()
	if got := field("EtcdBackup", "spec", "clusterName"); got != cluster {
		t.Errorf("the example EtcdBackup backs up %q, the example EtcdCluster is %q", got, cluster)
	}
	if got, backup := field("EtcdRestore", "spec", "source", "backup", "name"), examples["EtcdBackup"].GetName(); got != backup {
		t.Errorf("the example EtcdRestore restores backup %q, the example EtcdBackup is %q", got, backup)
	}
	if mode := field("EtcdRestore", "spec", "target", "mode"); mode == string(etcdv1alpha1.RestoreNew) {
		if got := field("EtcdRestore", "spec", "target", "clusterName"); got == cluster {
			t.Errorf("the example EtcdRestore makes a new cluster %q, the name of the example EtcdCluster", got)
		}
	}
	for kind, path := range map[string][]string{
		"EtcdCluster": {"spec", "version"},
		"EtcdRestore": {"spec", "target", "cluster", "version"},
	} {
		if got := field(kind, path...); got != etcdv1alpha1.DefaultEtcdVersion {
			t.Errorf("the example %s runs etcd %s, want the default version %s, whose image the CSV lists", kind, got, etcdv1alpha1.DefaultEtcdVersion)
		}
	}
}

// Every alm-example is accepted by a real kube-apiserver with the bundle's CRDs, schema and CEL
// rules: the console would otherwise offer a form that cannot be saved.
func TestALMExamplesAreAcceptedByTheBundleCRDs(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through `make test`")
	}
	bundle := loadBundle(t)
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(bundle.V1CRDs))
	for _, crd := range bundle.V1CRDs {
		crds = append(crds, crd.DeepCopy())
	}
	env := &envtest.Environment{CRDs: crds, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	k8s, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	examples := almExamples(t, bundle.CSV)
	for _, kind := range slices.Sorted(maps.Keys(examples)) {
		u := examples[kind]
		u.SetNamespace(corev1.NamespaceDefault)
		if err := k8s.Create(t.Context(), u); err != nil {
			t.Errorf("alm-examples: the API server refused the %s: %v", kind, err)
		}
	}
}
