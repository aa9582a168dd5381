package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// The machines each architecture's binaries are built for, as debug/elf names them.
var machineOf = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

var (
	crossBuildOnce sync.Once
	crossBuildDir  string
	errCrossBuild  error
)

// crossBuilt is a directory holding linux_amd64/tool and linux_arm64/tool, a tiny static Go
// program cross-compiled as the Makefile cross-compiles the manager (CGO_ENABLED=0 GOARCH=...).
// It is built once for all the tests, in a directory removed by TestMain.
func crossBuilt(t *testing.T) string {
	t.Helper()
	crossBuildOnce.Do(func() {
		crossBuildDir, errCrossBuild = os.MkdirTemp("", "imagebuilder-cross-")
		if errCrossBuild != nil {
			return
		}
		src := filepath.Join(crossBuildDir, "src")
		if errCrossBuild = os.MkdirAll(src, 0o755); errCrossBuild != nil {
			return
		}
		files := map[string]string{
			"go.mod":  "module example.com/tool\n\ngo 1.26\n",
			"main.go": "package main\n\nimport \"os\"\n\nfunc main() { os.Exit(0) }\n",
		}
		for file, content := range files {
			if errCrossBuild = os.WriteFile(filepath.Join(src, file), []byte(content), 0o644); errCrossBuild != nil {
				return
			}
		}
		for _, arch := range []string{"amd64", "arm64"} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(crossBuildDir, "linux_"+arch, "tool"), ".")
			cmd.Dir = src
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=", "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				errCrossBuild = fmt.Errorf("go build for linux/%s: %w\n%s", arch, err, out)
				return
			}
		}
	})
	if errCrossBuild != nil {
		t.Fatal(errCrossBuild)
	}
	return crossBuildDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if crossBuildDir != "" {
		_ = os.RemoveAll(crossBuildDir)
	}
	os.Exit(code)
}

// readLayout reads an OCI image layout tarball's top-level index.
func readLayout(t *testing.T, file string) v1.ImageIndex {
	t.Helper()
	dir := t.TempDir()
	if err := untar(file, dir); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s is not an OCI image layout: %v", file, err)
	}
	return idx
}

// fileInImage returns the content of a file of the image's filesystem.
func fileInImage(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	tr := tar.NewReader(mutate.Extract(img))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s is not in the image", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == path {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
}

// checkPlatforms checks that an image index holds one image per platform, linux/amd64 and
// linux/arm64, whose config names that platform and whose /tool is a binary for it.
func checkPlatforms(t *testing.T, idx v1.ImageIndex) {
	t.Helper()
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, desc := range manifest.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform in the index", desc.Digest)
		}
		platform := desc.Platform.OS + "/" + desc.Platform.Architecture
		platforms = append(platforms, platform)
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != desc.Platform.OS || cfg.Architecture != desc.Platform.Architecture {
			t.Errorf("the %s image's config says %s/%s", platform, cfg.OS, cfg.Architecture)
		}
		if cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/tool"}) {
			t.Errorf("the %s image's config: %+v", platform, cfg.Config)
		}
		checkOCILabels(t, cfg.Config.Labels)
		bin, err := elf.NewFile(bytes.NewReader(fileInImage(t, img, "tool")))
		if err != nil {
			t.Fatalf("the %s image's /tool: %v", platform, err)
		}
		if want := machineOf[desc.Platform.Architecture]; bin.Machine != want {
			t.Errorf("the %s image's /tool is a %s binary, want %s", platform, bin.Machine, want)
		}
	}
	slices.Sort(platforms)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("the index lists %v, want %v", platforms, want)
	}
}

// multiPlatformArgs build an image of the cross-built tool for linux/amd64 and linux/arm64.
func multiPlatformArgs(t *testing.T, tag, out string) []string {
	return append([]string{"-tag", tag, "-o", out, "-platform", "linux/amd64", "-platform", "linux/arm64",
		"-add", filepath.Join(crossBuilt(t), "{os}_{arch}", "tool") + ":/tool", "-entrypoint", "/tool", "-user", "65532:65532"},
		ociLabelArgs()...)
}

func TestBuildWritesAnIndexOfOneImagePerPlatform(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tool.tar")
	if err := build(multiPlatformArgs(t, "127.0.0.1:5000/tool:v1", out)); err != nil {
		t.Fatal(err)
	}
	top := readLayout(t, out)
	manifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	// containerd's import names the image from io.containerd.image.name; skopeo and the OCI
	// layout's own convention take the tag from org.opencontainers.image.ref.name.
	if len(manifest.Manifests) != 1 {
		t.Fatalf("the layout's index.json lists %d entries, want the image index alone", len(manifest.Manifests))
	}
	desc := manifest.Manifests[0]
	if !desc.MediaType.IsIndex() || desc.Annotations["io.containerd.image.name"] != "127.0.0.1:5000/tool:v1" ||
		desc.Annotations["org.opencontainers.image.ref.name"] != "v1" {
		t.Fatalf("index.json's entry: %+v", desc)
	}
	idx, err := top.ImageIndex(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	checkPlatforms(t, idx)
}

func TestBuildRefusesABinaryOfAnotherArchitecture(t *testing.T) {
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	// The test binary itself is an ELF file of the machine's architecture, not of the other.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	err = build(append([]string{"-tag", "127.0.0.1:5000/tool:v1", "-o", filepath.Join(t.TempDir(), "tool.tar"),
		"-platform", "linux/" + other, "-add", self + ":/tool"}, ociLabelArgs()...))
	if err == nil {
		t.Fatalf("a linux/%s image was built with a linux/%s binary in it", other, runtime.GOARCH)
	}
}

func TestPushSendsTheIndex(t *testing.T) {
	server := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer server.Close()
	u, err := url.Parse(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	tag := u.Host + "/tool:v1"
	out := filepath.Join(t.TempDir(), "tool.tar")
	if err := build(multiPlatformArgs(t, tag, out)); err != nil {
		t.Fatal(err)
	}
	if err := push([]string{"-registry", u.Host, out}); err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("the registry has no index for %s: %v", tag, err)
	}
	checkPlatforms(t, idx)
	// What a bundle pinned by digest names (make bundle USE_IMAGE_DIGESTS=1) is what was pushed.
	want, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := imageDigest(out, tag); err != nil || got != want.String() {
		t.Errorf("digest of the index tarball %q (%v), want the pushed index's %s", got, err, want)
	}
}
