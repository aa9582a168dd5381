// Command imagebuilder makes OCI images from files on disk, without a Docker engine, for the local
// test cluster (hack/cluster) and for release: the images are single static binaries plus a few
// files, so a Dockerfile's build machinery is not needed.
//
//	imagebuilder build -tag REF -o FILE.tar [-platform OS/ARCH]... [-add SRC:DST[:MODE]]...
//	    [-link DST:TARGET]... [-entrypoint ARG]... [-cmd ARG]... [-user UID:GID] [-env K=V]...
//	    [-label K=V]... [-workdir DIR]
//	imagebuilder push -registry HOST:PORT [-mirror-of REGISTRY] FILE.tar...
//	imagebuilder digest -tag REF FILE.tar
//	imagebuilder pin -images DIR -registry REGISTRY FILE...
//	imagebuilder tag FILE.tar
//	imagebuilder layout -o OUT.tar FILE.tar
//
// Without -platform, build writes a `docker load`-style tarball of one image for linux and this
// machine's architecture. With -platform, repeated for each platform, it writes an OCI image
// layout tarball whose index.json names one image index, with one image per platform: `{os}` and
// `{arch}` in an -add's SRC stand for the platform's, so each image gets its own cross-compiled
// binaries (bin/{os}_{arch}/manager). An ELF file added for an architecture it was not compiled
// for is refused. `ctr images import` reads both kinds (from an index, only the machine's own
// platform's content is imported). push sends either kind to the registry named in its tag, which
// must be the one given: a tag naming any other registry is refused, so nothing is ever sent to a
// registry by mistake. It speaks HTTPS, or plain HTTP to a registry on loopback, a private (RFC
// 1918) address or a .local name, as the registry answers; credentials are docker login's (the
// Docker config file, or $DOCKER_CONFIG's), anonymous where it has none. With -mirror-of, an image tagged in that registry (a
// public one, ghcr.io) is pushed to -registry under the same repository and tag, unchanged, as a
// mirror of it serves it: a containerd hosts.toml or an ImageDigestMirrorSet then pulls the public
// name from the mirror, by tag or by digest. digest prints the digest push makes an image (or an
// index) known by, for references pinned by digest (make bundle USE_IMAGE_DIGESTS=1), if the
// tarball is tagged REF. pin rewrites files (a bundle, a catalog) to name the images of a
// directory of tarballs by digest (pin.go). layout writes a `docker load` tarball's image as an
// OCI image layout tarball, the same image under the same digest (pin.go). An image without the OCI labels title, description,
// version, revision, source and licenses (org.opencontainers.image.*) is refused. Every image
// gets a base layer with /etc/passwd and /etc/group (root and nonroot 65532, as in distroless)
// and a world-writable /tmp. Timestamps are fixed, so the same inputs give the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
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

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is the modification time of every file and the image's creation time: images are
// rebuilt often and a stable digest tells whether anything really changed.
var epoch = time.Unix(0, 0).UTC()

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"

	// The annotations of an OCI layout's index.json entry that name the image: containerd's
	// import reads the first (a full reference), the layout convention and skopeo the second (a tag).
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// ociLabels are the org.opencontainers.image annotations every image must carry as labels, so
// that an image found in a registry tells what it is, where its recipe is, the commit it was
// built from and its license.
var ociLabels = []string{
	"org.opencontainers.image.title", "org.opencontainers.image.description", "org.opencontainers.image.version",
	"org.opencontainers.image.revision", "org.opencontainers.image.source", "org.opencontainers.image.licenses",
}

