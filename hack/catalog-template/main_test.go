package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
)

// blob is a bundle as `opm render` writes it, with only what channels are made from: the
// package, the version and the CSV's olm.skipRange.
func blob(version, skipRange string) declcfg.Bundle {
	annotations := map[string]string{}
	if skipRange != "" {
		annotations["olm.skipRange"] = skipRange
	}
	metadata, err := json.Marshal(property.CSVMetadata{Annotations: annotations})
	if err != nil {
		panic(err)
	}
	return declcfg.Bundle{
		Schema: declcfg.SchemaBundle, Package: "etcd-operator", Name: "etcd-operator.v" + version,
		Image: "registry.test/etcd-operator-bundle:v" + version,
		Properties: []property.Property{
			property.MustBuildPackage("etcd-operator", version),
			{Type: property.TypeCSVMetadata, Value: metadata},
		},
	}
}

// render writes the blobs and a template listing stable and candidate bundles, runs the program,
// and returns the catalog it wrote, or its error.
func render(t *testing.T, blobs []declcfg.Bundle, candidate, stable []string) (*declcfg.DeclarativeConfig, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bundles"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range blobs {
		var out bytes.Buffer
		if err := declcfg.WriteYAML(declcfg.DeclarativeConfig{Bundles: []declcfg.Bundle{b}}, &out); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "bundles", b.Name+".yaml"), out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lines := func(versions []string) string {
		var s strings.Builder
		for _, v := range versions {
			fmt.Fprintf(&s, "  - image: registry.test/etcd-operator-bundle:v%s\n", v)
		}
		return s.String()
	}
	template := "schema: olm.semver\ngenerateMajorChannels: true\ngenerateMinorChannels: false\n" +
		"candidate:\n  bundles:\n" + lines(candidate) + "stable:\n  bundles:\n" + lines(stable)
	templatePath := filepath.Join(t.TempDir(), "template.yaml")
	icon := filepath.Join(t.TempDir(), "icon.svg")
	for path, data := range map[string]string{templatePath: template, icon: "<svg/>"} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(context.Background(), templatePath, dir, icon); err != nil {
		return nil, err
	}
	return declcfg.LoadFS(context.Background(), os.DirFS(dir))
}

// A release is one line in the template: a patch or a minor release listed in a channel becomes
// its one head, which every earlier version of the channel reaches in one step, and which carries
// its CSV's skipRange. The channels keep their names, stable stays the default.
func TestEachReleaseIsOneLineAndBecomesTheHead(t *testing.T) {
	for _, tc := range []struct {
		name              string
		blobs             []declcfg.Bundle
		candidate, stable []string
	}{
		{"today's catalog", []declcfg.Bundle{blob("0.1.0", ""), blob("0.2.0", ">=0.1.0 <0.2.0")},
			[]string{"0.1.0", "0.2.0"}, []string{"0.1.0", "0.2.0"}},
		{"a patch release", []declcfg.Bundle{blob("0.1.0", ""), blob("0.2.0", ">=0.1.0 <0.2.0"), blob("0.2.1", ">=0.1.0 <0.2.1")},
			[]string{"0.1.0", "0.2.0", "0.2.1"}, []string{"0.1.0", "0.2.0", "0.2.1"}},
		{"a minor release in candidate only", []declcfg.Bundle{blob("0.1.0", ""), blob("0.2.0", ">=0.1.0 <0.2.0"), blob("0.3.0", ">=0.1.0 <0.3.0")},
			[]string{"0.1.0", "0.2.0", "0.3.0"}, []string{"0.1.0", "0.2.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := render(t, tc.blobs, tc.candidate, tc.stable)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Packages) != 1 || cfg.Packages[0].DefaultChannel != "stable" || cfg.Packages[0].Icon == nil {
				t.Fatalf("packages %+v, want one, default channel stable, with the icon", cfg.Packages)
			}
			model, err := declcfg.ConvertToModel(*cfg)
			if err != nil {
				t.Fatalf("invalid catalog: %v", err)
			}
			for name, versions := range map[string][]string{"candidate": tc.candidate, "stable": tc.stable} {
				channel := model["etcd-operator"].Channels[name]
				if channel == nil {
					t.Fatalf("no channel %s", name)
				}
				head, err := channel.Head()
				if err != nil {
					t.Fatalf("channel %s: %v", name, err)
				}
				if want := "etcd-operator.v" + versions[len(versions)-1]; head.Name != want {
					t.Errorf("channel %s: head %s, want %s", name, head.Name, want)
				}
				if want := blobSkipRange(t, tc.blobs, head.Name); head.SkipRange != want {
					t.Errorf("channel %s: the head's skipRange %q, its CSV's %q", name, head.SkipRange, want)
				}
				inRange, err := semver.ParseRange(head.SkipRange)
				if err != nil {
					t.Fatalf("channel %s: %v", name, err)
				}
				for _, b := range channel.Bundles {
					if b != head && !inRange(b.Version) && head.Replaces != b.Name {
						t.Errorf("channel %s: %s does not upgrade to %s in one step", name, b.Name, head.Name)
					}
				}
			}
		})
	}
}

func blobSkipRange(t *testing.T, blobs []declcfg.Bundle, name string) string {
	t.Helper()
	for _, b := range blobs {
		if b.Name == name {
			props, err := property.Parse(b.Properties)
			if err != nil {
				t.Fatal(err)
			}
			return props.CSVMetadatas[0].Annotations["olm.skipRange"]
		}
	}
	t.Fatalf("no blob %s", name)
	return ""
}

// What the program refuses, writing nothing: a template image with no blob, a blob in no
// channel, and a second major version (its channels are a decision for then).
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name              string
		blobs             []declcfg.Bundle
		candidate, stable []string
		want              string
	}{
		{"image without a blob", []declcfg.Bundle{blob("0.1.0", "")}, []string{"0.1.0", "0.2.0"}, []string{"0.1.0"},
			"no bundle of image registry.test/etcd-operator-bundle:v0.2.0"},
		{"blob in no channel", []declcfg.Bundle{blob("0.1.0", ""), blob("0.2.0", ">=0.1.0 <0.2.0")}, []string{"0.1.0"}, []string{"0.1.0"},
			"not found in any channel entries"},
		{"a second major version", []declcfg.Bundle{blob("0.2.0", ""), blob("1.0.0", ">=0.2.0 <1.0.0")}, []string{"0.2.0", "1.0.0"}, []string{"0.2.0"},
			"a second major version needs channels of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.blobs, tc.candidate, tc.stable)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}
