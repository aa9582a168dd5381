package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
