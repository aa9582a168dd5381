// Command csv-descriptors removes, from the CSV `operator-sdk generate kustomize manifests`
// wrote, the descriptors that would mislead a console user (`make bundle`):
//
//	go run ./hack/csv-descriptors -csv <dir>/bases/etcd-operator.clusterserviceversion.yaml
//
// operator-sdk makes a descriptor of every marked field it reaches from a kind's spec or
// status, through every nested type. Two of those paths repeat what is better shown elsewhere:
//
//   - An EtcdRestore's target.cluster is an EtcdClusterSpec, so every EtcdCluster spec
//     descriptor came back under it (target.cluster.size as a pod count, and so on): a restore
//     form full of a cluster's widgets. The new cluster's spec is written in YAML instead.
//   - An EtcdBackup's status.history holds runs whose artifact is a snapshot record: its
//     timestamps came back as history[0].artifact.*, next to lastBackup's own.
//   - An EtcdRestore's source.location is a storage location like a backup's destination, so
//     its pvc.provision came back under it: a form field the API server refuses, a restore
//     reading a claim that exists.
//
// operator-sdk has no marker to stop it from walking into a type, hence this step.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// misleading are the descriptor path prefixes dropped, by kind and by descriptor list.
var misleading = []struct{ kind, list, prefix string }{
	{"EtcdRestore", "specDescriptors", "target.cluster."},
	{"EtcdBackup", "statusDescriptors", "history["},
	{"EtcdRestore", "specDescriptors", "source.location.pvc.provision"},
}

func main() {
	csvPath := flag.String("csv", "", "the ClusterServiceVersion YAML to rewrite in place")
	flag.Parse()
	if err := rewrite(*csvPath); err != nil {
		fmt.Fprintln(os.Stderr, "csv-descriptors:", err)
		os.Exit(1)
	}
}

func rewrite(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var csv map[string]any
	if err := yaml.Unmarshal(raw, &csv); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := dropMisleadingDescriptors(csv); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := yaml.Marshal(csv)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// dropMisleadingDescriptors removes the descriptors listed in misleading from csv's owned CRDs.
// A kind it names must be owned, so that a renamed kind cannot leave its descriptors in place.
func dropMisleadingDescriptors(csv map[string]any) error {
	spec, _ := csv["spec"].(map[string]any)
	crds, _ := spec["customresourcedefinitions"].(map[string]any)
	owned, _ := crds["owned"].([]any)
	for _, rule := range misleading {
		found := false
		for _, o := range owned {
			crd, _ := o.(map[string]any)
			if crd["kind"] != rule.kind {
				continue
			}
			found = true
			descriptors, _ := crd[rule.list].([]any)
			kept := make([]any, 0, len(descriptors))
			for _, d := range descriptors {
				if p, _ := d.(map[string]any)["path"].(string); !strings.HasPrefix(p, rule.prefix) {
					kept = append(kept, d)
				}
			}
			crd[rule.list] = kept
		}
		if !found {
			return fmt.Errorf("the CSV owns no %s", rule.kind)
		}
	}
	return nil
}
