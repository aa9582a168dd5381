// Command catalog-template renders the package's channels from opm's semver template
// (`make catalog`):
//
//	go run ./hack/catalog-template -template catalog-template.yaml -catalog catalog/etcd-operator -icon config/manifests/icon.svg
//
// The template lists, per channel archetype (candidate, fast, stable), the bundle image of every
// release in it: a release is one line. The channels, their upgrade edges and the default
// channel are what opm's semver template makes of it (operator-registry's
// alpha/template/semver, the code `opm alpha render-template semver` runs), with two differences:
//
//   - Bundles come from the blobs already rendered into -catalog's bundles/ (`opm render` of
//     bundle/ for the head; each release's blob as it was released), found by their image.
//     `opm alpha render-template` would pull each image from its registry instead.
//   - A channel is named after its archetype alone (stable, not the template's stable-v0):
//     subscriptions to stable, the channel of every release so far, keep working. A second
//     major version is refused until its channels are decided.
//
// Each entry also takes its bundle's olm.skipRange annotation, which OLM reads from the channel
// entry only: a cluster on any release the range covers upgrades to the bundle in one step.
// package.yaml (the default channel, the icon) and channels.yaml are written; the bundles are
// not. The result is checked as `opm validate` checks it before anything is written.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"mime"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/operator-framework/operator-registry/alpha/template/semver"
)

func main() {
	templatePath := flag.String("template", "", "the semver template (schema olm.semver)")
	catalogDir := flag.String("catalog", "", "the package's directory in the file-based catalog; its bundles/ holds every bundle the template names")
	iconPath := flag.String("icon", "", "the package's icon")
	flag.Parse()
	if *templatePath == "" || *catalogDir == "" || *iconPath == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(context.Background(), *templatePath, *catalogDir, *iconPath); err != nil {
		fmt.Fprintf(os.Stderr, "catalog-template: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, templatePath, catalogDir, iconPath string) error {
	bundles, err := declcfg.LoadFS(ctx, os.DirFS(filepath.Join(catalogDir, "bundles")))
	if err != nil {
		return fmt.Errorf("load %s/bundles: %w", catalogDir, err)
	}
	template, err := os.Open(templatePath)
	if err != nil {
		return err
	}
	defer template.Close()
	rendered, err := (&semver.Factory{}).CreateTemplate(bundleFrom(bundles.Bundles, catalogDir)).Render(ctx, template)
	if err != nil {
		return fmt.Errorf("%s: %w", templatePath, err)
	}
	if err := nameChannelsByArchetype(rendered); err != nil {
		return fmt.Errorf("%s: %w", templatePath, err)
	}
	if err := setSkipRanges(rendered); err != nil {
		return err
	}
	icon, err := os.ReadFile(iconPath)
	if err != nil {
		return err
	}
	rendered.Packages[0].Icon = &declcfg.Icon{Data: icon, MediaType: mime.TypeByExtension(filepath.Ext(iconPath))}

	// What `opm validate` checks, on the whole package: a bundle in no channel is refused too.
	whole := declcfg.DeclarativeConfig{Packages: rendered.Packages, Channels: rendered.Channels, Bundles: bundles.Bundles}
	if _, err := declcfg.ConvertToModel(whole); err != nil {
		return fmt.Errorf("the catalog %s would make is invalid: %w", templatePath, err)
	}
	for file, cfg := range map[string]declcfg.DeclarativeConfig{
		"package.yaml":  {Packages: rendered.Packages},
		"channels.yaml": {Channels: rendered.Channels},
	} {
		var out bytes.Buffer
		if err := declcfg.WriteYAML(cfg, &out); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(catalogDir, file), out.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// bundleFrom renders a bundle image the template names as the blob of bundles whose image it is.
func bundleFrom(bundles []declcfg.Bundle, catalogDir string) func(context.Context, string) (*declcfg.DeclarativeConfig, error) {
	return func(_ context.Context, image string) (*declcfg.DeclarativeConfig, error) {
		i := slices.IndexFunc(bundles, func(b declcfg.Bundle) bool { return b.Image == image })
		if i < 0 {
			return nil, fmt.Errorf("no bundle of image %s in %s/bundles: render it (make catalog with the VERSION it is) or take it out of the template", image, catalogDir)
		}
		return &declcfg.DeclarativeConfig{Bundles: []declcfg.Bundle{bundles[i]}}, nil
	}
}

// majorChannel is a channel name as the semver template makes it with generateMajorChannels.
var majorChannel = regexp.MustCompile(`^(candidate|fast|stable)-v(\d+)$`)

func nameChannelsByArchetype(cfg *declcfg.DeclarativeConfig) error {
	names := map[string]string{}
	for i := range cfg.Channels {
		ch := &cfg.Channels[i]
		m := majorChannel.FindStringSubmatch(ch.Name)
		if m == nil {
			return fmt.Errorf("channel %s is not <archetype>-v<major>: set generateMajorChannels: true and generateMinorChannels: false", ch.Name)
		}
		if other, ok := names[m[1]]; ok {
			return fmt.Errorf("channels %s and %s would both be %s: a second major version needs channels of its own, decided then", other, ch.Name, m[1])
		}
		names[m[1]] = ch.Name
		if cfg.Packages[0].DefaultChannel == ch.Name {
			cfg.Packages[0].DefaultChannel = m[1]
		}
		ch.Name = m[1]
	}
	return nil
}

// setSkipRanges gives each channel entry its bundle's olm.skipRange.
func setSkipRanges(cfg *declcfg.DeclarativeConfig) error {
	skipRanges := map[string]string{}
	for _, b := range cfg.Bundles {
		props, err := property.Parse(b.Properties)
		if err != nil {
			return fmt.Errorf("bundle %s: %w", b.Name, err)
		}
		if len(props.CSVMetadatas) != 1 {
			return errors.New("bundle " + b.Name + " has no olm.csv.metadata: render it with --migrate-level bundle-object-to-csv-metadata")
		}
		if r, ok := props.CSVMetadatas[0].Annotations["olm.skipRange"]; ok {
			skipRanges[b.Name] = r
		}
	}
	for i := range cfg.Channels {
		for j := range cfg.Channels[i].Entries {
			e := &cfg.Channels[i].Entries[j]
			e.SkipRange = skipRanges[e.Name]
		}
	}
	return nil
}
