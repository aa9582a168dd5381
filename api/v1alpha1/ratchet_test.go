package v1alpha1_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An EtcdBackup admitted before the plain-HTTP rule existed (by an earlier release's CRD) must
// keep working after an upgrade: the operator adds and removes its finalizer with updates of the
// whole object, and a refusal there would stop the backups. The API server ratchets a rule
// whose field is unchanged; a change of the location is checked.
func TestPlainHTTPRuleLetsObjectsAdmittedBeforeItBeUpdated(t *testing.T) {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	key := client.ObjectKey{Name: "etcdbackups.etcd.database.dev"}
	if err := k8sClient.Get(ctx(t), key, crd); err != nil {
		t.Fatal(err)
	}
	withRule := crd.DeepCopy()
	setS3Rules(t, crd, func(rule string) bool { return !strings.Contains(rule, "allowPlainHTTP") })
	if err := k8sClient.Update(ctx(t), crd); err != nil {
		t.Fatal(err)
	}
	restore := func() error {
		current := crd.DeepCopy()
		if err := k8sClient.Get(ctx(t), key, current); err != nil {
			return err
		}
		withRule.SetResourceVersion(current.GetResourceVersion())
		return k8sClient.Update(ctx(t), withRule)
	}
	t.Cleanup(func() { _ = restore() })

	old := object(t, backup("clusterName: e\ndestination:\n  s3: {bucket: bkt, credentialsSecretName: c, endpoint: 'http://minio:9000'}"))
	eventually(t, "the earlier CRD to admit an http:// endpoint", func() bool { return k8sClient.Create(ctx(t), old) == nil })
	t.Cleanup(func() { _ = k8sClient.Delete(ctx(t), old) })

	if err := restore(); err != nil {
		t.Fatal(err)
	}
	moved := old.DeepCopy()
	if err := unstructured.SetNestedField(moved.Object, "http://elsewhere:9000", "spec", "destination", "s3", "endpoint"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the restored CRD to refuse a new http:// endpoint", func() bool {
		err := k8sClient.Update(ctx(t), moved.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "set allowPlainHTTP: true")
	})

	old.SetFinalizers([]string{"etcd.database.dev/test"})
	if err := k8sClient.Update(ctx(t), old); err != nil {
		t.Fatalf("adding a finalizer to an EtcdBackup admitted before the rule: %v", err)
	}
	old.SetFinalizers(nil)
	if err := k8sClient.Update(ctx(t), old); err != nil {
		t.Fatalf("removing the finalizer: %v", err)
	}
}

// setS3Rules keeps the CEL rules of spec.destination.s3 for which keep is true.
func setS3Rules(t *testing.T, crd *unstructured.Unstructured, keep func(rule string) bool) {
	t.Helper()
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("want one served version, found %d", len(versions))
	}
	version := versions[0].(map[string]any)
	path := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties", "destination", "properties", "s3", "x-kubernetes-validations"}
	rules, found, err := unstructured.NestedSlice(version, path...)
	if !found || err != nil {
		t.Fatalf("no rules on spec.destination.s3 (%v)", err)
	}
	var kept []any
	for _, r := range rules {
		if keep(r.(map[string]any)["rule"].(string)) {
			kept = append(kept, r)
		}
	}
	if len(kept) == len(rules) {
		t.Fatal("the plain-HTTP rule is not on spec.destination.s3")
	}
	if err := unstructured.SetNestedSlice(version, kept, path...); err != nil {
		t.Fatal(err)
	}
	versions[0] = version
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
