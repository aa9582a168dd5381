package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ociLabelArgs are the -label flags of the OCI labels every image must carry.
func ociLabelArgs() []string {
	return []string{"-label", "org.opencontainers.image.title=bundle", "-label", "org.opencontainers.image.description=A bundle",
		"-label", "org.opencontainers.image.version=1.0.0", "-label", "org.opencontainers.image.revision=0123456789abcdef",
		"-label", "org.opencontainers.image.source=https://example.com/bundle", "-label", "org.opencontainers.image.licenses=Apache-2.0"}
}

// dockerfile writes a Dockerfile with a label of its own and one COPY, and returns its path.
func dockerfile(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.yaml"), []byte("a: b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "Dockerfile")
	content := "FROM scratch\nLABEL operators.operatorframework.io.bundle.mediatype.v1=registry+v1\nCOPY data.yaml /manifests/\n"
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestLabelsAreAddedToTheDockerfiles(t *testing.T) {
	file := dockerfile(t)
	out := filepath.Join(t.TempDir(), "bundle.tar")
	args := []string{"-f", file, "-context", filepath.Dir(file), "-tag", "127.0.0.1:5000/bundle:v1", "-o", out}
	if err := run(append(args, ociLabelArgs()...)); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	labels := cfg.Config.Labels
	if labels["operators.operatorframework.io.bundle.mediatype.v1"] != "registry+v1" {
		t.Errorf("the Dockerfile's label is lost: %v", labels)
	}
	flags := ociLabelArgs()
	for i := 1; i < len(flags); i += 2 {
		k, v, _ := strings.Cut(flags[i], "=")
		if labels[k] != v {
			t.Errorf("label %s is %q, want %q (labels: %v)", k, labels[k], v, labels)
		}
	}
}

func TestAnImageWithoutTheOCILabelsIsRefused(t *testing.T) {
	file := dockerfile(t)
	all := ociLabelArgs()
	for i := 1; i < len(all); i += 2 {
		label, _, _ := strings.Cut(all[i], "=")
		args := []string{"-f", file, "-context", filepath.Dir(file), "-tag", "127.0.0.1:5000/bundle:v1", "-o", filepath.Join(t.TempDir(), "b.tar")}
		if err := run(append(args, slices.Concat(all[:i-1], all[i+1:])...)); err == nil {
			t.Errorf("an image without %s was built", label)
		}
	}
}
