//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// The console's Create forms start from the CSV's alm-examples. A user who creates them all, as
// they are, in a namespace with nothing else, gets a cluster, a snapshot of it and a restored
// copy: no Secret, claim or bucket to make first, and no example that waits for ever.
func TestALMExamplesWorkWhenCreatedTogether(t *testing.T) {
	inParallel(t, 45*time.Second) // with the backup and restore tests, after the cluster lifecycle tests
	ns := testNamespace(t, "e2e-alm-examples-")
	started := time.Now()

	examples := bundleALMExamples(t)
	// All at once, in the array's order, as a user clicking through the forms would.
	for _, example := range examples {
		example.SetNamespace(ns)
		if err := k8sClient.Create(context.Background(), example); err != nil {
			t.Fatalf("create the example %s %s: %v", example.GetKind(), example.GetName(), err)
		}
	}

	// Each waits for what it depends on: the cluster first, then its backup, then the restore.
	order := []string{"EtcdCluster", "EtcdBackup", "EtcdRestore"}
	slices.SortStableFunc(examples, func(a, b *unstructured.Unstructured) int {
		return slices.Index(order, a.GetKind()) - slices.Index(order, b.GetKind())
	})
	for _, example := range examples {
		switch example.GetKind() {
		case "EtcdCluster":
			c := &etcdv1alpha1.EtcdCluster{}
			fromExample(t, example, c)
			waitAvailable(t, c, int(c.Spec.Size))
		case "EtcdBackup":
			b := &etcdv1alpha1.EtcdBackup{}
			fromExample(t, example, b)
			waitBackupPhase(t, b, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
			if b.Status.LastBackup == nil {
				t.Fatalf("the example EtcdBackup %s holds no snapshot: %+v", b.Name, b.Status)
			}
			t.Logf("EtcdBackup %s: %s after %v", b.Name, b.Status.LastBackup.URI, time.Since(started).Round(time.Second))
		case "EtcdRestore":
			rs := &etcdv1alpha1.EtcdRestore{}
			fromExample(t, example, rs)
			waitRestorePhase(t, rs, restoreTimeout)
			if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
				t.Fatalf("the example EtcdRestore %s: %s, %+v", rs.Name, rs.Status.Phase, rs.Status)
			}
			restored := &etcdv1alpha1.EtcdCluster{}
			if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: rs.Spec.Target.ClusterName}, restored); err != nil {
				t.Fatal(err)
			}
			waitAvailable(t, restored, int(rs.Spec.Target.Cluster.Size))
		default:
			t.Fatalf("the alm-examples hold a %s: say here what it must reach", example.GetKind())
		}
		t.Logf("%s %s done after %v", example.GetKind(), example.GetName(), time.Since(started).Round(time.Second))
	}
}

// bundleALMExamples are the objects of the bundle CSV's alm-examples, in the array's order.
func bundleALMExamples(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "bundle/manifests/etcd-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var csv struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(raw, &csv); err != nil {
		t.Fatalf("the bundle's CSV: %v", err)
	}
	var objects []map[string]any
	if err := json.Unmarshal([]byte(csv.Metadata.Annotations["alm-examples"]), &objects); err != nil {
		t.Fatalf("alm-examples: %v", err)
	}
	if len(objects) == 0 {
		t.Fatal("the bundle's CSV has no alm-examples")
	}
	examples := make([]*unstructured.Unstructured, 0, len(objects))
	var kinds []string
	for _, o := range objects {
		examples = append(examples, &unstructured.Unstructured{Object: o})
		kinds = append(kinds, examples[len(examples)-1].GetKind())
	}
	t.Logf("alm-examples: %s", strings.Join(kinds, ", "))
	return examples
}

// fromExample converts an example, as created, into its typed object.
func fromExample(t *testing.T, example *unstructured.Unstructured, into runtime.Object) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(example.Object, into); err != nil {
		t.Fatalf("the example %s %s: %v", example.GetKind(), example.GetName(), err)
	}
}
