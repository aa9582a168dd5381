package olm

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// A release's bundle (make bundle USE_IMAGE_DIGESTS=1) names every image by digest, wherever the
// CSV names it: the operator (containerImage, the manager's container, RELATED_IMAGE_OPERATOR, its
// relatedImage) and etcd (RELATED_IMAGE_ETCD, its relatedImage). The digests are those of the
// images' tarballs, which imagebuilder pushes unchanged. Such a bundle claims disconnected installs
// and passes OperatorHub's validators; nothing else in it differs from this tree's bundle.
func TestReleaseBundlePinsEveryImageByDigest(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	imagebuilder := filepath.Join(bin, "imagebuilder")
	for _, tool := range []string{"controller-gen", "kustomize", "operator-sdk", "imagebuilder"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			t.Fatalf("bin/%s is missing: run through `make test`, which builds it", tool)
		}
	}
	committed := loadBundle(t)
	manager := managerDeployment(t, committed.CSV).Spec.Template.Spec.Containers[0]
	etcdImage := envValue(manager.Env, "RELATED_IMAGE_ETCD")
	etcdNextImage := envValue(manager.Env, "RELATED_IMAGE_ETCD_V"+strings.ReplaceAll(strings.TrimPrefix(etcdNextVersion(t), "v"), ".", "_"))

	// Stand-ins for the images make release builds, named alike.
	images := t.TempDir()
	content := filepath.Join(t.TempDir(), "content")
	pinned := map[string]string{}
	for _, image := range []string{manager.Image, etcdImage, etcdNextImage} {
		if err := os.WriteFile(content, []byte(image), 0o644); err != nil {
			t.Fatal(err)
		}
		tarball := filepath.Join(images, strings.ReplaceAll(filepath.Base(image), ":", "_")+".tar")
		args := []string{"build", "-tag", image, "-o", tarball, "-add", content + ":/content"}
		for _, label := range []string{"title", "description", "version", "revision", "source", "licenses"} {
			args = append(args, "-label", "org.opencontainers.image."+label+"=stand-in")
		}
		run(t, imagebuilder, args...)
		digest := strings.TrimSpace(run(t, imagebuilder, "digest", "-tag", image, tarball))
		pinned[image] = image[:strings.LastIndex(image, ":")] + "@" + digest
	}

	work := copyRepository(t, root)
	if err := os.RemoveAll(filepath.Join(work, "bundle")); err != nil {
		t.Fatal(err)
	}
	runMake(t, work, "bundle", "USE_IMAGE_DIGESTS=1", "OLM_IMAGES="+images, "LOCALBIN="+bin)
	release, err := manifests.GetBundleFromDir(filepath.Join(work, "bundle", "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	csv := release.CSV

	operator, etcd, etcdNext := pinned[manager.Image], pinned[etcdImage], pinned[etcdNextImage]
	releaseManager := managerDeployment(t, csv).Spec.Template.Spec.Containers[0]
	related := map[string]string{}
	for _, ri := range csv.Spec.RelatedImages {
		related[ri.Name] = ri.Image
	}
	for what, got := range map[string][2]string{
		"containerImage":             {csv.Annotations["containerImage"], operator},
		"the manager's image":        {releaseManager.Image, operator},
		"RELATED_IMAGE_OPERATOR":     {envValue(releaseManager.Env, "RELATED_IMAGE_OPERATOR"), operator},
		"relatedImages operator":     {related["operator"], operator},
		"RELATED_IMAGE_ETCD":         {envValue(releaseManager.Env, "RELATED_IMAGE_ETCD"), etcd},
		"relatedImages etcd":         {related["etcd"], etcd},
		"the next etcd version's":    {envValue(releaseManager.Env, "RELATED_IMAGE_ETCD_V"+strings.ReplaceAll(strings.TrimPrefix(etcdNextVersion(t), "v"), ".", "_")), etcdNext},
		"disconnected (the feature)": {csv.Annotations[featurePrefix+"disconnected"], "true"},
	} {
		if got[0] != got[1] {
			t.Errorf("%s: %q, want %q", what, got[0], got[1])
		}
	}
	if len(related) != 3 || !slices.Contains(slices.Collect(maps.Values(related)), etcdNext) {
		t.Errorf("relatedImages %v, want the operator and etcd's two versions, each by digest", related)
	}
	checkOpenShiftFeatures(t, csv)
	checkOperatorHubValidation(t, release)

	// Put the tags back: what is left is this tree's bundle.
	fresh := filesUnder(t, work, "bundle")
	for name, want := range filesUnder(t, root, "bundle") {
		got := fresh[name]
		for image, ref := range pinned {
			got = bytes.ReplaceAll(got, []byte(ref), []byte(image))
		}
		got = bytes.Replace(got, []byte(featurePrefix+`disconnected: "true"`), []byte(featurePrefix+`disconnected: "false"`), 1)
		if !bytes.Equal(withoutCreatedAt(got), withoutCreatedAt(want)) {
			t.Errorf("the release's %s differs from this tree's in more than its images and disconnected", name)
		}
	}
	if len(fresh) != len(filesUnder(t, root, "bundle")) {
		t.Errorf("the release's bundle/ has %d files, this tree's %d", len(fresh), len(filesUnder(t, root, "bundle")))
	}
}

// An etcd image pinned by digest is taken for the default version's (main.go), so the one the
// bundle pins, RELATED_IMAGE_ETCD of config/manager, must be that version's, as must the
// ETCD_VERSION whose image hack/cluster.mk builds. Every other version the release ships (its
// images are built for ETCD_NEXT_VERSION) has its own, RELATED_IMAGE_ETCD_V<version>, tagged with
// that version: a version's image is taken to be the one its name says.
func TestRelatedEtcdImagesAreTheirVersions(t *testing.T) {
	manager := managerDeployment(t, loadBundle(t).CSV).Spec.Template.Spec.Containers[0]
	if image, want := envValue(manager.Env, "RELATED_IMAGE_ETCD"), ":v"+etcdv1alpha1.DefaultEtcdVersion; !strings.HasSuffix(image, want) {
		t.Errorf("RELATED_IMAGE_ETCD is %s, want an image tagged %s (api/v1alpha1.DefaultEtcdVersion)", image, want)
	}
	m := regexp.MustCompile(`(?m)^ETCD_VERSION \?= (\S+)$`).FindSubmatch(readFile(t, repoPath("Makefile")))
	if m == nil || string(m[1]) != "v"+etcdv1alpha1.DefaultEtcdVersion {
		t.Errorf("Makefile's ETCD_VERSION is %q, want v%s", m, etcdv1alpha1.DefaultEtcdVersion)
	}
	var versions []string
	for _, env := range manager.Env {
		v, ok := strings.CutPrefix(env.Name, "RELATED_IMAGE_ETCD_V")
		if !ok {
			continue
		}
		version := "v" + strings.ReplaceAll(v, "_", ".")
		versions = append(versions, version)
		if !strings.HasSuffix(env.Value, ":"+version) {
			t.Errorf("%s is %s, want an image tagged %s", env.Name, env.Value, version)
		}
	}
	if want := []string{etcdNextVersion(t)}; !slices.Equal(versions, want) {
		t.Errorf("RELATED_IMAGE_ETCD_V* name versions %v, want the Makefile's ETCD_NEXT_VERSION %v", versions, want)
	}
}

// etcdNextVersion is the Makefile's ETCD_NEXT_VERSION (v3.7.3): the version upgrades go to.
func etcdNextVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^ETCD_NEXT_VERSION \?= (\S+)$`).FindSubmatch(readFile(t, repoPath("Makefile")))
	if m == nil {
		t.Fatal("the Makefile defines no ETCD_NEXT_VERSION ?=")
	}
	return string(m[1])
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
