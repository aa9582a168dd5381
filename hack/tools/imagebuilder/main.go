// Command imagebuilder makes OCI images from files on disk, without a Docker engine, for the local
// test cluster (hack/cluster): the images there are single static binaries plus a few files, so a
// Dockerfile's build machinery is not needed.
//
//	imagebuilder build -tag REF -o FILE.tar [-add SRC:DST[:MODE]]... [-link DST:TARGET]...
//	    [-entrypoint ARG]... [-cmd ARG]... [-user UID:GID] [-env K=V]... [-label K=V]... [-workdir DIR]
//	imagebuilder push -registry HOST:PORT FILE.tar...
//	imagebuilder digest -tag REF FILE.tar
//
// build writes a `docker load`-style tarball, which `ctr images import` reads; push sends such
// tarballs over plain HTTP to the registry named in their tag, which must be the one given: a
// tag naming any other registry is refused, so nothing is ever sent off the machine by mistake.
// digest prints the digest push makes the image known by, for references pinned by digest
// (make bundle USE_IMAGE_DIGESTS=1), if the tarball is tagged REF. Every image gets a base layer with /etc/passwd and
// /etc/group (root and nonroot 65532, as in distroless) and a world-writable /tmp. Timestamps
// are fixed, so the same inputs give the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is the modification time of every file and the image's creation time: images are
// rebuilt often and a stable digest tells whether anything really changed.
var epoch = time.Unix(0, 0).UTC()

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	case "digest":
		err = digest(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagebuilder %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: imagebuilder build -tag REF -o FILE.tar [flags] | imagebuilder push -registry HOST:PORT FILE.tar... | imagebuilder digest -tag REF FILE.tar")
	os.Exit(2)
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	tag := fs.String("tag", "", "image reference, e.g. 127.0.0.1:5000/etcd:v3.6.16")
	out := fs.String("o", "", "output tarball")
	user := fs.String("user", "", "user[:group] the container runs as")
	workdir := fs.String("workdir", "/", "working directory")
	var adds, links, entrypoint, cmd, env, labels list
	fs.Var(&adds, "add", "SRC:DST[:MODE] copies a file into the image (MODE octal, default 0755)")
	fs.Var(&links, "link", "DST:TARGET adds a symbolic link")
	fs.Var(&entrypoint, "entrypoint", "entrypoint argument (repeat for each)")
	fs.Var(&cmd, "cmd", "cmd argument (repeat for each)")
	fs.Var(&env, "env", "K=V environment variable (repeat for each)")
	fs.Var(&labels, "label", "K=V image label (repeat for each)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tag == "" || *out == "" || fs.NArg() != 0 {
		return errors.New("-tag and -o are required, and no positional arguments are taken")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return err
	}

	base, err := layer(baseEntries())
	if err != nil {
		return fmt.Errorf("base layer: %w", err)
	}
	contentEntries, err := fileEntries(adds, links)
	if err != nil {
		return err
	}
	content, err := layer(contentEntries)
	if err != nil {
		return fmt.Errorf("content layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, base, content)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Cmd = cmd
	cfg.Config.User = *user
	cfg.Config.WorkingDir = *workdir
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
	if len(labels) > 0 {
		cfg.Config.Labels = map[string]string{}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok || k == "" {
				return fmt.Errorf("-label %q: want K=V", l)
			}
			cfg.Config.Labels[k] = v
		}
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(*out, ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s -> %s\n", ref, digest, *out)
	return nil
}

// entry is one file, directory or symbolic link of a layer.
type entry struct {
	hdr  tar.Header
	data []byte
}

func baseEntries() []entry {
	return []entry{
		dir("etc", 0o755), file("etc/passwd", 0o644, []byte(passwd)), file("etc/group", 0o644, []byte(group)),
		dir("home", 0o755), {hdr: tar.Header{Typeflag: tar.TypeDir, Name: "home/nonroot/", Mode: 0o700, Uid: 65532, Gid: 65532}},
		dir("tmp", 0o1777),
	}
}

func fileEntries(adds, links list) ([]entry, error) {
	var entries []entry
	dirs := map[string]bool{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, a := range adds {
		parts := strings.Split(a, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("-add %q: want SRC:DST[:MODE]", a)
		}
		mode := int64(0o755)
		if len(parts) == 3 {
			m, err := strconv.ParseInt(parts[2], 8, 32)
			if err != nil {
				return nil, fmt.Errorf("-add %q: mode: %w", a, err)
			}
			mode = m
		}
		data, err := os.ReadFile(parts[0])
		if err != nil {
			return nil, err
		}
		dst := strings.TrimPrefix(path.Clean(parts[1]), "/")
		addParents(dst)
		entries = append(entries, file(dst, mode, data))
	}
	for _, l := range links {
		dst, target, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("-link %q: want DST:TARGET", l)
		}
		dst = strings.TrimPrefix(path.Clean(dst), "/")
		addParents(dst)
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: dst, Linkname: target, Mode: 0o777}})
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.hdr.Name] {
			return nil, fmt.Errorf("%s is added twice", e.hdr.Name)
		}
		seen[e.hdr.Name] = true
	}
	// A sorted list puts every directory before its children, as in a tar made by tar(1).
	var dirEntries []entry
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		dirEntries = append(dirEntries, dir(d, 0o755))
	}
	return append(dirEntries, entries...), nil
}

func dir(name string, mode int64) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimSuffix(name, "/") + "/", Mode: mode}}
}

func file(name string, mode int64, data []byte) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
}

// layer tars the entries in memory: the largest image (etcd) is about 100 MB, and an in-memory
// layer can be read as many times as go-containerregistry needs (digest, then write).
func layer(entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := e.hdr
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = epoch, epoch, epoch
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
}

func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	registry := fs.String("registry", "", "the only registry pushed to, e.g. 127.0.0.1:5000")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files := fs.Args()
	if *registry == "" || len(files) == 0 {
		return errors.New("-registry and at least one tarball are required")
	}
	for _, f := range files {
		manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(f) })
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 {
			return fmt.Errorf("%s: want exactly one tagged image", f)
		}
		// The local registry speaks plain HTTP: it listens on loopback only.
		ref, err := name.NewTag(manifest[0].RepoTags[0], name.Insecure)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if ref.RegistryStr() != *registry {
			return fmt.Errorf("%s: tag %s is not in registry %s; not pushing", f, ref, *registry)
		}
		img, err := tarball.ImageFromPath(f, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := remote.Write(ref, img); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Printf("pushed %s\n", ref)
	}
	return nil
}

func digest(args []string) error {
	fs := flag.NewFlagSet("digest", flag.ExitOnError)
	tag := fs.String("tag", "", "the image reference the tarball must be tagged with")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tag == "" || fs.NArg() != 1 {
		return errors.New("-tag and one tarball are required")
	}
	d, err := imageDigest(fs.Arg(0), *tag)
	if err != nil {
		return err
	}
	fmt.Println(d)
	return nil
}

// imageDigest is the digest of the tarball's image, which must be tagged tag: the digest of its
// manifest, which push sends as it is (the layers are stored compressed, so nothing is rebuilt).
func imageDigest(file, tag string) (string, error) {
	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{tag}) {
		return "", fmt.Errorf("%s: want one image tagged %s, found %+v", file, tag, manifest)
	}
	img, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	return d.String(), nil
}
