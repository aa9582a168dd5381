package main

import (
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestDropMisleadingDescriptors(t *testing.T) {
	var csv map[string]any
	if err := yaml.Unmarshal([]byte(`
spec:
  customresourcedefinitions:
    owned:
    - kind: EtcdRestore
      specDescriptors:
      - path: target
      - path: target.mode
      - path: target.cluster.size
      - path: target.cluster.tls.secrets.peer
      - path: source.location.pvc.claimName
      - path: source.location.pvc.provision
      - path: source.location.pvc.provision.size
      statusDescriptors:
      - path: startTime
    - kind: EtcdBackup
      specDescriptors:
      - path: destination.s3.credentialsSecretName
      - path: destination.pvc.provision.size
      statusDescriptors:
      - path: lastBackup.completionTime
      - path: history[0].artifact.completionTime
    - kind: EtcdCluster
      specDescriptors:
      - path: size
      - path: target.cluster.size
`), &csv); err != nil {
		t.Fatal(err)
	}
	if err := dropMisleadingDescriptors(csv); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string][]string{
		"EtcdRestore": {"specDescriptors": {"target", "target.mode", "source.location.pvc.claimName"}, "statusDescriptors": {"startTime"}},
		"EtcdBackup":  {"specDescriptors": {"destination.s3.credentialsSecretName", "destination.pvc.provision.size"}, "statusDescriptors": {"lastBackup.completionTime"}},
		"EtcdCluster": {"specDescriptors": {"size", "target.cluster.size"}},
	}
	for _, o := range csv["spec"].(map[string]any)["customresourcedefinitions"].(map[string]any)["owned"].([]any) {
		crd := o.(map[string]any)
		kind := crd["kind"].(string)
		for list, paths := range want[kind] {
			var got []string
			for _, d := range crd[list].([]any) {
				got = append(got, d.(map[string]any)["path"].(string))
			}
			if !slices.Equal(got, paths) {
				t.Errorf("%s %s: %v, want %v", kind, list, got, paths)
			}
		}
	}
}

// A kind renamed or no longer owned must stop `make bundle`, not leave its descriptors in place.
func TestDropMisleadingDescriptorsWantsEveryKind(t *testing.T) {
	csv := map[string]any{"spec": map[string]any{"customresourcedefinitions": map[string]any{"owned": []any{
		map[string]any{"kind": "EtcdBackup"},
	}}}}
	if err := dropMisleadingDescriptors(csv); err == nil {
		t.Error("a CSV without EtcdRestore was accepted")
	}
}
