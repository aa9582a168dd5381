package olm

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/manifests"
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
	head, err := loadCatalog(t).Channels["stable"].Head()
	if err != nil {
		t.Fatal(err)
	}
	checkRenderedFrom(t, head, loadBundle(t), "bundle/", "run `make catalog`")
}

// Every earlier version in the catalog is a release whose commit OLM_RELEASES names (hack/olm.mk),
// so that `make release-images` can rebuild its bundle and operator images on a fresh clone; and
// its blob must be what `opm render` made of that commit's bundle/, or the image rebuilt from it
// would not be what the catalog serves.
func TestCatalogReleasesAreBuiltFromTheirCommits(t *testing.T) {
	pkg := loadCatalog(t)
	stable := pkg.Channels["stable"]
	head, err := stable.Head()
	if err != nil {
		t.Fatal(err)
	}
	releases := olmReleases(t)

	for name, b := range stable.Bundles {
		if _, ok := releases[b.Version.String()]; !ok && b != head {
			t.Errorf("%s is in the catalog but not in OLM_RELEASES (hack/olm.mk): add VERSION@COMMIT of its release", name)
		}
	}
	for version, commit := range releases {
		b, ok := stable.Bundles[pkgName+".v"+version]
		switch {
		case !ok:
			t.Errorf("OLM_RELEASES has %s, which channel stable does not", version)
			continue
		case b == head:
			t.Errorf("OLM_RELEASES has %s, the channel's head, which is built from this tree", version)
			continue
		}
		t.Run(version, func(t *testing.T) {
			released := bundleAtCommit(t, commit)
			if got := released.CSV.Spec.Version.String(); got != version {
				t.Fatalf("commit %s has a bundle of version %s, want %s", commit, got, version)
			}
			if image := released.CSV.Annotations["containerImage"]; !strings.HasSuffix(image, "/etcd-operator:v"+version) {
				t.Errorf("release %s runs operator image %q, want <registry>/etcd-operator:v%s", version, image, version)
			}
			checkRenderedFrom(t, b, released, "bundle/ of commit "+commit,
				"OLM_RELEASES names the wrong commit, or "+blobPath(version)+" was changed after its release")
		})
	}
}

// olmReleases reads OLM_RELEASES, VERSION@COMMIT per release, from hack/olm.mk.
func olmReleases(t *testing.T) map[string]string {
	t.Helper()
	makefile, err := os.ReadFile(repoPath("hack", "olm.mk"))
	if err != nil {
		t.Fatal(err)
	}
	definition := regexp.MustCompile(`(?m)^OLM_RELEASES :=((?:.*\\\n)*.*)$`).FindSubmatch(makefile)
	if definition == nil {
		t.Fatal("hack/olm.mk does not define OLM_RELEASES :=")
	}
	releases := map[string]string{}
	for _, word := range strings.Fields(strings.ReplaceAll(string(definition[1]), "\\", " ")) {
		m := regexp.MustCompile(`^(\d+\.\d+\.\d+)@([0-9a-f]{40})$`).FindStringSubmatch(word)
		if m == nil {
			t.Fatalf("OLM_RELEASES: %q is not VERSION@COMMIT (the full commit hash)", word)
		}
		releases[m[1]] = m[2]
	}
	return releases
}

// ensureCommit fetches commit from origin if this clone lacks it (a shallow clone), as
// release-images does; if that fails, git archive says so.
func ensureCommit(commit string) {
	git := func(args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir = repoRoot
		return cmd.Run()
	}
	if git("cat-file", "-e", commit+"^{commit}") == nil {
		return
	}
	if git("fetch", "--quiet", "origin", commit) != nil {
		_ = git("fetch", "--quiet", "--unshallow")
	}
}

// bundleAtCommit reads bundle/ as committed in commit, from `git archive`, as release-images does.
func bundleAtCommit(t *testing.T, commit string) *manifests.Bundle {
	t.Helper()
	ensureCommit(commit)
	var stderr bytes.Buffer
	cmd := exec.Command("git", "archive", commit, "bundle/manifests")
	cmd.Dir = repoRoot
	cmd.Stderr = &stderr
	archive, err := cmd.Output()
	if err != nil {
		t.Fatalf("git archive %s: %v: %s(a shallow clone lacks it: git fetch --unshallow)", commit, err, stderr.String())
	}
	dir := t.TempDir()
	files := tar.NewReader(bytes.NewReader(archive))
	for {
		header, err := files.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if header.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(files)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.FromSlash(header.Name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bundle, err := manifests.GetBundleFromDir(filepath.Join(dir, "bundle", "manifests"))
	if err != nil {
		t.Fatalf("bundle/ of commit %s: %v", commit, err)
	}
	if bundle.CSV == nil {
		t.Fatalf("bundle/ of commit %s has no ClusterServiceVersion", commit)
	}
	return bundle
}

func blobPath(version string) string {
	return "catalog/" + pkgName + "/bundles/" + pkgName + ".v" + version + ".yaml"
}

// checkRenderedFrom fails unless blob is what `opm render` makes of bundle (apart from createdAt):
// the APIs it provides, its CSV metadata and its related images.
func checkRenderedFrom(t *testing.T, blob *model.Bundle, bundle *manifests.Bundle, source, remedy string) {
	t.Helper()
	wantGVKs := sets.New[string]()
	for _, crd := range bundle.V1CRDs {
		for _, v := range crd.Spec.Versions {
			wantGVKs.Insert(fmt.Sprintf("%s/%s, Kind=%s", crd.Spec.Group, v.Name, crd.Spec.Names.Kind))
		}
	}
	gotGVKs := sets.New[string]()
	for _, gvk := range blob.PropertiesP.GVKs {
		gotGVKs.Insert(fmt.Sprintf("%s/%s, Kind=%s", gvk.Group, gvk.Version, gvk.Kind))
	}
	if !gotGVKs.Equal(wantGVKs) {
		t.Errorf("catalog's %s provides %v, %s %v: %s", blob.Name, sets.List(gotGVKs), source, sets.List(wantGVKs), remedy)
	}

	if len(blob.PropertiesP.CSVMetadatas) != 1 {
		t.Fatalf("catalog's %s has %d olm.csv.metadata properties, want 1 (render with --migrate-level bundle-object-to-csv-metadata)",
			blob.Name, len(blob.PropertiesP.CSVMetadatas))
	}
	got := blob.PropertiesP.CSVMetadatas[0]
	var want property.CSVMetadata
	if err := json.Unmarshal(property.MustBuildCSVMetadata(*bundle.CSV).Value, &want); err != nil {
		t.Fatal(err)
	}
	delete(got.Annotations, "createdAt")
	delete(want.Annotations, "createdAt")
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("catalog's %s has CSV metadata that differs from %s's CSV: %s", blob.Name, source, remedy)
	}

	images := sets.New[string]()
	for _, ri := range blob.RelatedImages {
		images.Insert(ri.Image)
	}
	for _, ri := range bundle.CSV.Spec.RelatedImages {
		if !images.Has(ri.Image) {
			t.Errorf("catalog's %s lacks related image %s (%s) of %s: %s", blob.Name, ri.Image, ri.Name, source, remedy)
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
