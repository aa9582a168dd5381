// Command catalog-channel makes a bundle already rendered into the file-based catalog the new head
// of a channel (`make catalog`):
//
//	go run ./hack/catalog-channel -catalog catalog/etcd-operator -file channels.yaml -channel stable -bundle etcd-operator.v0.2.0
//
// The new entry replaces the current head, which keeps the upgrade graph one chain, and skips
// every earlier version with a skipRange, so a cluster on any of them upgrades to the new head in
// one step. OLM takes upgrade edges only from channel entries (a CSV's spec.replaces is ignored
// by `opm render`), and a skipRange without replaces would leave two channel heads. A bundle
// already in the channel is left as it is, so running it again changes nothing.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
)

func main() {
	catalogDir := flag.String("catalog", "", "the package's directory in the file-based catalog")
	file := flag.String("file", "channels.yaml", "file, relative to -catalog, that holds the package's olm.channel blobs")
	channelName := flag.String("channel", "", "channel to add the bundle to")
	bundleName := flag.String("bundle", "", "name of the bundle (its CSV's name), already rendered into -catalog")
	flag.Parse()
	if *catalogDir == "" || *channelName == "" || *bundleName == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*catalogDir, *file, *channelName, *bundleName); err != nil {
		fmt.Fprintf(os.Stderr, "catalog-channel: %v\n", err)
		os.Exit(1)
	}
}

func run(catalogDir, file, channelName, bundleName string) error {
	catalog, err := declcfg.LoadFS(context.Background(), os.DirFS(catalogDir))
	if err != nil {
		return fmt.Errorf("load %s: %w", catalogDir, err)
	}
	versions, pkg, err := bundleVersions(catalog)
	if err != nil {
		return err
	}
	version, ok := versions[bundleName]
	if !ok {
		return fmt.Errorf("bundle %s is not in %s: render it first", bundleName, catalogDir)
	}

	channels, err := loadChannels(filepath.Join(catalogDir, file))
	if err != nil {
		return err
	}
	channel := findOrAddChannel(channels, pkg, channelName)
	if hasEntry(channel, bundleName) {
		return nil
	}
	entry, err := nextEntry(channel, versions, bundleName, version)
	if err != nil {
		return err
	}
	channel.Entries = append(channel.Entries, entry)

	// Validate what the catalog would become before writing it, as `opm validate` would.
	catalog.Channels = channels.Channels
	if _, err := declcfg.ConvertToModel(*catalog); err != nil {
		return fmt.Errorf("adding %s to channel %s: %w", bundleName, channelName, err)
	}
	var out bytes.Buffer
	if err := declcfg.WriteYAML(*channels, &out); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(catalogDir, file), out.Bytes(), 0o644)
}

// bundleVersions maps each bundle of the catalog's one package to its version.
func bundleVersions(catalog *declcfg.DeclarativeConfig) (map[string]semver.Version, string, error) {
	if len(catalog.Packages) != 1 {
		return nil, "", fmt.Errorf("want exactly one olm.package in the catalog directory, found %d", len(catalog.Packages))
	}
	versions := map[string]semver.Version{}
	for i := range catalog.Bundles {
		b := &catalog.Bundles[i]
		props, err := property.Parse(b.Properties)
		if err != nil {
			return nil, "", fmt.Errorf("bundle %s: %w", b.Name, err)
		}
		if len(props.Packages) != 1 {
			return nil, "", fmt.Errorf("bundle %s: want one olm.package property, found %d", b.Name, len(props.Packages))
		}
		v, err := semver.Parse(props.Packages[0].Version)
		if err != nil {
			return nil, "", fmt.Errorf("bundle %s: %w", b.Name, err)
		}
		versions[b.Name] = v
	}
	return versions, catalog.Packages[0].Name, nil
}

func loadChannels(path string) (*declcfg.DeclarativeConfig, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &declcfg.DeclarativeConfig{}, nil
	}
	if err != nil {
		return nil, err
	}
	channels, err := declcfg.LoadReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(channels.Packages)+len(channels.Bundles)+len(channels.Deprecations)+len(channels.Others) > 0 {
		return nil, fmt.Errorf("%s: holds more than olm.channel blobs, which this program would rewrite", path)
	}
	return channels, nil
}

func findOrAddChannel(channels *declcfg.DeclarativeConfig, pkg, name string) *declcfg.Channel {
	for i := range channels.Channels {
		if channels.Channels[i].Name == name {
			return &channels.Channels[i]
		}
	}
	channels.Channels = append(channels.Channels, declcfg.Channel{Schema: declcfg.SchemaChannel, Package: pkg, Name: name})
	return &channels.Channels[len(channels.Channels)-1]
}

func hasEntry(channel *declcfg.Channel, bundle string) bool {
	for _, e := range channel.Entries {
		if e.Name == bundle {
			return true
		}
	}
	return false
}

// nextEntry is the channel entry that makes bundle the channel's head.
func nextEntry(channel *declcfg.Channel, versions map[string]semver.Version, bundle string, version semver.Version) (declcfg.ChannelEntry, error) {
	if len(channel.Entries) == 0 {
		return declcfg.ChannelEntry{Name: bundle}, nil
	}
	head, err := channelHead(channel)
	if err != nil {
		return declcfg.ChannelEntry{}, err
	}
	if headVersion := versions[head]; !version.GT(headVersion) {
		return declcfg.ChannelEntry{}, fmt.Errorf("%s (%s) is not newer than the head of channel %s, %s (%s)", bundle, version, channel.Name, head, headVersion)
	}
	oldest := versions[head]
	for _, e := range channel.Entries {
		if v, ok := versions[e.Name]; ok && v.LT(oldest) {
			oldest = v
		}
	}
	return declcfg.ChannelEntry{
		Name:      bundle,
		Replaces:  head,
		SkipRange: fmt.Sprintf(">=%s <%s", oldest, version),
	}, nil
}

// channelHead is the one entry no other entry replaces or skips, as OLM determines it.
func channelHead(channel *declcfg.Channel) (string, error) {
	superseded := map[string]bool{}
	for _, e := range channel.Entries {
		superseded[e.Replaces] = true
		for _, s := range e.Skips {
			superseded[s] = true
		}
	}
	var heads []string
	for _, e := range channel.Entries {
		if !superseded[e.Name] {
			heads = append(heads, e.Name)
		}
	}
	if len(heads) != 1 {
		return "", fmt.Errorf("channel %s has %d heads %v, want 1", channel.Name, len(heads), heads)
	}
	return heads[0], nil
}
