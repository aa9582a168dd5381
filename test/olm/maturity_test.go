package olm

import (
	"os"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// maturityOfChannel is the CSV maturity each channel archetype of opm's semver template stands
// for: a package whose default channel is stable says its operator is.
var maturityOfChannel = map[string]string{"candidate": "alpha", "fast": "beta", "stable": "stable"}

// stabilityHeading is the section of docs/olm.md that says what an API version below v1beta1
// promises: without it, an alpha API under a stable maturity would promise nothing.
const stabilityHeading = "## What v1alpha1 promises"

// The CSV's maturity is the one its catalog's default channel stands for, so that OperatorHub
// does not show an alpha operator whose users are subscribed to stable by default; and while
// the API is an alpha version, the docs say what stability it carries.
func TestMaturityMatchesTheDefaultChannel(t *testing.T) {
	csv := loadBundle(t).CSV
	pkg := loadCatalog(t)
	want, ok := maturityOfChannel[pkg.DefaultChannel.Name]
	if !ok {
		t.Fatalf("default channel %s is none of the semver template's archetypes %v", pkg.DefaultChannel.Name, maturityOfChannel)
	}
	if csv.Spec.Maturity != want {
		t.Errorf("the CSV's maturity is %q; the default channel %s wants %q (config/manifests/bases, then make bundle)",
			csv.Spec.Maturity, pkg.DefaultChannel.Name, want)
	}
	if version := etcdv1alpha1.GroupVersion.Version; want == "stable" && strings.Contains(version, "alpha") {
		doc, err := os.ReadFile(repoPath("docs", "olm.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "\n"+stabilityHeading+"\n") {
			t.Errorf("maturity stable with the API at %s: docs/olm.md must say what it promises under %q", version, stabilityHeading)
		}
	}
}

// communityCI is the part of ci.yaml, the community-operators catalog's settings for the
// operator, that the catalog here decides.
type communityCI struct {
	UpdateGraph string    `json:"updateGraph"`
	Reviewers   *[]string `json:"reviewers"`
}

// The community-operators catalog builds the upgrade graph as catalog-template.yaml does, by
// semantic version (opm's semver template): ci.yaml says semver-mode, and lists its reviewers.
func TestCommunityCatalogSettingsFollowTheCatalogTemplate(t *testing.T) {
	template, err := os.ReadFile(repoPath("catalog-template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Schema string `json:"schema"`
	}
	if err := sigsyaml.Unmarshal(template, &schema); err != nil {
		t.Fatalf("catalog-template.yaml: %v", err)
	}
	if schema.Schema != "olm.semver" {
		t.Fatalf("catalog-template.yaml is a %q template; this test knows olm.semver only", schema.Schema)
	}
	raw, err := os.ReadFile(repoPath("hack", "community-operators", "ci.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ci communityCI
	if err := sigsyaml.UnmarshalStrict(raw, &ci); err != nil {
		t.Fatalf("hack/community-operators/ci.yaml: %v", err)
	}
	if ci.UpdateGraph != "semver-mode" {
		t.Errorf("ci.yaml updateGraph %q, want semver-mode as the olm.semver catalog template", ci.UpdateGraph)
	}
	if ci.Reviewers == nil {
		t.Error("ci.yaml lists no reviewers: the community pipeline merges nothing automatically without them")
	}
}
