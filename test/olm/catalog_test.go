package olm

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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
	sigsyaml "sigs.k8s.io/yaml"
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

// The channels subscriptions name: stable, the default and the channel of every release so far
// (the OLM e2e test subscribes to it), and candidate, which every release enters first: the
// bundle in bundle/ is its head. In each channel the head is the one entry nothing replaces or
// skips, every other version upgrades to it in one step, and its entry carries its CSV's
// olm.skipRange, which OLM reads only there. bundle/'s annotations name the channels it heads.
func TestCatalogChannelsEndAtTheirNewestRelease(t *testing.T) {
	pkg := loadCatalog(t)
	csv := loadBundle(t).CSV
	if pkg.DefaultChannel == nil || pkg.DefaultChannel.Name != "stable" {
		t.Fatalf("default channel %v, want stable", pkg.DefaultChannel)
	}
	if got := sets.KeySet(pkg.Channels); !got.Equal(sets.New("candidate", "stable")) {
		t.Fatalf("channels %v, want candidate and stable", sets.List(got))
	}

	headOf := map[string]*model.Bundle{}
	for name, channel := range pkg.Channels {
		head, err := channel.Head()
		if err != nil {
			t.Errorf("channel %s: %v", name, err)
			continue
		}
		headOf[name] = head
		if newest := slices.MaxFunc(slices.Collect(maps.Values(channel.Bundles)), func(a, b *model.Bundle) int {
			return a.Version.Compare(b.Version)
		}); newest != head {
			t.Errorf("channel %s: the head %s is not its newest version %s", name, head.Name, newest.Name)
		}
		if want := blobSkipRange(t, head); head.SkipRange != want {
			t.Errorf("channel %s: the head %s has skipRange %q, its CSV's olm.skipRange is %q: run `make catalog`", name, head.Name, head.SkipRange, want)
		}
		skipped := func(semver.Version) bool { return false }
		if head.SkipRange != "" {
			if skipped, err = semver.ParseRange(head.SkipRange); err != nil {
				t.Errorf("channel %s: %s's skipRange: %v", name, head.Name, err)
				continue
			}
		}
		for _, b := range channel.Bundles {
			if b != head && !skipped(b.Version) && head.Replaces != b.Name && !slices.Contains(head.Skips, b.Name) {
				t.Errorf("channel %s: %s does not upgrade to the head %s in one step", name, b.Name, head.Name)
			}
			if !strings.HasSuffix(b.Image, "/etcd-operator-bundle:v"+b.Version.String()) {
				t.Errorf("%s has image %q, want <registry>/etcd-operator-bundle:v%s", b.Name, b.Image, b.Version)
			}
		}
	}
	if head := headOf["candidate"]; head == nil || head.Name != csv.Name || !head.Version.Equals(csv.Spec.Version.Version) {
		t.Errorf("the head of candidate is %v, bundle/ is %s: list its image under candidate in %s and run `make catalog`", head, csv.Name, catalogTemplate)
	}
	heads := sets.New[string]()
	for name, head := range headOf {
		if head.Name == csv.Name {
			heads.Insert(name)
		}
	}
	if named := sets.New(strings.Split(bundleAnnotations(t)["operators.operatorframework.io.bundle.channels.v1"], ",")...); !named.Equal(heads) {
		t.Errorf("bundle/ names channels %v, it heads %v: set CHANNELS in hack/olm.mk and run `make bundle`", sets.List(named), sets.List(heads))
	}
}

// blobSkipRange is the olm.skipRange annotation of a bundle's CSV, as rendered into its blob.
func blobSkipRange(t *testing.T, b *model.Bundle) string {
	t.Helper()
	if len(b.PropertiesP.CSVMetadatas) != 1 {
		t.Fatalf("%s has no olm.csv.metadata", b.Name)
	}
	return b.PropertiesP.CSVMetadatas[0].Annotations["olm.skipRange"]
}

