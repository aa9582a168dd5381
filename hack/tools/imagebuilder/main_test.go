package main

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ociLabelArgs are the -label flags of the OCI labels every image must carry.
func ociLabelArgs() []string {
	return []string{"-label", "org.opencontainers.image.title=tool", "-label", "org.opencontainers.image.description=A tool",
		"-label", "org.opencontainers.image.version=1.0.0", "-label", "org.opencontainers.image.revision=0123456789abcdef",
		"-label", "org.opencontainers.image.source=https://example.com/tool", "-label", "org.opencontainers.image.licenses=Apache-2.0"}
}

// checkOCILabels checks that an image's config carries the labels ociLabelArgs gives.
func checkOCILabels(t *testing.T, labels map[string]string) {
	t.Helper()
	args := ociLabelArgs()
	for i := 1; i < len(args); i += 2 {
		k, v, _ := strings.Cut(args[i], "=")
		if labels[k] != v {
			t.Errorf("label %s is %q, want %q (labels: %v)", k, labels[k], v, labels)
		}
	}
}

func TestBuildRefusesAnImageWithoutTheOCILabels(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	all := ociLabelArgs()
	for i := 1; i < len(all); i += 2 {
		label, _, _ := strings.Cut(all[i], "=")
		without := slices.Concat(all[:i-1], all[i+1:])
		empty := slices.Concat(all[:i], []string{label + "="}, all[i+1:])
		for name, labels := range map[string][]string{"without " + label: without, "with an empty " + label: empty} {
			args := append([]string{"-tag", "127.0.0.1:5000/tool:v1", "-o", filepath.Join(dir, "tool.tar"), "-add", bin + ":/tool"}, labels...)
			if err := build(args); err == nil {
				t.Errorf("an image %s was built", name)
			}
		}
	}
}

func TestBuildWritesARunnableImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "images", "tool.tar")
	args := []string{"-tag", "127.0.0.1:5000/tool:v1", "-o", out, "-add", bin + ":/usr/local/bin/tool",
		"-link", "/bin/t:/usr/local/bin/tool", "-entrypoint", "/usr/local/bin/tool", "-user", "65532:65532", "-env", "A=b",
		"-label", "operators.operatorframework.io.index.configs.v1=/configs"}
	if err := build(append(args, ociLabelArgs()...)); err != nil {
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
	if cfg.OS != "linux" || cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/tool"}) ||
		!slices.Contains(cfg.Config.Env, "A=b") || cfg.Config.Labels["operators.operatorframework.io.index.configs.v1"] != "/configs" {
		t.Fatalf("config %+v", cfg.Config)
	}
	checkOCILabels(t, cfg.Config.Labels)

	files := map[string]*tar.Header{}
	var order []string
	tr := tar.NewReader(mutate.Extract(img))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = hdr
		order = append(order, hdr.Name)
	}
	for _, name := range []string{"etc/passwd", "tmp", "usr/local/bin/tool", "bin/t"} {
		if files[name] == nil {
			t.Errorf("%s missing from the image (has %v)", name, order)
		}
	}
	if files["bin/t"] != nil && files["bin/t"].Linkname != "/usr/local/bin/tool" {
		t.Errorf("bin/t links to %q", files["bin/t"].Linkname)
	}
	if slices.Index(order, "usr/local/bin") > slices.Index(order, "usr/local/bin/tool") {
		t.Errorf("a directory comes after its content: %v", order)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	var digests []string
	for _, name := range []string{"a.tar", "b.tar"} {
		out := filepath.Join(dir, name)
		if err := build(append([]string{"-tag", "127.0.0.1:5000/tool:v1", "-o", out, "-add", bin + ":/tool"}, ociLabelArgs()...)); err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(out, nil)
		if err != nil {
			t.Fatal(err)
		}
		digest, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, digest.String())
	}
	if digests[0] != digests[1] {
		t.Fatalf("same inputs, different digests %v", digests)
	}
}

func TestBuildRefusesAPathAddedTwice(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "busybox")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := build(append([]string{"-tag", "127.0.0.1:5000/b:1", "-o", filepath.Join(dir, "b.tar"),
		"-add", bin + ":/bin/busybox", "-link", "/bin/busybox:busybox"}, ociLabelArgs()...))
	if err == nil {
		t.Fatal("a link over an added file was accepted")
	}
}

func TestPushRefusesOtherRegistries(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tool.tar")
	if err := build(append([]string{"-tag", "quay.io/someone/tool:v1", "-o", out, "-add", bin + ":/tool"}, ociLabelArgs()...)); err != nil {
		t.Fatal(err)
	}
	if err := push([]string{"-registry", "127.0.0.1:5000", out}); err == nil {
		t.Fatal("pushed an image tagged for another registry")
	}
}