// elfMachines are the architectures an image can be built for, with the machine their ELF
// binaries declare.
var elfMachines = map[string]elf.Machine{
	"386": elf.EM_386, "amd64": elf.EM_X86_64, "arm": elf.EM_ARM, "arm64": elf.EM_AARCH64,
	"ppc64le": elf.EM_PPC64, "riscv64": elf.EM_RISCV, "s390x": elf.EM_S390,
}

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
	case "pin":
		err = pin(os.Args[2:])
	case "tag":
		err = printTag(os.Args[2:])
	case "layout":
		err = toLayout(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagebuilder %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: imagebuilder build -tag REF -o FILE.tar [flags] | imagebuilder push -registry HOST:PORT [-mirror-of REGISTRY] FILE.tar... | imagebuilder digest -tag REF FILE.tar | imagebuilder pin -images DIR -registry REGISTRY FILE... | imagebuilder tag FILE.tar | imagebuilder layout -o OUT.tar FILE.tar")
	os.Exit(2)
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	tag := fs.String("tag", "", "image reference, e.g. 127.0.0.1:5000/etcd:v3.6.16")
	out := fs.String("o", "", "output tarball")
	var spec imageSpec
	fs.StringVar(&spec.user, "user", "", "user[:group] the container runs as")
	fs.StringVar(&spec.workdir, "workdir", "/", "working directory")
	var labels, platforms list
	fs.Var(&platforms, "platform", "OS/ARCH to build for (repeat for each): the output is then an OCI image layout of an image index")
	fs.Var(&spec.adds, "add", "SRC:DST[:MODE] copies a file into the image (MODE octal, default 0755; {os} and {arch} in SRC name the platform's)")
	fs.Var(&spec.links, "link", "DST:TARGET adds a symbolic link")
	fs.Var(&spec.entrypoint, "entrypoint", "entrypoint argument (repeat for each)")
	fs.Var(&spec.cmd, "cmd", "cmd argument (repeat for each)")
	fs.Var(&spec.env, "env", "K=V environment variable (repeat for each)")
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
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("-label %q: want K=V", l)
		}
		if spec.labels == nil {
			spec.labels = map[string]string{}
		}
		spec.labels[k] = v
	}
	for _, k := range ociLabels {
		if spec.labels[k] == "" {
			return fmt.Errorf("no -label %s=...: every image carries %s", k, strings.Join(ociLabels, ", "))
		}
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}

	if len(platforms) == 0 {
		img, err := spec.image(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, false)
		if err != nil {
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

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		platform, err := parsePlatform(p)
		if err != nil {
			return err
		}
		img, err := spec.image(platform, true)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	if err := writeLayout(*out, ref, idx); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s (%s) -> %s\n", ref, digest, strings.Join(platforms, ", "), *out)
	return nil
}

func parsePlatform(p string) (v1.Platform, error) {
	osName, arch, ok := strings.Cut(p, "/")
	if !ok || osName != "linux" || strings.Contains(arch, "/") {
		return v1.Platform{}, fmt.Errorf("-platform %q: want linux/ARCH", p)
	}
	if _, known := elfMachines[arch]; !known {
		return v1.Platform{}, fmt.Errorf("-platform %q: architecture not one of %v", p, slices.Sorted(maps.Keys(elfMachines)))
	}
	return v1.Platform{OS: osName, Architecture: arch}, nil
}

// imageSpec is the image the flags describe, the same for every platform but for the files
// whose SRC names the platform.
type imageSpec struct {
	adds, links, entrypoint, cmd, env list
	user, workdir                     string
	labels                            map[string]string
}

// image builds the spec's image for a platform, with OCI media types (oci, for an image
// index) or Docker's (for a `docker load` tarball).
func (s imageSpec) image(platform v1.Platform, oci bool) (v1.Image, error) {
	base, layerType := empty.Image, types.DockerLayer
	if oci {
		base = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		layerType = types.OCILayer
	}
	baseLayer, err := layer(baseEntries(), layerType)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	contentEntries, err := fileEntries(s.adds, s.links, platform)
	if err != nil {
		return nil, err
	}
	content, err := layer(contentEntries, layerType)
	if err != nil {
		return nil, fmt.Errorf("content layer: %w", err)
	}
	img, err := mutate.AppendLayers(base, baseLayer, content)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = platform.OS
	cfg.Architecture = platform.Architecture
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = s.entrypoint
	cfg.Config.Cmd = s.cmd
	cfg.Config.User = s.user
	cfg.Config.WorkingDir = s.workdir
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, s.env...)
	cfg.Config.Labels = s.labels
	return mutate.ConfigFile(img, cfg)
}

// writeLayout writes the index as an OCI image layout tarball, index.json naming it ref.
func writeLayout(out string, ref name.Tag, idx v1.ImageIndex) error {
	return writeLayoutOf(out, func(p layout.Path, named layout.Option) error { return p.AppendIndex(idx, named) }, ref)
}

