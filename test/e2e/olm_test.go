//go:build e2e

package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The install as OperatorHub users do it, through OLM: skipped unless E2E_OLM=1, as it needs OLM
// and the catalog on the cluster (make olm-catalog: OLM, the operator, bundle and catalog images
// of this tree, and the CatalogSource). OLM's types are handled as unstructured objects, so the
// tests need no OLM Go module.
var (
	olmCatalogSource    = envOr("E2E_OLM_CATALOG_SOURCE", "etcd-operator-catalog")
	olmCatalogNamespace = envOr("E2E_OLM_CATALOG_NAMESPACE", "olm")
	olmPackage          = envOr("E2E_OLM_PACKAGE", "etcd-operator")
	olmChannel          = envOr("E2E_OLM_CHANNEL", "stable")
)

// Bundle unpacking (a Job pulling the bundle image) and the operator's rollout come on top of
// the usual readiness.
const olmTimeout = 5 * time.Minute

var (
	catalogSourceGVK = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "CatalogSource"}
	operatorGroupGVK = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1", Kind: "OperatorGroup"}
	subscriptionGVK  = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "Subscription"}
	installPlanGVK   = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "InstallPlan"}
	csvGVK           = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "ClusterServiceVersion"}
	packageGVK       = schema.GroupVersionKind{Group: "packages.operators.coreos.com", Version: "v1", Kind: "PackageManifest"}
)

func TestOLMInstallsFromCatalogWithManualApproval(t *testing.T) {
	if os.Getenv("E2E_OLM") != "1" {
		t.Skip("set E2E_OLM=1 (after make olm-catalog) to install the operator through OLM")
	}
	ctx := context.Background()

	catalog := newObject(catalogSourceGVK, olmCatalogNamespace, olmCatalogSource)
	waitForLong(t, "CatalogSource "+olmCatalogNamespace+"/"+olmCatalogSource+" READY", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(catalog), catalog); err != nil {
			return false, err
		}
		state, _, _ := unstructured.NestedString(catalog.Object, "status", "connectionState", "lastObservedState")
		return state == "READY", nil
	})

	namespace := testNamespace(t, "e2e-olm-")

	// The package server lists the global catalog namespace's packages in every namespace.
	pkg := newObject(packageGVK, namespace, olmPackage)
	waitForLong(t, "PackageManifest "+olmPackage+" served from "+olmCatalogSource, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pkg), pkg); err != nil {
			return false, ignoreNotFound(err)
		}
		source, _, _ := unstructured.NestedString(pkg.Object, "status", "catalogSource")
		return source == olmCatalogSource, nil
	})
	channels, _, _ := unstructured.NestedSlice(pkg.Object, "status", "channels")
	headCSV := ""
	for _, c := range channels {
		if m, ok := c.(map[string]any); ok && m["name"] == olmChannel {
			headCSV, _ = m["currentCSV"].(string)
		}
	}
	if headCSV == "" {
		t.Fatalf("package %s has no channel %q: %v", olmPackage, olmChannel, channels)
	}

	group := newObject(operatorGroupGVK, namespace, "etcd-operator")
	if err := unstructured.SetNestedStringSlice(group.Object, []string{namespace}, "spec", "targetNamespaces"); err != nil {
		t.Fatal(err)
	}
	create(t, group)

	sub := newObject(subscriptionGVK, namespace, olmPackage)
	sub.Object["spec"] = map[string]any{
		"name":                olmPackage,
		"channel":             olmChannel,
		"source":              olmCatalogSource,
		"sourceNamespace":     olmCatalogNamespace,
		"installPlanApproval": "Manual",
	}
	create(t, sub)

	// Manual approval: the plan waits for us, and nothing is installed before.
	var planName string
	waitForLong(t, "Subscription "+olmPackage+" has an InstallPlan", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), sub); err != nil {
			return false, err
		}
		planName, _, _ = unstructured.NestedString(sub.Object, "status", "installPlanRef", "name")
		return planName != "", nil
	})
	plan := newObject(installPlanGVK, namespace, planName)
	waitForLong(t, "InstallPlan "+planName+" RequiresApproval", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(plan), plan); err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(plan.Object, "status", "phase")
		if phase == "Failed" {
			t.Fatalf("InstallPlan %s failed: %v", planName, plan.Object["status"])
		}
		return phase == "RequiresApproval", nil
	})
	names, _, _ := unstructured.NestedStringSlice(plan.Object, "spec", "clusterServiceVersionNames")
	if len(names) != 1 || names[0] != headCSV {
		t.Fatalf("InstallPlan %s installs %v, want the channel head [%s]", planName, names, headCSV)
	}
	csvs := &unstructured.UnstructuredList{}
	csvs.SetGroupVersionKind(csvGVK.GroupVersion().WithKind("ClusterServiceVersionList"))
	if err := k8sClient.List(ctx, csvs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	if len(csvs.Items) != 0 {
		t.Fatalf("%d CSVs exist before the InstallPlan was approved", len(csvs.Items))
	}

	patch := client.MergeFrom(plan.DeepCopy())
	if err := unstructured.SetNestedField(plan.Object, true, "spec", "approved"); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Patch(ctx, plan, patch); err != nil {
		t.Fatal(err)
	}

	csv := newObject(csvGVK, namespace, headCSV)
	waitForLong(t, "CSV "+headCSV+" Succeeded", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(csv), csv); err != nil {
			return false, ignoreNotFound(err)
		}
		phase, _, _ := unstructured.NestedString(csv.Object, "status", "phase")
		if phase == "Failed" {
			reason, _, _ := unstructured.NestedString(csv.Object, "status", "message")
			t.Fatalf("CSV %s failed: %s", headCSV, reason)
		}
		return phase == "Succeeded", nil
	})
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(plan), plan); err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(plan.Object, "status", "phase"); phase != "Complete" {
		t.Errorf("InstallPlan %s is %s, want Complete", planName, phase)
	}
}

func newObject(gvk schema.GroupVersionKind, namespace, name string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(namespace)
	obj.SetName(name)
	return obj
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8sClient.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
}

func waitForLong(t *testing.T, what string, done wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 2*time.Second, olmTimeout, true, done); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
