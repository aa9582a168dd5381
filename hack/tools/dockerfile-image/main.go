// Command dockerfile-image builds the image of a Dockerfile that only assembles files, such as
// bundle.Dockerfile and catalog.Dockerfile, without a Docker engine: the labels, files, entrypoint
// and command come from the Dockerfile itself, so it stays the one recipe for both ways of building.
//
//	dockerfile-image -f DOCKERFILE -tag REF -o FILE.tar [-context DIR] [-add SRC:DST]... [-dir DST:MODE]... [-label K=V]...
//
// What a Docker engine would do beyond copying files is the caller's job, made explicit: only the
// final stage is built, its FROM (unless scratch) is not pulled, RUN is not run and COPY --from is
// not copied; -add supplies the files they would have produced (for catalog.Dockerfile: opm and
// grpc_health_probe from the opm image, /configs and the serve cache from the builder stage), and
// each skipped line is printed. The output is a `docker load`-style tarball, which
// `imagebuilder push` (hack/tools/imagebuilder) sends to a registry. -label adds labels to the
// Dockerfile's; as with imagebuilder, an image without the OCI labels title, description,
// version, revision, source and licenses (org.opencontainers.image.*) is refused. Timestamps are
// fixed, so the same inputs give the same digest.
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is the modification time of every file and the image's creation time.
var epoch = time.Unix(0, 0).UTC()

// ociLabels are the org.opencontainers.image annotations every image must carry as labels (the
// same as imagebuilder's).
var ociLabels = []string{
	"org.opencontainers.image.title", "org.opencontainers.image.description", "org.opencontainers.image.version",
	"org.opencontainers.image.revision", "org.opencontainers.image.source", "org.opencontainers.image.licenses",
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "dockerfile-image: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("dockerfile-image", flag.ExitOnError)
	dockerfile := fs.String("f", "", "the Dockerfile")
	contextDir := fs.String("context", ".", "build context the Dockerfile's COPY and ADD sources are relative to")
	tag := fs.String("tag", "", "image reference, e.g. 127.0.0.1:5000/etcd-operator-bundle:v0.1.0")
	out := fs.String("o", "", "output tarball")
	var adds, dirs, labels list
	fs.Var(&adds, "add", "SRC:DST adds a file or directory the FROM image or a RUN would have provided")
	fs.Var(&dirs, "dir", "DST:MODE adds an empty directory with an octal mode, e.g. /tmp:1777")
	fs.Var(&labels, "label", "K=V adds a label to the Dockerfile's (repeat for each)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dockerfile == "" || *tag == "" || *out == "" || fs.NArg() != 0 {
		return errors.New("-f, -tag and -o are required, and no positional arguments are taken")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return err
	}
	spec, err := parseDockerfile(*dockerfile)
	if err != nil {
		return err
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("-label %q: want K=V", l)
		}
		spec.labels[k] = v
	}
	for _, k := range ociLabels {
		if spec.labels[k] == "" {
			return fmt.Errorf("no label %s, from the Dockerfile or -label: every image carries %s", k, strings.Join(ociLabels, ", "))
		}
	}
	for _, s := range spec.skipped {
		fmt.Fprintf(os.Stderr, "dockerfile-image: not executed, supplied by -add: %s\n", s)
	}

	files := newTree()
	for _, d := range dirs {
		dst, mode, ok := strings.Cut(d, ":")
		m, err := strconv.ParseInt(mode, 8, 32)
		if !ok || err != nil {
			return fmt.Errorf("-dir %q: want DST:MODE (octal)", d)
		}
		files.dir(dst, m)
	}
	for _, a := range adds {
		src, dst, ok := strings.Cut(a, ":")
		if !ok {
			return fmt.Errorf("-add %q: want SRC:DST", a)
		}
		if err := files.copy(src, dst); err != nil {
			return err
		}
	}
	for _, c := range spec.copies {
		for _, src := range c.sources {
			if err := files.copy(filepath.Join(*contextDir, src), c.dest); err != nil {
				return err
			}
		}
	}

	layer, err := files.layer()
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
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
	cfg.Config.Labels = spec.labels
	cfg.Config.Entrypoint = spec.entrypoint
	cfg.Config.Cmd = spec.cmd
	cfg.Config.User = spec.user
	if len(spec.entrypoint) > 0 || len(spec.cmd) > 0 {
		cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
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

// spec is what a Dockerfile says about the image's files and configuration.
type spec struct {
	labels     map[string]string
	copies     []copyInstruction
	entrypoint []string
	cmd        []string
	user       string
	skipped    []string
}

type copyInstruction struct {
	sources []string
	dest    string
}

// parseDockerfile reads the final stage's instructions that assemble files and configuration.
// Earlier stages, a FROM other than scratch, RUN and COPY --from are recorded as skipped, for -add
// to supply; anything else (ARG, ENV, other flags) is refused rather than silently misbuilt.
func parseDockerfile(file string) (spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return spec{}, err
	}
	lines := logicalLines(data)
	final := 0
	for i, line := range lines {
		if instruction, _, _ := strings.Cut(line, " "); strings.EqualFold(instruction, "FROM") {
			final = i
		}
	}
	s := spec{labels: map[string]string{}, skipped: lines[:final:final]}
	for _, line := range lines[final:] {
		instruction, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instruction) {
		case "FROM":
			if rest != "scratch" {
				s.skipped = append(s.skipped, line)
			}
		case "RUN":
			s.skipped = append(s.skipped, line)
		case "EXPOSE":
		case "LABEL":
			if err := parseLabels(rest, s.labels); err != nil {
				return spec{}, fmt.Errorf("%s: %q: %w", file, line, err)
			}
		case "COPY", "ADD":
			if strings.HasPrefix(rest, "--from=") {
				s.skipped = append(s.skipped, line)
				continue
			}
			if strings.HasPrefix(rest, "--") {
				return spec{}, fmt.Errorf("%s: %q: flags other than --from are not supported", file, line)
			}
			words, err := words(rest)
			if err != nil || len(words) < 2 {
				return spec{}, fmt.Errorf("%s: %q: want SRC... DST", file, line)
			}
			s.copies = append(s.copies, copyInstruction{sources: words[:len(words)-1], dest: words[len(words)-1]})
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := json.Unmarshal([]byte(rest), &argv); err != nil {
				return spec{}, fmt.Errorf("%s: %q: only the exec (JSON) form is supported", file, line)
			}
			if strings.ToUpper(instruction) == "ENTRYPOINT" {
				s.entrypoint = argv
			} else {
				s.cmd = argv
			}
		case "USER":
			s.user = rest
		default:
			return spec{}, fmt.Errorf("%s: %q: instruction not supported", file, line)
		}
	}
	return s, nil
}