// writeLayoutOf writes an OCI image layout tarball whose index.json names ref what add appends.
func writeLayoutOf(out string, add func(layout.Path, layout.Option) error, ref name.Tag) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".imagebuilder-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := add(p, layout.WithAnnotations(map[string]string{annotationContainerdName: ref.Name(), annotationRefName: ref.TagStr()})); err != nil {
		return err
	}
	return tarDirectory(dir, out)
}

// tarDirectory writes dir's files to a tarball, in lexical order with fixed times, so that the
// same layout gives the same bytes.
func tarDirectory(dir, out string) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if closeErr := f.Close(); err == nil {
			err = closeErr
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(file string, d os.DirEntry, err error) error {
		if err != nil || file == dir {
			return err
		}
		rel, err := filepath.Rel(dir, file)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Format: tar.FormatPAX}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
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

func fileEntries(adds, links list, platform v1.Platform) ([]entry, error) {
	platformFile := strings.NewReplacer("{os}", platform.OS, "{arch}", platform.Architecture)
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
		data, err := os.ReadFile(platformFile.Replace(parts[0]))
		if err != nil {
			return nil, err
		}
		if err := checkArchitecture(data, platform.Architecture); err != nil {
			return nil, fmt.Errorf("-add %q for %s/%s: %w", a, platform.OS, platform.Architecture, err)
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

// checkArchitecture refuses an ELF file compiled for another architecture than the image's;
// other files (scripts, data) are taken as they are.
func checkArchitecture(data []byte, arch string) error {
	if !bytes.HasPrefix(data, []byte(elf.ELFMAG)) {
		return nil
	}
	want, known := elfMachines[arch]
	if !known {
		return nil
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("an ELF file that cannot be read: %w", err)
	}
	if f.Machine != want {
		return fmt.Errorf("an ELF file for %s, not %s", f.Machine, want)
	}
	return nil
}

func dir(name string, mode int64) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimSuffix(name, "/") + "/", Mode: mode}}
}

func file(name string, mode int64, data []byte) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
}

// layer tars the entries in memory: the largest image (etcd) is about 100 MB, and an in-memory
// layer can be read as many times as go-containerregistry needs (digest, then write).
func layer(entries []entry, mediaType types.MediaType) (v1.Layer, error) {
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
	}, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching, tarball.WithMediaType(mediaType))
}

// pushOptions are every push's: docker login's credentials for the registry, if it has any.
var pushOptions = []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}

func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	registry := fs.String("registry", "", "the only registry pushed to, e.g. 127.0.0.1:5000")
	mirrorOf := fs.String("mirror-of", "", "a registry -registry mirrors: images tagged in it are pushed to -registry, same repository and tag")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files := fs.Args()
	if *registry == "" || len(files) == 0 {
		return errors.New("-registry and at least one tarball are required")
	}
	for _, f := range files {
		isLayout, err := isOCILayout(f)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if isLayout {
			err = pushLayout(f, *registry, *mirrorOf)
		} else {
			err = pushDockerTarball(f, *registry, *mirrorOf)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pushTarget is where an image's tag is pushed: the tag itself when it names the registry pushed
// to; the same repository and tag in that registry when it names the registry mirrored; refused
// otherwise, so that nothing goes to a registry not named on the command line.
func pushTarget(file, tag, registry, mirrorOf string) (name.Tag, error) {
	// Not name.Insecure: with it, a registry under a public name would be tried over plain HTTP
	// too. One on loopback or a private address is (the local cluster's speaks plain HTTP).
	ref, err := name.NewTag(tag)
	if err != nil {
		return name.Tag{}, fmt.Errorf("%s: %w", file, err)
	}
	switch ref.RegistryStr() {
	case registry:
		return ref, nil
	case mirrorOf:
		mirrored, err := name.NewTag(registry + "/" + ref.RepositoryStr() + ":" + ref.TagStr())
		if err != nil {
			return name.Tag{}, fmt.Errorf("%s: %w", file, err)
		}
		return mirrored, nil
	}
	return name.Tag{}, fmt.Errorf("%s: tag %s is not in registry %s; not pushing", file, ref, registry)
}

func pushDockerTarball(f, registry, mirrorOf string) error {
	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(f) })
	if err != nil {
		return fmt.Errorf("%s: %w", f, err)
	}
	if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 {
		return fmt.Errorf("%s: want exactly one tagged image", f)
	}
	ref, err := pushTarget(f, manifest[0].RepoTags[0], registry, mirrorOf)
	if err != nil {
		return err
	}
	img, err := tarball.ImageFromPath(f, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", f, err)
	}
	if err := remote.Write(ref, img, pushOptions...); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	fmt.Printf("pushed %s\n", ref)
	return nil
}

