package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// pin rewrites, in each file, every reference by tag to an image of the -images tarballs into a
// reference by digest (<repository>@sha256:...), the digest push makes the image known by. It then
// refuses a file that still names an image under -registry by tag: a release's bundle and catalog
// reach every image by digest, which is what lets a disconnected cluster pull them from a mirror
// (an ImageDigestMirrorSet mirrors digests only) and what pins what runs to what was released.
//
//	imagebuilder pin -images DIR -registry ghcr.io/etcd-database FILE...
func pin(args []string) error {
	fs := flag.NewFlagSet("pin", flag.ExitOnError)
	images := fs.String("images", "", "the directory of image tarballs whose tags are pinned")
	registry := fs.String("registry", "", "the registry and organisation no file may name by tag afterwards, e.g. ghcr.io/etcd-database")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *images == "" || *registry == "" || fs.NArg() == 0 {
		return errors.New("-images, -registry and at least one file are required")
	}
	pins, err := pinsOf(*images)
	if err != nil {
		return err
	}
	for _, file := range fs.Args() {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		pinned, err := pinReferences(string(data), pins, *registry)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if err := os.WriteFile(file, []byte(pinned), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// pinsOf maps the tag of every tarball in dir to its reference by digest.
func pinsOf(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	pins := map[string]string{}
	for _, file := range files {
		tag, err := imageTag(file)
		if err != nil {
			return nil, err
		}
		d, err := imageDigest(file, tag)
		if err != nil {
			return nil, err
		}
		pins[tag] = tag[:strings.LastIndex(tag, ":")] + "@" + d
	}
	return pins, nil
}

// referenceEnd is what may follow a reference: it does not go on as a longer tag.
const referenceEnd = `(?:[^A-Za-z0-9._-]|$)`

// pinReferences replaces every tag of pins in text by its pinned reference, and refuses text that
// still names an image under registry by tag.
func pinReferences(text string, pins map[string]string, registry string) (string, error) {
	for _, tag := range slices.Sorted(maps.Keys(pins)) {
		re := regexp.MustCompile(regexp.QuoteMeta(tag) + "(" + referenceEnd + ")")
		text = re.ReplaceAllString(text, strings.ReplaceAll(pins[tag], "$", "$$")+"${1}")
	}
	byTag := regexp.MustCompile(regexp.QuoteMeta(registry) + `/[a-z0-9._/-]+:[A-Za-z0-9._-]+`)
	if left := byTag.FindAllString(text, -1); len(left) > 0 {
		slices.Sort(left)
		return "", fmt.Errorf("names by tag images no tarball pins: %s", strings.Join(slices.Compact(left), ", "))
	}
	return text, nil
}

// printTag prints the tag of a tarball's image, which digest and push go by.
func printTag(args []string) error {
	if len(args) != 1 {
		return errors.New("one tarball is required")
	}
	tag, err := imageTag(args[0])
	if err != nil {
		return err
	}
	fmt.Println(tag)
	return nil
}

// toLayout writes a `docker load` tarball's image as an OCI image layout tarball, index.json
// naming its tag: the same manifest, so the same digest, in the form a release's other images have.
func toLayout(args []string) error {
	fs := flag.NewFlagSet("layout", flag.ExitOnError)
	out := fs.String("o", "", "the OCI layout tarball to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() != 1 {
		return errors.New("-o and one tarball are required")
	}
	in := fs.Arg(0)
	if isLayout, err := isOCILayout(in); err != nil || isLayout {
		if err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		return fmt.Errorf("%s is an OCI layout already", in)
	}
	tag, err := imageTag(in)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(tag, name.Insecure)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	img, err := tarball.ImageFromPath(in, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return writeLayoutOf(*out, func(p layout.Path, named layout.Option) error { return p.AppendImage(img, named) }, ref)
}

// imageTag is the one tag a tarball's image (or image index) carries, as build wrote it.
func imageTag(file string) (string, error) {
	isLayout, err := isOCILayout(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	if !isLayout {
		manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
		if err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 {
			return "", fmt.Errorf("%s: want exactly one tagged image", file)
		}
		return manifest[0].RepoTags[0], nil
	}
	_, desc, cleanup, err := openLayout(file)
	if err != nil {
		return "", err
	}
	defer cleanup()
	return desc.Annotations[annotationContainerdName], nil
}