// With -mirror-of, an image tagged in a public registry lands in the mirror under the same
// repository and tag, and the mirror serves it under the digest the public name is pinned by; a
// tag of any third registry is still refused.
func TestPushToAMirrorKeepsTheRepositoryAndTheDigest(t *testing.T) {
	server := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(server.Close)
	mirror := strings.TrimPrefix(server.URL, "http://")

	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	public := "ghcr.io/someone/tool:v1"
	out := filepath.Join(dir, "tool_v1.tar")
	if err := build(append([]string{"-tag", public, "-o", out, "-add", bin + ":/tool"}, ociLabelArgs()...)); err != nil {
		t.Fatal(err)
	}
	if err := push([]string{"-registry", mirror, out}); err == nil {
		t.Fatal("pushed an image of another registry without -mirror-of")
	}
	if err := push([]string{"-registry", mirror, "-mirror-of", "quay.io", out}); err == nil {
		t.Fatal("pushed an image of a registry that is not the one mirrored")
	}
	if err := push([]string{"-registry", mirror, "-mirror-of", "ghcr.io", out}); err != nil {
		t.Fatal(err)
	}
	want, err := imageDigest(out, public)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(mirror+"/someone/tool:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := remote.Head(ref)
	if err != nil {
		t.Fatalf("the mirror does not serve %s: %v", ref, err)
	}
	if pushed.Digest.String() != want {
		t.Fatalf("the mirror serves %s as %s; the public name is pinned by %s", ref, pushed.Digest, want)
	}
}

// buildTool builds a one-file image tagged tag into dir.
func buildTool(t *testing.T, dir, tag string) string {
	t.Helper()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tool.tar")
	if err := build(append([]string{"-tag", tag, "-o", out, "-add", bin + ":/tool"}, ociLabelArgs()...)); err != nil {
		t.Fatal(err)
	}
	return out
}

// A registry under a public name speaks HTTPS only: push reaches it over HTTPS for every request,
// not only for the first. The name example.com is the test server's, dialled on loopback.
func TestPushReachesAnHTTPSRegistryOverHTTPS(t *testing.T) {
	server := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(server.Close)
	transport := server.Client().Transport.(*http.Transport).Clone()
	transport.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, server.Listener.Addr().String())
	}
	saved := pushOptions
	pushOptions = append(slices.Clone(saved), remote.WithTransport(transport))
	t.Cleanup(func() { pushOptions = saved })

	tag := "example.com/someone/tool:v1"
	out := buildTool(t, t.TempDir(), tag)
	if err := push([]string{"-registry", "example.com", out}); err != nil {
		t.Fatal(err)
	}
	want, err := imageDigest(out, tag)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(tag)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := remote.Head(ref, remote.WithTransport(transport))
	if err != nil {
		t.Fatalf("the registry does not serve %s: %v", tag, err)
	}
	if pushed.Digest.String() != want {
		t.Fatalf("the registry serves %s as %s, want %s", tag, pushed.Digest, want)
	}
}

// A registry that wants a login gets docker login's credentials, from the Docker config file.
func TestPushLogsInWithDockerLoginsCredentials(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, password, ok := r.BasicAuth(); !ok || user != "someone" || password != "secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	host := strings.TrimPrefix(server.URL, "http://")
	dir := t.TempDir()
	out := buildTool(t, dir, host+"/someone/tool:v1")

	t.Setenv("DOCKER_CONFIG", filepath.Join(dir, "docker"))
	if err := push([]string{"-registry", host, out}); err == nil {
		t.Fatal("pushed without credentials to a registry that wants a login")
	}
	auth := base64.StdEncoding.EncodeToString([]byte("someone:secret"))
	if err := os.MkdirAll(filepath.Join(dir, "docker"), 0o700); err != nil {
		t.Fatal(err)
	}
	config := `{"auths": {"` + host + `": {"auth": "` + auth + `"}}}`
	if err := os.WriteFile(filepath.Join(dir, "docker", "config.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := push([]string{"-registry", host, out}); err != nil {
		t.Fatal(err)
	}
}

// digest names the image push sends: pushed to a registry, the tarball's image is served under
// that digest, so a reference pinned by it (<repository>@<digest>) pulls exactly that image. It
// refuses a tarball tagged other than the reference given, whose digest would be another image's.
func TestDigestIsThePushedImages(t *testing.T) {
	server := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(server.Close)
	host := strings.TrimPrefix(server.URL, "http://")

	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	tag := host + "/tool:v1"
	out := filepath.Join(dir, "tool_v1.tar")
	if err := build(append([]string{"-tag", tag, "-o", out, "-add", bin + ":/tool"}, ociLabelArgs()...)); err != nil {
		t.Fatal(err)
	}
	got, err := imageDigest(out, tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := push([]string{"-registry", host, out}); err != nil {
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
	if got != pushed.Digest.String() {
		t.Fatalf("digest %s, the registry serves %s under %s", got, pushed.Digest, tag)
	}
	pinned, err := name.ParseReference(host+"/tool@"+got, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(pinned); err != nil {
		t.Fatalf("%s: %v", pinned, err)
	}

	if _, err := imageDigest(out, host+"/tool:v2"); err == nil {
		t.Fatal("the digest of a tarball tagged tool:v1 was given for tool:v2")
	}
}
