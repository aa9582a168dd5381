package olm

import (
	"reflect"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"
)

// The CSV description's examples are the alm-examples the console's forms start from, so that
// what the product page walks a user through is what the Create form holds: the same objects,
// the backup needing nothing made beforehand, and the cluster at the default volume size rather
// than one smaller than the operator would choose.
func TestCSVDescriptionExamplesAreTheALMExamples(t *testing.T) {
	bundle := loadBundle(t)
	description := bundle.CSV.Spec.Description
	examples := almExamples(t, bundle.CSV)

	shown := map[string]map[string]any{}
	for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(description, -1) {
		var obj map[string]any
		if err := sigsyaml.Unmarshal([]byte(block[1]), &obj); err != nil {
			t.Fatalf("a YAML example of the CSV description does not parse: %v\n%s", err, block[1])
		}
		kind, _ := obj["kind"].(string)
		if _, dup := shown[kind]; dup {
			t.Fatalf("the CSV description shows two %s", kind)
		}
		shown[kind] = obj
	}
	for kind, example := range examples {
		if !reflect.DeepEqual(shown[kind], example.Object) {
			t.Errorf("the CSV description's %s is not its alm-example:\n description: %v\n alm-example: %v", kind, shown[kind], example.Object)
		}
	}

	// Created together in one namespace with nothing else, the examples work: the backup needs
	// no Secret nor claim made beforehand.
	destination, _, _ := unstructured.NestedMap(examples["EtcdBackup"].Object, "spec", "destination")
	if size, _, _ := unstructured.NestedString(destination, "pvc", "provision", "size"); size == "" {
		t.Errorf("the example EtcdBackup's destination %v needs something made beforehand: give it pvc.provision", destination)
	}
	var defaultSize string
	for _, crd := range bundle.V1CRDs {
		if crd.Spec.Names.Kind == "EtcdCluster" {
			if d := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["storage"].Properties["size"].Default; d != nil {
				if err := sigsyaml.Unmarshal(d.Raw, &defaultSize); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for kind, path := range map[string][]string{
		"EtcdCluster": {"spec", "storage", "size"},
		"EtcdRestore": {"spec", "target", "cluster", "storage", "size"},
	} {
		if size, set, _ := unstructured.NestedString(examples[kind].Object, path...); set && size != defaultSize {
			t.Errorf("the example %s's volumes are %s, not the default %s", kind, size, defaultSize)
		}
	}
}