// currentBundle is the blob of bundle/ in the catalog, whichever channels it is in.
func currentBundle(t *testing.T, pkg *model.Package) *model.Bundle {
	t.Helper()
	name := loadBundle(t).CSV.Name
	for _, channel := range pkg.Channels {
		if b, ok := channel.Bundles[name]; ok {
			return b
		}
	}
	t.Fatalf("bundle/ (%s) is in no channel of the catalog: list its image in %s and run `make catalog`", name, catalogTemplate)
	return nil
}

// bundleAnnotations are bundle/metadata/annotations.yaml's.
func bundleAnnotations(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(repoPath("bundle", "metadata", "annotations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := sigsyaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("bundle/metadata/annotations.yaml: %v", err)
	}
	return file.Annotations
}

// The OLM e2e test installs stable's oldest release and has OLM upgrade it to the head: the
// head's replaces chain must reach the oldest, which OLM needs besides skipRange (a skipRange
// alone leaves more than one head), and which opm's semver template keeps across minor versions.
func TestStableReplacesChainReachesItsOldestRelease(t *testing.T) {
	stable := loadCatalog(t).Channels["stable"]
	head, err := stable.Head()
	if err != nil {
		t.Fatal(err)
	}
	oldest := slices.MinFunc(slices.Collect(maps.Values(stable.Bundles)), func(a, b *model.Bundle) int {
		return a.Version.Compare(b.Version)
	})
	if oldest == head {
		t.Fatalf("stable holds only its head %s: there is nothing to upgrade from", head.Name)
	}
	chain := []string{head.Name}
	for b := head; b != oldest; {
		next, ok := stable.Bundles[b.Replaces]
		if !ok {
			t.Fatalf("stable's replaces chain %v ends before its oldest release %s", chain, oldest.Name)
		}
		chain = append(chain, next.Name)
		b = next
	}
}

// bundle/'s blob must be what `opm render` makes of bundle/ today (apart from createdAt),
// or the catalog would serve metadata and APIs the bundle image no longer has.
func TestCatalogHeadIsRenderedFromTheCurrentBundle(t *testing.T) {
	checkRenderedFrom(t, currentBundle(t, loadCatalog(t)), loadBundle(t), "bundle/", "run `make catalog`")
}

// Every earlier version in the catalog is a release whose commit OLM_RELEASES names (hack/olm.mk),
// so that `make release-images` can rebuild its bundle and operator images on a fresh clone; and
// its blob must be what `opm render` made of that commit's bundle/, or the image rebuilt from it
// would not be what the catalog serves.
func TestCatalogReleasesAreBuiltFromTheirCommits(t *testing.T) {
	pkg := loadCatalog(t)
	head := currentBundle(t, pkg)
	releases := olmReleases(t)

	bundles := map[string]*model.Bundle{}
	for _, channel := range pkg.Channels {
		maps.Copy(bundles, channel.Bundles)
	}
	for name, b := range bundles {
		if _, ok := releases[b.Version.String()]; !ok && b.Name != head.Name {
			t.Errorf("%s is in the catalog but not in OLM_RELEASES (hack/olm.mk): add VERSION@COMMIT of its release", name)
		}
	}
	for version, commit := range releases {
		b, ok := bundles[pkgName+".v"+version]
		switch {
		case !ok:
			t.Errorf("OLM_RELEASES has %s, which the catalog does not", version)
			continue
		case b.Name == head.Name:
			t.Errorf("OLM_RELEASES has %s, the head, which is built from this tree", version)
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

// makeVariable reads a one-line variable's value from a makefile: definition is "NAME :=" or "NAME ?=".
func makeVariable(t *testing.T, makefile, definition string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(definition) + ` (\S+)$`).FindSubmatch(readFile(t, repoPath(makefile)))
	if m == nil {
		t.Fatalf("%s does not define %s", makefile, definition)
	}
	return string(m[1])
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
	// Renamed as release-images renames them: a release cut before images had public names
	// named them in the local registry.
	prePublic, public := makeVariable(t, "hack/olm.mk", "OLM_PRE_PUBLIC_REGISTRY :="), makeVariable(t, "Makefile", "REGISTRY ?=")
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
		data = bytes.ReplaceAll(data, []byte(prePublic+"/"), []byte(public+"/"))
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
