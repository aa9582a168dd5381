package olm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	validationerrors "github.com/operator-framework/api/pkg/validation/errors"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// The validators of `operator-sdk bundle validate --select-optional suite=operatorframework` and
// of `--select-optional name=operatorhub`, which OperatorHub's pipeline runs, at the version of
// operator-framework/api this project pins. The Kubernetes version is the cluster's, so that an
// API removed by then is an error.
func TestBundlePassesOperatorHubValidation(t *testing.T) {
	checkOperatorHubValidation(t, loadBundle(t))
}

func checkOperatorHubValidation(t *testing.T, bundle *manifests.Bundle) {
	t.Helper()
	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.AlphaDeprecatedAPIsValidator,
		validation.GoodPracticesValidator,
		validation.OperatorHubValidator, //nolint:staticcheck // the community pipeline still runs it
	)
	objects := append(bundle.ObjectsToValidate(), map[string]string{"k8s-version": kubernetesMinorVersion(t)})

	for _, result := range validators.Validate(objects...) {
		for _, e := range result.Errors {
			t.Errorf("%s: %v", result.Name, e)
		}
		for _, w := range result.Warnings {
			// The operatorhub validator always adds a warning that it is deprecated.
			if w.Type == validationerrors.ErrorDeprecatedValidator {
				continue
			}
			t.Errorf("%s: %v", result.Name, w)
		}
	}
}

