package main

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// pin names every image of the tarballs by the digest push gives it, wherever a file names it by
// tag, leaves a longer tag alone, and refuses a file that still names an image of the registry by
// tag: a release whose bundle reached an image by tag could not install from a digest mirror.
func TestPinNamesEveryImageByTheDigestItIsPushedUnder(t *testing.T) {
	images := t.TempDir()
	bin := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	for _, tag := range []string{"ghcr.io/org/operator:v1.0.0", "ghcr.io/org/etcd:v3.6.16"} {
		out := filepath.Join(images, strings.ReplaceAll(filepath.Base(tag), ":", "_")+".tar")
		if err := build(append([]string{"-tag", tag, "-o", out, "-add", bin + ":/tool", "-label", "x=" + tag}, ociLabelArgs()...)); err != nil {
			t.Fatal(err)
		}
		d, err := imageDigest(out, tag)
		if err != nil {
			t.Fatal(err)
		}
		digests[tag] = d
	}

	file := filepath.Join(t.TempDir(), "csv.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("containerImage: ghcr.io/org/operator:v1.0.0\n- image: ghcr.io/org/etcd:v3.6.16\nvalue: \"ghcr.io/org/etcd:v3.6.16\"\nother: quay.io/x/y:v1\n")
	if err := pin([]string{"-images", images, "-registry", "ghcr.io/org", file}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := "containerImage: ghcr.io/org/operator@" + digests["ghcr.io/org/operator:v1.0.0"] +
		"\n- image: ghcr.io/org/etcd@" + digests["ghcr.io/org/etcd:v3.6.16"] +
		"\nvalue: \"ghcr.io/org/etcd@" + digests["ghcr.io/org/etcd:v3.6.16"] + "\"\nother: quay.io/x/y:v1\n"
	if string(got) != want {
		t.Fatalf("pinned:\n%s\nwant:\n%s", got, want)
	}

	// A longer tag is another image, and one no tarball pins is refused, the file untouched.
	unpinned := "image: ghcr.io/org/etcd:v3.6.160\n"
	write(unpinned)
	err = pin([]string{"-images", images, "-registry", "ghcr.io/org", file})
	if err == nil || !strings.Contains(err.Error(), "ghcr.io/org/etcd:v3.6.160") {
		t.Fatalf("a file naming an image no tarball pins: %v, want it named in a refusal", err)
	}
	if got, _ := os.ReadFile(file); string(got) != unpinned {
		t.Fatalf("a refused file was rewritten: %s", got)
	}
}

// layout writes a single-platform image as an OCI layout without changing it: the same tag, and
// the digest the image had, which push then gives it in a registry. A release's bundle pins the
// digest of the image tarball, so its OCI layout must not be another image.
func TestLayoutKeepsTheImageAndItsDigest(t *testing.T) {
	server := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(server.Close)
	host := strings.TrimPrefix(server.URL, "http://")

	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	tag := host + "/org/bundle:v1"
	docker, oci := filepath.Join(dir, "bundle_v1.tar"), filepath.Join(dir, "oci", "bundle_v1.tar")
	if err := build(append([]string{"-tag", tag, "-o", docker, "-add", bin + ":/tool"}, ociLabelArgs()...)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(oci), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := toLayout([]string{"-o", oci, docker}); err != nil {
		t.Fatal(err)
	}
	if isLayout, err := isOCILayout(oci); err != nil || !isLayout {
		t.Fatalf("%s is not an OCI layout (%v)", oci, err)
	}
	before, err := imageDigest(docker, tag)
	if err != nil {
		t.Fatal(err)
	}
	after, err := imageDigest(oci, tag)
	if err != nil {
		t.Fatal(err)
	}
	if gotTag, err := imageTag(oci); err != nil || gotTag != tag || after != before {
		t.Fatalf("the layout is %s at %s (%v), want %s at %s", gotTag, after, err, tag, before)
	}
	if err := push([]string{"-registry", host, oci}); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := remote.Head(ref)
	if err != nil {
		t.Fatal(err)
	}
	if pushed.Digest.String() != before {
		t.Fatalf("the registry serves %s as %s, want %s", tag, pushed.Digest, before)
	}
}
