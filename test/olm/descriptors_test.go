package olm

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// OLM's descriptor URNs the console renders as widgets (operator-framework/api's
// crds-descriptors list).
const (
	selectURN    = "urn:alm:descriptor:com.tectonic.ui:select:"
	secretURN    = "urn:alm:descriptor:io.kubernetes:Secret"
	timestampURN = "urn:alm:descriptor:timestamp"
	podCountURN  = "urn:alm:descriptor:com.tectonic.ui:podCount"
)

// The console draws its forms and detail pages from the CSV's descriptors: each must point at a
// field the CRD has and show it as what it is. A select offers only values the CRD accepts (and
// every value it accepts), a Secret picker stands on every field
// that names a Secret, a timestamp on a date-time, a pod count on a spec only; and an
// EtcdRestore's form is not filled with an EtcdCluster's widgets (target.cluster), nor a
// backup's details with every past run's.
func TestCSVDescriptorsShowWhatTheFieldsAre(t *testing.T) {
	bundle := loadBundle(t)
	schemas := map[string]*apiextensionsv1.JSONSchemaProps{}
	for _, crd := range bundle.V1CRDs {
		schemas[crd.Spec.Names.Kind] = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	}
	for _, owned := range bundle.CSV.Spec.CustomResourceDefinitions.Owned {
		root := schemas[owned.Kind]
		if root == nil {
			t.Fatalf("the CSV owns %s, which the bundle has no CRD for", owned.Kind)
		}
		check := func(part, path string, xDescriptors []string) {
			t.Helper()
			where := owned.Kind + " " + part + "." + path
			field := schemaAt(root.Properties[part], path)
			if field == nil {
				t.Errorf("%s: no such field in the CRD", where)
				return
			}
			var selects []string
			for _, x := range xDescriptors {
				switch {
				case strings.HasPrefix(x, selectURN):
					selects = append(selects, strings.TrimPrefix(x, selectURN))
				case x == timestampURN && field.Format != "date-time":
					t.Errorf("%s: a timestamp descriptor on a field of format %q", where, field.Format)
				case x == podCountURN && part != "spec":
					t.Errorf("%s: a pod count on a status field, which the console would offer to change", where)
				}
			}
			if enum := enumOf(t, field); part == "spec" && (len(enum) > 0 || len(selects) > 0) {
				offered := slices.Clone(enum)
				slices.Sort(offered)
				slices.Sort(selects)
				if !slices.Equal(offered, selects) {
					t.Errorf("%s: the select offers %v; the CRD accepts %v", where, selects, enum)
				}
			}
			if namesSecret := strings.HasSuffix(path, "SecretName") || strings.HasSuffix(path, ".secretName") || strings.Contains(path, "tls.secrets."); namesSecret != slices.Contains(xDescriptors, secretURN) {
				t.Errorf("%s: names a Secret: %v, has the Secret picker: %v", where, namesSecret, !namesSecret)
			}
		}
		for _, d := range owned.SpecDescriptors {
			if owned.Kind == "EtcdRestore" && strings.HasPrefix(d.Path, "target.cluster.") {
				t.Errorf("EtcdRestore spec.%s: an EtcdCluster's descriptor in the restore's form", d.Path)
			}
			check("spec", d.Path, d.XDescriptors)
		}
		for _, d := range owned.StatusDescriptors {
			if strings.HasPrefix(d.Path, "history[") {
				t.Errorf("%s status.%s: a past run's field among the backup's details", owned.Kind, d.Path)
			}
			check("status", d.Path, d.XDescriptors)
		}
	}
	// Every field that names a Secret has its picker, but in the restore's target.cluster.
	for _, owned := range bundle.CSV.Spec.CustomResourceDefinitions.Owned {
		for _, path := range secretFields(schemas[owned.Kind].Properties["spec"], "") {
			if owned.Kind == "EtcdRestore" && strings.HasPrefix(path, "target.cluster.") {
				continue
			}
			if !slices.ContainsFunc(owned.SpecDescriptors, func(d operatorsv1alpha1.SpecDescriptor) bool {
				return d.Path == path && slices.Contains(d.XDescriptors, secretURN)
			}) {
				t.Errorf("%s spec.%s names a Secret and has no Secret picker", owned.Kind, path)
			}
		}
	}
	if !slices.ContainsFunc(ownedKind(t, bundle.CSV, "EtcdCluster").StatusDescriptors, func(d operatorsv1alpha1.StatusDescriptor) bool {
		return d.Path == "clientEndpoint"
	}) {
		t.Error("EtcdCluster status.clientEndpoint, the URL clients connect to, has no descriptor")
	}
}

// schemaAt is the schema of the dotted path under root, nil if there is none; a [0] step is an
// array's items.
func schemaAt(root apiextensionsv1.JSONSchemaProps, path string) *apiextensionsv1.JSONSchemaProps {
	field := &root
	for _, step := range strings.Split(path, ".") {
		name, isItem := strings.CutSuffix(step, "[0]")
		next, ok := field.Properties[name]
		if !ok {
			return nil
		}
		field = &next
		if isItem {
			if field.Items == nil || field.Items.Schema == nil {
				return nil
			}
			field = field.Items.Schema
		}
	}
	return field
}

func enumOf(t *testing.T, field *apiextensionsv1.JSONSchemaProps) []string {
	t.Helper()
	var values []string
	for _, raw := range field.Enum {
		var v string
		if err := json.Unmarshal(raw.Raw, &v); err != nil {
			t.Fatalf("enum value %s: %v", raw.Raw, err)
		}
		values = append(values, v)
	}
	return values
}

func ownedKind(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion, kind string) operatorsv1alpha1.CRDDescription {
	t.Helper()
	for _, o := range csv.Spec.CustomResourceDefinitions.Owned {
		if o.Kind == kind {
			return o
		}
	}
	t.Fatalf("the CSV owns no %s", kind)
	return operatorsv1alpha1.CRDDescription{}
}

// secretFields are the dotted paths under field of the string fields that name a Secret: those
// named *SecretName and the certificates of tls.secrets.
func secretFields(field apiextensionsv1.JSONSchemaProps, prefix string) []string {
	var paths []string
	for name, child := range field.Properties {
		path := prefix + name
		switch {
		case child.Type == "string" && (strings.HasSuffix(name, "SecretName") || strings.HasSuffix(prefix, "tls.secrets.")):
			paths = append(paths, path)
		case child.Type == "object":
			paths = append(paths, secretFields(child, path+".")...)
		}
	}
	slices.Sort(paths)
	return paths
}