// logicalLines joins continued lines and drops comments and blank lines.
func logicalLines(data []byte) []string {
	var lines []string
	var current strings.Builder
	scanner := bufio.NewScanner(bytes.NewReader(data))
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if current.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			current.WriteString(cont + " ")
			continue
		}
		current.WriteString(line)
		lines = append(lines, strings.TrimSpace(current.String()))
		current.Reset()
	}
	if current.Len() > 0 {
		lines = append(lines, strings.TrimSpace(current.String()))
	}
	return lines
}

// words splits a COPY or ADD argument list, in its JSON or its space-separated form.
func words(rest string) ([]string, error) {
	if strings.HasPrefix(rest, "[") {
		var w []string
		return w, json.Unmarshal([]byte(rest), &w)
	}
	return strings.Fields(rest), nil
}

// parseLabels reads key=value pairs, values optionally double-quoted.
func parseLabels(rest string, labels map[string]string) error {
	for rest != "" {
		key, value, ok := strings.Cut(rest, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return errors.New("want key=value")
		}
		if strings.HasPrefix(value, `"`) {
			unquoted, err := strconv.QuotedPrefix(value)
			if err != nil {
				return err
			}
			rest = strings.TrimSpace(value[len(unquoted):])
			if value, err = strconv.Unquote(unquoted); err != nil {
				return err
			}
		} else {
			value, rest, _ = strings.Cut(value, " ")
			rest = strings.TrimSpace(rest)
		}
		labels[key] = value
	}
	return nil
}

// tree is the image's file system, keyed by path without a leading slash.
type tree struct {
	entries map[string]*tar.Header
	data    map[string][]byte
}

func newTree() *tree {
	return &tree{entries: map[string]*tar.Header{}, data: map[string][]byte{}}
}

func (t *tree) dir(p string, mode int64) {
	p = clean(p)
	t.parents(p)
	t.entries[p] = &tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode}
}

func (t *tree) parents(p string) {
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		if _, ok := t.entries[d]; !ok {
			t.entries[d] = &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}
		}
	}
}

// copy follows Docker's COPY: a directory's contents go into dst; a file goes to dst, or into
// it when dst ends in a slash. Permission bits are kept, as COPY keeps them: opm makes its serve
// cache group-writable, and OLM's catalog pods, running as a non-root user in group 0, must be
// able to open it for writing.
func (t *tree) copy(src, dst string) error {
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		if strings.HasSuffix(dst, "/") {
			dst = path.Join(dst, filepath.Base(src))
		}
		return t.file(src, dst, info)
	}
	t.dir(dst, int64(info.Mode().Perm()))
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == src {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case info.IsDir():
			t.dir(target, int64(info.Mode().Perm()))
			return nil
		case info.Mode().IsRegular():
			return t.file(p, target, info)
		default:
			return fmt.Errorf("%s: only regular files and directories can be copied", p)
		}
	})
}

func (t *tree) file(src, dst string, info fs.FileInfo) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	dst = clean(dst)
	t.parents(dst)
	t.entries[dst] = &tar.Header{Typeflag: tar.TypeReg, Name: dst, Mode: int64(info.Mode().Perm()), Size: int64(len(data))}
	t.data[dst] = data
	return nil
}

func clean(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// layer tars the tree in path order, which puts every directory before its contents.
func (t *tree) layer() (v1.Layer, error) {
	paths := make([]string, 0, len(t.entries))
	for p := range t.entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		hdr := *t.entries[p]
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = epoch, epoch, epoch
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(t.data[p]); err != nil {
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