// pushLayout pushes the image index an OCI layout tarball names, as build writes it.
func pushLayout(f, registry, mirrorOf string) error {
	top, desc, cleanup, err := openLayout(f)
	if err != nil {
		return err
	}
	defer cleanup()
	ref, err := pushTarget(f, desc.Annotations[annotationContainerdName], registry, mirrorOf)
	if err != nil {
		return err
	}
	if !desc.MediaType.IsIndex() {
		img, err := top.Image(desc.Digest)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := remote.Write(ref, img, pushOptions...); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Printf("pushed %s (image %s)\n", ref, desc.Digest)
		return nil
	}
	idx, err := top.ImageIndex(desc.Digest)
	if err != nil {
		return fmt.Errorf("%s: %w", f, err)
	}
	if err := remote.WriteIndex(ref, idx, pushOptions...); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	fmt.Printf("pushed %s (index %s)\n", ref, desc.Digest)
	return nil
}

// isOCILayout tells an OCI image layout tarball from a `docker load` one by its oci-layout file.
func isOCILayout(f string) (bool, error) {
	file, err := os.Open(f)
	if err != nil {
		return false, err
	}
	defer file.Close()
	tr := tar.NewReader(file)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if path.Clean(hdr.Name) == "oci-layout" {
			return true, nil
		}
	}
}

// untar extracts a layout tarball's directories and regular files into dir.
func untar(f, dir string) error {
	file, err := os.Open(f)
	if err != nil {
		return err
	}
	defer file.Close()
	tr := tar.NewReader(file)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("%s: a path outside the layout", hdr.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			err = writeFrom(dst, tr)
		default:
			err = fmt.Errorf("%s: not a file or directory", hdr.Name)
		}
		if err != nil {
			return err
		}
	}
}

func writeFrom(dst string, r io.Reader) (err error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer func() {
		if closeErr := f.Close(); err == nil {
			err = closeErr
		}
	}()
	_, err = io.Copy(f, r)
	return err
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
	isLayout, err := isOCILayout(file)
	if err != nil {
		return "", err
	}
	if isLayout {
		return indexDigest(file, tag)
	}
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

// indexDigest is the digest of the image index an OCI layout tarball (build -platform) names,
// which must be tagged tag: what push sends, and what a reference pinned by digest names.
func indexDigest(file, tag string) (string, error) {
	_, desc, cleanup, err := openLayout(file)
	if err != nil {
		return "", err
	}
	defer cleanup()
	if desc.Annotations[annotationContainerdName] != tag {
		return "", fmt.Errorf("%s: want one image index tagged %s", file, tag)
	}
	return desc.Digest.String(), nil
}

// openLayout unpacks an OCI layout tarball as build (or layout) writes it, whose index.json names
// exactly one image index or image, tagged by annotationContainerdName: that layout, its
// descriptor, and what removes the unpacked files once done.
func openLayout(file string) (v1.ImageIndex, v1.Descriptor, func(), error) {
	dir, err := os.MkdirTemp("", "imagebuilder-layout-")
	if err != nil {
		return nil, v1.Descriptor{}, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	fail := func(err error) (v1.ImageIndex, v1.Descriptor, func(), error) {
		cleanup()
		return nil, v1.Descriptor{}, nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := untar(file, dir); err != nil {
		return fail(err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return fail(err)
	}
	manifest, err := top.IndexManifest()
	if err != nil {
		return fail(err)
	}
	if len(manifest.Manifests) != 1 || manifest.Manifests[0].Annotations[annotationContainerdName] == "" ||
		!manifest.Manifests[0].MediaType.IsIndex() && !manifest.Manifests[0].MediaType.IsImage() {
		return fail(fmt.Errorf("want exactly one image index or image, named by %s", annotationContainerdName))
	}
	return top, manifest.Manifests[0], cleanup, nil
}