// kubernetesMinorVersion is the Makefile's KUBERNETES_VERSION as MAJOR.MINOR.
func kubernetesMinorVersion(t *testing.T) string {
	t.Helper()
	makefile, err := os.ReadFile(repoPath("Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KUBERNETES_VERSION \?= v(\d+\.\d+)\.\d+$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("Makefile: no KUBERNETES_VERSION ?= vX.Y.Z")
	}
	return string(m[1])
}

// The CSV must own every CRD the bundle ships and no other, and the bundle must ship the CRDs
// `make manifests` generates; OLM refuses a CSV whose owned CRDs are missing from its bundle.
func TestCSVOwnsTheBundleCRDs(t *testing.T) {
	bundle := loadBundle(t)

	files, err := filepath.Glob(repoPath("config", "crd", "bases", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	generated := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, file := range files {
		for _, crd := range decodeYAMLFile[apiextensionsv1.CustomResourceDefinition](t, file) {
			generated[crd.Name] = &crd
		}
	}
	if len(generated) == 0 {
		t.Fatal("no CRDs in config/crd/bases")
	}

	shipped := sets.New[string]()
	for _, crd := range bundle.V1CRDs {
		key := crd.Name
		shipped.Insert(key)
		want, ok := generated[key]
		if !ok {
			t.Errorf("bundle ships CRD %s, which config/crd/bases does not have", key)
			continue
		}
		if !equality.Semantic.DeepEqual(crd.Spec, want.Spec) {
			t.Errorf("bundle's CRD %s differs from config/crd/bases: run `make bundle`", key)
		}
	}
	for name := range generated {
		if !shipped.Has(name) {
			t.Errorf("config/crd/bases has CRD %s, which the bundle does not ship: run `make bundle`", name)
		}
	}

	servedVersions := sets.New[string]()
	for _, crd := range bundle.V1CRDs {
		for _, v := range crd.Spec.Versions {
			if v.Served {
				servedVersions.Insert(fmt.Sprintf("%s %s %s", crd.Name, v.Name, crd.Spec.Names.Kind))
			}
		}
	}
	owned := sets.New[string]()
	for _, o := range bundle.CSV.Spec.CustomResourceDefinitions.Owned {
		owned.Insert(fmt.Sprintf("%s %s %s", o.Name, o.Version, o.Kind))
		// The console shows these, and scorecard's OLM suite fails without them.
		if o.DisplayName == "" || o.Description == "" || len(o.Resources) == 0 ||
			len(o.SpecDescriptors) == 0 || len(o.StatusDescriptors) == 0 {
			t.Errorf("owned CRD %s lacks a displayName, description, resources, spec or status descriptors: "+
				"add +operator-sdk:csv markers to its type in api/", o.Name)
		}
	}
	if !owned.Equal(servedVersions) {
		t.Errorf("CSV owns %v, the bundle's CRDs serve %v", sets.List(owned), sets.List(servedVersions))
	}
}

// What the operator's service account may do under OLM is only what the CSV says, so the CSV must
// grant exactly what config/manifests (the input of `make bundle`) binds to that account, split
// as OLM reads it: rules bound by a ClusterRoleBinding are clusterPermissions, granted on the
// whole cluster whatever the install mode; rules bound by a RoleBinding, whether of a Role or a
// ClusterRole, are permissions, granted in the namespaces the OperatorGroup targets. Stale CSV
// permissions would surface only under OLM, as Forbidden errors.
func TestCSVPermissionsMatchConfigRBAC(t *testing.T) {
	csv := loadBundle(t).CSV
	serviceAccount := managerDeployment(t, csv).Spec.Template.Spec.ServiceAccountName
	wantCluster, wantNamespaced, boundRoles := rbacBoundToManager(t, serviceAccount)
	for _, role := range []string{"etcd-operator-manager-role", "etcd-operator-leader-election-role", "etcd-operator-metrics-auth-role"} {
		if !boundRoles.Has(role) {
			t.Fatalf("config/manifests does not bind %s to the manager's service account %s", role, serviceAccount)
		}
	}

	strategy := csv.Spec.InstallStrategy.StrategySpec
	for _, c := range []struct {
		field string
		got   []operatorsv1alpha1.StrategyDeploymentPermissions
		want  []rbacv1.PolicyRule
	}{
		{"clusterPermissions", strategy.ClusterPermissions, wantCluster},
		{"permissions", strategy.Permissions, wantNamespaced},
	} {
		if len(c.got) != 1 || c.got[0].ServiceAccountName != serviceAccount {
			t.Errorf("CSV %s: want one entry, for service account %s; got %+v", c.field, serviceAccount, c.got)
			continue
		}
		if got, want := ruleSet(t, c.got[0].Rules), ruleSet(t, c.want); !slices.Equal(got, want) {
			t.Errorf("CSV %s differ from config/manifests: run `make bundle`\n got: %v\nwant: %v", c.field, got, want)
		}
	}
}

// clusterScopedRights are the only rights the operator needs on the whole cluster however it is
// installed: its metrics endpoint checks its scrapers' tokens and access with the API server.
var clusterScopedRights = sets.New("authentication.k8s.io/tokenreviews", "authorization.k8s.io/subjectaccessreviews")

// Installed OwnNamespace or SingleNamespace, the operator gets rights on namespaced objects (pods,
// Secrets, claims, its own kinds...) in the namespaces it serves only: OLM grants the CSV's
// clusterPermissions on the whole cluster whatever the install mode, so they must hold nothing
// but what is cluster-scoped by nature. Before, every rule of the manager was there, and an
// operator installed for one namespace could read every Secret of the cluster.
func TestClusterPermissionsHoldOnlyClusterScopedRights(t *testing.T) {
	for _, p := range loadBundle(t).CSV.Spec.InstallStrategy.StrategySpec.ClusterPermissions {
		for _, rule := range p.Rules {
			if len(rule.NonResourceURLs) > 0 {
				t.Errorf("clusterPermissions grant non-resource URLs %v", rule.NonResourceURLs)
			}
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					if right := group + "/" + resource; !clusterScopedRights.Has(right) {
						t.Errorf("clusterPermissions grant %v on %s cluster-wide: put it in permissions (a RoleBinding in config/manifests)", rule.Verbs, right)
					}
				}
			}
		}
	}
}

// rbacBoundToManager builds config/manifests as `make bundle` does and returns the rules bound to
// the service account on the whole cluster (ClusterRoleBindings) and in its namespace
// (RoleBindings), and the names of the roles bound.
func rbacBoundToManager(t *testing.T, serviceAccount string) (cluster, namespaced []rbacv1.PolicyRule, bound sets.Set[string]) {
	t.Helper()
	kustomize := repoPath("bin", "kustomize")
	if _, err := os.Stat(kustomize); err != nil {
		t.Fatalf("bin/kustomize is missing: run through `make test`, which builds it")
	}
	out, err := exec.Command(kustomize, "build", repoPath("config", "manifests")).Output()
	if err != nil {
		t.Fatalf("kustomize build config/manifests: %v", err)
	}
	roles := map[string][]rbacv1.PolicyRule{} // by kind/name
	var bindings []rbacv1.RoleBinding         // a ClusterRoleBinding decodes into the same fields
	decoder := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var obj map[string]any
		if err := decoder.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		switch kind := obj["kind"].(string); kind {
		case "ClusterRole", "Role":
			var role rbacv1.ClusterRole
			if err := json.Unmarshal(raw, &role); err != nil {
				t.Fatal(err)
			}
			roles[kind+"/"+role.Name] = role.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var binding rbacv1.RoleBinding
			if err := json.Unmarshal(raw, &binding); err != nil {
				t.Fatal(err)
			}
			bindings = append(bindings, binding)
		}
	}

	bound = sets.New[string]()
	for _, b := range bindings {
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == serviceAccount
		}) {
			continue
		}
		rules, ok := roles[b.RoleRef.Kind+"/"+b.RoleRef.Name]
		if !ok {
			t.Fatalf("%s %s binds %s %s, which config/manifests does not have", b.Kind, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		bound.Insert(b.RoleRef.Name)
		switch {
		case b.Kind == "ClusterRoleBinding" && b.RoleRef.Kind == "ClusterRole":
			cluster = append(cluster, rules...)
		case b.Kind == "RoleBinding":
			namespaced = append(namespaced, rules...)
		default:
			t.Fatalf("%s %s binds %s %s: OLM has no place for that pairing", b.Kind, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
	}
	return cluster, namespaced, bound
}

// ruleSet is the rules as sorted JSON, so that the order the generator concatenated them in does
// not matter.
func ruleSet(t *testing.T, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// The console's "Create" forms start from alm-examples: one per kind, each a valid object, and
// scorecard's olm-spec-descriptors test wants a descriptor for every spec field they set.
func TestALMExamplesCoverEveryKind(t *testing.T) {
	csv := loadBundle(t).CSV
	var examples []json.RawMessage
	if err := json.Unmarshal([]byte(csv.Annotations["alm-examples"]), &examples); err != nil {
		t.Fatalf("alm-examples: %v", err)
	}

	owned := map[string]operatorsv1alpha1.CRDDescription{}
	for _, o := range csv.Spec.CustomResourceDefinitions.Owned {
		owned[o.Kind] = o
	}
	seen := sets.New[string]()
	for _, raw := range examples {
		var example struct {
			APIVersion string         `json:"apiVersion"`
			Kind       string         `json:"kind"`
			Spec       map[string]any `json:"spec"`
		}
		if err := json.Unmarshal(raw, &example); err != nil {
			t.Fatalf("alm-examples: %v", err)
		}
		if example.APIVersion != etcdv1alpha1.GroupVersion.String() {
			t.Errorf("alm-examples: %s has apiVersion %s, want %s", example.Kind, example.APIVersion, etcdv1alpha1.GroupVersion)
		}
		seen.Insert(example.Kind)

		var obj any
		switch example.Kind {
		case "EtcdCluster":
			obj = &etcdv1alpha1.EtcdCluster{}
		case "EtcdBackup":
			obj = &etcdv1alpha1.EtcdBackup{}
		case "EtcdRestore":
			obj = &etcdv1alpha1.EtcdRestore{}
		default:
			t.Errorf("alm-examples: unexpected kind %q", example.Kind)
			continue
		}
		decoder := json.NewDecoder(bytes.NewReader(raw))
		decoder.DisallowUnknownFields()
		if err := decoder.Decode(obj); err != nil {
			t.Errorf("alm-examples: %s does not parse as %T: %v", example.Kind, obj, err)
		}

		for field := range example.Spec {
			if !slices.ContainsFunc(owned[example.Kind].SpecDescriptors, func(d operatorsv1alpha1.SpecDescriptor) bool {
				return d.Path == field
			}) {
				t.Errorf("alm-examples: %s sets spec.%s, which has no spec descriptor: add an "+
					"+operator-sdk:csv:customresourcedefinitions:type=spec marker to the field in api/", example.Kind, field)
			}
		}
	}
	if want := sets.New("EtcdCluster", "EtcdBackup", "EtcdRestore"); !seen.Equal(want) {
		t.Errorf("alm-examples has %v, want %v", sets.List(seen), sets.List(want))
	}
	if ownedKinds := sets.KeySet(owned); !seen.Equal(ownedKinds) {
		t.Errorf("alm-examples has %v, the CSV owns %v", sets.List(seen), sets.List(ownedKinds))
	}
}

// Disconnected installs mirror relatedImages: the operator's image (which it also gives its agent
// Jobs) and every image it learns from a RELATED_IMAGE_* variable must be listed.
func TestRelatedImagesListOperatorAndOperands(t *testing.T) {
	csv := loadBundle(t).CSV
	listed := map[string]string{}
	for _, ri := range csv.Spec.RelatedImages {
		listed[ri.Name] = ri.Image
	}

	containers := managerDeployment(t, csv).Spec.Template.Spec.Containers
	if len(containers) != 1 {
		t.Fatalf("manager Deployment has %d containers, want 1", len(containers))
	}
	manager := containers[0]
	if csv.Annotations["containerImage"] != manager.Image {
		t.Errorf("containerImage annotation %q, manager image %q", csv.Annotations["containerImage"], manager.Image)
	}
	if listed["operator"] != manager.Image {
		t.Errorf("relatedImages operator = %q, want the manager's image %q", listed["operator"], manager.Image)
	}
	if listed["etcd"] == "" {
		t.Error("relatedImages has no etcd image")
	}
	for _, env := range manager.Env {
		name, ok := strings.CutPrefix(env.Name, "RELATED_IMAGE_")
		if !ok {
			continue
		}
		name = strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		if listed[name] != env.Value {
			t.Errorf("%s=%q, relatedImages %s = %q", env.Name, env.Value, name, listed[name])
		}
	}
}

// Every install mode is offered because the manager watches what OLM's OperatorGroup targets:
// OLM writes them to the pod's olm.targetNamespaces annotation, which becomes WATCH_NAMESPACES.
func TestInstallModesFollowWatchedNamespaces(t *testing.T) {
	csv := loadBundle(t).CSV
	for _, mode := range csv.Spec.InstallModes {
		if !mode.Supported {
			t.Errorf("install mode %s is not supported", mode.Type)
		}
	}
	if len(csv.Spec.InstallModes) != 4 {
		t.Errorf("CSV declares %d install modes, want all 4", len(csv.Spec.InstallModes))
	}
	env := managerDeployment(t, csv).Spec.Template.Spec.Containers[0].Env
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "WATCH_NAMESPACES" })
	if i < 0 || env[i].ValueFrom == nil || env[i].ValueFrom.FieldRef == nil ||
		env[i].ValueFrom.FieldRef.FieldPath != "metadata.annotations['olm.targetNamespaces']" {
		t.Error("the manager's WATCH_NAMESPACES does not come from the olm.targetNamespaces annotation")
	}
}

// The CSV's icon and the catalog package's are config/manifests/icon.svg.
func TestIconIsTheSVGSource(t *testing.T) {
	svg, err := os.ReadFile(repoPath("config", "manifests", "icon.svg"))
	if err != nil {
		t.Fatal(err)
	}
	icons := loadBundle(t).CSV.Spec.Icon
	if len(icons) != 1 || icons[0].MediaType != "image/svg+xml" {
		t.Fatalf("CSV icons %+v, want one image/svg+xml", icons)
	}
	data, err := base64.StdEncoding.DecodeString(icons[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, svg) {
		t.Error("the CSV base's icon is not config/manifests/icon.svg: base64-encode it into config/manifests/bases")
	}
	if icon := loadCatalog(t).Icon; icon == nil || icon.MediaType != "image/svg+xml" || !bytes.Equal(icon.Data, svg) {
		t.Error("the catalog package's icon is not config/manifests/icon.svg: run `make catalog`")
	}
}

// Who may back up may read everything: the role that lets a user create EtcdBackups says so
// where an administrator granting it reads (#14).
func TestBackupEditorRoleSaysItGivesTheWholeKeyspace(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "bundle", "manifests", "etcd-operator-etcdbackup-editor-role_rbac.authorization.k8s.io_v1_clusterrole.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := sigsyaml.Unmarshal(raw, role); err != nil {
		t.Fatal(err)
	}
	if d := role.Annotations["description"]; !strings.Contains(d, "whole keyspace") || !strings.Contains(d, "root credentials") {
		t.Fatalf("the EtcdBackup editor role's description %q does not say that it gives access to the whole keyspace", d)
	}
}

// The CSV's description, the page OperatorHub shows, tells what works in step with the README's
// "What it does" table: each kind among its features, none called a preview, and every
// limitation and key capability the README states for the EtcdCluster stated there too.
func TestCSVDescriptionIsInStepWithTheREADME(t *testing.T) {
	csv := loadBundle(t).CSV
	readme, err := os.ReadFile(repoPath("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	description := csv.Spec.Description
	// The product page's features: from their heading to the next.
	_, features, ok := strings.Cut(description, "## Features\n")
	if !ok {
		t.Fatal("the CSV description has no Features section")
	}
	features, _, _ = strings.Cut(features, "\n## ")
	for _, kind := range []string{"EtcdCluster", "EtcdBackup", "EtcdRestore"} {
		row := readmeStatusRow(t, string(readme), kind)
		if strings.Contains(row, "preview") {
			t.Fatalf("README calls %s a preview; this test expects working kinds", kind)
		}
		if !strings.Contains(features, "* **"+kind+"**: ") {
			t.Errorf("the CSV description's features do not describe %s, as the README does", kind)
		}
	}
	for _, stale := range []string{"preview", "not acted upon"} {
		if strings.Contains(description, stale) {
			t.Errorf("the CSV description still says %q", stale)
		}
	}
	for _, limitation := range []string{"cert-manager"} {
		if !strings.Contains(readmeStatusRow(t, string(readme), "EtcdCluster"), limitation) || !strings.Contains(description, limitation) {
			t.Errorf("the limitation %q must be stated in both the README's EtcdCluster row and the CSV description", limitation)
		}
	}
	for _, capability := range []string{"quorum lost for good", "quorumLossRecovery.policy: ForceNewCluster"} {
		if !strings.Contains(readmeStatusRow(t, string(readme), "EtcdCluster"), capability) || !strings.Contains(description, capability) {
			t.Errorf("the capability %q must be stated in both the README's EtcdCluster row and the CSV description", capability)
		}
	}
	// The capability level OperatorHub shows is the README's, and Deep Insights is claimed with
	// what earns it: metrics, alerts, a dashboard and a log level a Subscription can set.
	level := csv.Annotations["capabilities"]
	// Both are wrapped text: compared as words, whatever the line breaks.
	readmeWords, descriptionWords := strings.Join(strings.Fields(string(readme)), " "), strings.Join(strings.Fields(description), " ")
	if !strings.Contains(readmeWords, "capability level "+level+".") {
		t.Errorf("the CSV claims capability level %q; the README does not say \"capability level %s.\"", level, level)
	}
	if level == "Auto Pilot" {
		checkAutoPilotEvidence(t)
	}
	if level == "Deep Insights" || level == "Auto Pilot" {
		for _, insight := range []string{"metrics", "alert rules", "Grafana dashboard", "LOG_LEVEL"} {
			if !strings.Contains(readmeWords, insight) || !strings.Contains(descriptionWords, insight) {
				t.Errorf("Deep Insights: %q must be stated in both the README and the CSV description", insight)
			}
		}
	}
}

// autoPilotBehaviours are what Auto Pilot claims the operator does by itself: each must be
// listed in docs/olm.md with the tests behind it.
var autoPilotBehaviours = []string{
	"Defragmentation", "Lost members replaced", "Quorum loss recovered", "Corrupt members replaced",
	"Timed restore drills", "Certificates renewed and CAs replaced", "Drains",
}

// checkAutoPilotEvidence: docs/olm.md lists each automatic behaviour with the tests behind it,
// and every test it names exists.
func checkAutoPilotEvidence(t *testing.T) {
	t.Helper()
	doc, err := os.ReadFile(repoPath("docs/olm.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### What Auto Pilot rests on\n")
	if !ok {
		t.Fatal("docs/olm.md has no section \"What Auto Pilot rests on\"")
	}
	section, _, _ = strings.Cut(section, "\n#")
	var sources strings.Builder
	for _, dir := range []string{"controllers", "internal", "test", "api"} {
		_ = filepath.WalkDir(repoPath(dir), func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, "_test.go") {
				b, _ := os.ReadFile(path)
				sources.Write(b)
			}
			return nil
		})
	}
	named := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")
	for _, behaviour := range autoPilotBehaviours {
		line := ""
		for _, l := range strings.Split(section, "\n- ") {
			if strings.HasPrefix(l, "**"+behaviour) {
				line = l
			}
		}
		tests := named.FindAllStringSubmatch(line, -1)
		if len(tests) == 0 {
			t.Errorf("docs/olm.md does not name the tests behind %q", behaviour)
		}
		for _, m := range tests {
			if !strings.Contains(sources.String(), "func "+m[1]+"(") {
				t.Errorf("docs/olm.md names %s behind %q: no such test", m[1], behaviour)
			}
		}
	}
}

func readmeStatusRow(t *testing.T, readme, kind string) string {
	t.Helper()
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "| "+kind+" |") {
			return line
		}
	}
	t.Fatalf("README has no status row for %s", kind)
	return ""
}
