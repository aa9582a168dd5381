package olm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/model"
	"github.com/operator-framework/operator-registry/alpha/property"
	"k8s.io/apimachinery/pkg/util/sets"
)

// loadCatalog does what `opm validate catalog` does: load every blob and build the package model,
// which checks the package, its channels' upgrade graphs and its bundles' properties.
func loadCatalog(t *testing.T) *model.Package {
	t.Helper()
	cfg, err := declcfg.LoadFS(context.Background(), os.DirFS(repoPath("catalog")))
	if err != nil {
		t.Fatalf("load catalog/: %v", err)
	}
	packages, err := declcfg.ConvertToModel(*cfg)
	if err != nil {
		t.Fatalf("catalog/ is not a valid file-based catalog: %v", err)
	}
	if len(packages) != 1 || packages[pkgName] == nil {
		t.Fatalf("catalog/ has packages %v, want only %s", sets.List(sets.KeySet(packages)), pkgName)
	}
	return packages[pkgName]
}

// Subscriptions follow stable. Its head must be the bundle in bundle/ (a release adds its bundle
// with `make catalog-add`), and its entries one chain in version order, each replacing the one
// before and skipping all earlier ones, so that any installed version upgrades straight to the
// head and OLM sees exactly one head.
func TestCatalogStableChannelEndsAtTheCurrentBundle(t *testing.T) {
	pkg := loadCatalog(t)
	csv := loadBundle(t).CSV
	if pkg.DefaultChannel == nil || pkg.DefaultChannel.Name != "stable" {
		t.Fatalf("default channel %v, want stable", pkg.DefaultChannel)
	}
	stable := pkg.Channels["stable"]
	head, err := stable.Head()
	if err != nil {
		t.Fatalf("channel stable: %v", err)
	}
	if head.Name != csv.Name || !head.Version.Equals(csv.Spec.Version.Version) {
		t.Errorf("channel stable's head is %s (%s), bundle/ is %s (%s): run `make catalog`",
			head.Name, head.Version, csv.Name, csv.Spec.Version)
	}

	chain := make([]*model.Bundle, 0, len(stable.Bundles))
	for _, b := range stable.Bundles {
		chain = append(chain, b)
	}
	slices.SortFunc(chain, func(a, b *model.Bundle) int { return a.Version.Compare(b.Version) })
	if chain[len(chain)-1] != head {
		t.Errorf("channel stable's head %s is not its newest version %s", head.Name, chain[len(chain)-1].Name)
	}
	first := chain[0]
	if first.Replaces != "" || first.SkipRange != "" || len(first.Skips) != 0 {
		t.Errorf("the oldest entry %s replaces or skips something", first.Name)
	}
	for i := 1; i < len(chain); i++ {
		b, previous := chain[i], chain[i-1]
		if b.Replaces != previous.Name {
			t.Errorf("%s replaces %q, want %s", b.Name, b.Replaces, previous.Name)
		}
		if want := fmt.Sprintf(">=%s <%s", first.Version, b.Version); b.SkipRange != want {
			t.Errorf("%s has skipRange %q, want %q", b.Name, b.SkipRange, want)
		}
		skipped, err := semver.ParseRange(b.SkipRange)
		if err != nil {
			t.Errorf("%s: skipRange: %v", b.Name, err)
			continue
		}
		for _, older := range chain[:i] {
			if !skipped(older.Version) {
				t.Errorf("%s's skipRange %q does not cover %s", b.Name, b.SkipRange, older.Version)
			}
		}
	}

	for _, b := range chain {
		if !strings.HasSuffix(b.Image, "/etcd-operator-bundle:v"+b.Version.String()) {
			t.Errorf("%s has image %q, want <registry>/etcd-operator-bundle:v%s", b.Name, b.Image, b.Version)
		}
	}
}

// The head bundle's blob must be what `opm render` makes of bundle/ today (apart from createdAt),
// or the catalog would serve metadata and APIs the bundle image no longer has.
func TestCatalogHeadIsRenderedFromTheCurrentBundle(t *testing.T) {
	pkg := loadCatalog(t)
	bundle := loadBundle(t)
	head, err := pkg.Channels["stable"].Head()
	if err != nil {
		t.Fatal(err)
	}

	wantGVKs := sets.New[string]()
	for _, crd := range bundle.V1CRDs {
		for _, v := range crd.Spec.Versions {
			wantGVKs.Insert(fmt.Sprintf("%s/%s, Kind=%s", crd.Spec.Group, v.Name, crd.Spec.Names.Kind))
		}
	}
	gotGVKs := sets.New[string]()
	for _, gvk := range head.PropertiesP.GVKs {
		gotGVKs.Insert(fmt.Sprintf("%s/%s, Kind=%s", gvk.Group, gvk.Version, gvk.Kind))
	}
	if !gotGVKs.Equal(wantGVKs) {
		t.Errorf("catalog head provides %v, bundle/ %v: run `make catalog`", sets.List(gotGVKs), sets.List(wantGVKs))
	}

	if len(head.PropertiesP.CSVMetadatas) != 1 {
		t.Fatalf("catalog head has %d olm.csv.metadata properties, want 1 (render with --migrate-level bundle-object-to-csv-metadata)",
			len(head.PropertiesP.CSVMetadatas))
	}
	got := head.PropertiesP.CSVMetadatas[0]
	var want property.CSVMetadata
	if err := json.Unmarshal(property.MustBuildCSVMetadata(*bundle.CSV).Value, &want); err != nil {
		t.Fatal(err)
	}
	delete(got.Annotations, "createdAt")
	delete(want.Annotations, "createdAt")
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("catalog head's CSV metadata differs from bundle/'s CSV: run `make catalog`")
	}

	images := sets.New[string]()
	for _, ri := range head.RelatedImages {
		images.Insert(ri.Image)
	}
	for _, ri := range bundle.CSV.Spec.RelatedImages {
		if !images.Has(ri.Image) {
			t.Errorf("catalog head's relatedImages lack %s (%s): run `make catalog`", ri.Image, ri.Name)
		}
	}
}

// catalog.Dockerfile is generated once; its opm image must stay the opm that renders the catalog.
func TestCatalogDockerfileUsesThePinnedOpm(t *testing.T) {
	goMod, err := os.ReadFile(repoPath("hack", "tools", "opm", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github\.com/operator-framework/operator-registry (v\S+)`).FindSubmatch(goMod)
	if m == nil {
		t.Fatal("hack/tools/opm/go.mod does not require operator-registry")
	}
	dockerfile, err := os.ReadFile(repoPath("catalog.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllSubmatch(dockerfile, -1)
	if len(froms) == 0 {
		t.Fatal("catalog.Dockerfile has no FROM")
	}
	for _, from := range froms {
		if want := "quay.io/operator-framework/opm:" + string(m[1]); string(from[1]) != want {
			t.Errorf("catalog.Dockerfile: FROM %s, want %s: rm catalog.Dockerfile && make catalog.Dockerfile", from[1], want)
		}
	}
}
