//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// operator-sdk run bundle, as developers try a bundle without a catalog: skipped unless
// E2E_OLM_RUN_BUNDLE=1 (make test-olm-run-bundle; not in CI).
// operator-sdk reads images over HTTPS only, so the bundles and its index image come from the
// local registry's HTTPS listener, whose CA (the cluster's) operator-sdk trusts through
// SSL_CERT_FILE.
var (
	operatorSDK = os.Getenv("E2E_OPERATOR_SDK")
	// The CA that signed the HTTPS registry's certificate.
	registryCA = os.Getenv("E2E_REGISTRY_CA")
	// <HTTPS registry>/etcd-operator-bundle: the bundles of the catalog's releases, tagged v<version>.
	olmBundleRepository = os.Getenv("E2E_OLM_BUNDLE_REPOSITORY")
	// An empty file-based catalog with sh and opm, for the catalog pod run bundle starts.
	olmIndexImage = os.Getenv("E2E_OLM_INDEX_IMAGE")
	// A test bundle one patch version past the channel's head, running the same operator
	// (make olm-next-bundle): what an upgrade held by a running backup is an upgrade to.
	olmNextBundleImage = os.Getenv("E2E_OLM_NEXT_BUNDLE_IMAGE")
)

// Each operator-sdk command waits for its CSV (or its deletions) this long at most.
const operatorSDKTimeout = 5 * time.Minute

var (
	installPlanListGVK   = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "InstallPlanList"}
	operatorGroupListGVK = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1", Kind: "OperatorGroupList"}
)

func TestOperatorSDKRunBundleUpgradeAndCleanup(t *testing.T) {
	if os.Getenv("E2E_OLM_RUN_BUNDLE") != "1" {
		t.Skip("not in CI: make test-olm-run-bundle runs bundles with operator-sdk run bundle")
	}
	if operatorSDK == "" || registryCA == "" || olmBundleRepository == "" || olmIndexImage == "" || olmNextBundleImage == "" {
		t.Fatal("E2E_OPERATOR_SDK, E2E_REGISTRY_CA, E2E_OLM_BUNDLE_REPOSITORY, E2E_OLM_INDEX_IMAGE and E2E_OLM_NEXT_BUNDLE_IMAGE must be set (make test-e2e sets them)")
	}
	if _, err := os.Stat(operatorSDK); err != nil {
		t.Fatalf("operator-sdk: %v (make test-all builds it for the scorecard; alone: make %s)", err, operatorSDK)
	}

	// run bundle's catalog pod sets no runAsNonRoot, so it is admitted under baseline, not
	// restricted; the operator's own pod would pass either.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "e2e-run-bundle-",
		Labels:       map[string]string{"pod-security.kubernetes.io/enforce": "baseline"},
	}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	namespace := ns.Name
	t.Cleanup(func() {
		if !t.Failed() {
			_ = k8sClient.Delete(context.Background(), ns)
		}
	})
	oldest, head := channelEnds(t, namespace)

	// cleanup deletes the CRDs the bundle owns, which make deploy's operator also serves: it is
	// stopped meanwhile, and gets them back from this tree before it restarts (cleanups run last
	// registered first).
	stopDeployedOperator(t)
	t.Cleanup(func() { restoreTreeCRDs(t) })
	cleanedUp := false
	t.Cleanup(func() {
		if !cleanedUp {
			runOperatorSDK(t, "cleanup", olmPackage, "--namespace", namespace)
		}
	})

	runOperatorSDK(t, "run", "bundle", bundleImage(oldest), "--namespace", namespace,
		"--index-image", olmIndexImage, "--decompression-image", busyboxImage,
		"--install-mode", "OwnNamespace", "--security-context-config", "restricted")
	oldCSV := waitForCSVSucceeded(t, namespace, oldest)
	oldImage := waitForOperatorRunning(t, oldCSV)
	t.Logf("run bundle: %s Succeeded, running %s", oldest, oldImage)

	runOperatorSDK(t, "run", "bundle-upgrade", bundleImage(head), "--namespace", namespace)
	newCSV := waitForCSVSucceeded(t, namespace, head)
	waitForLong(t, "CSV "+oldest+" deleted after bundle-upgrade", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(oldCSV), newObject(csvGVK, namespace, oldest))
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	if newImage := waitForOperatorRunning(t, newCSV); newImage == oldImage {
		t.Errorf("%s and %s run the same operator image %s", oldest, head, newImage)
	} else {
		t.Logf("run bundle-upgrade: %s Succeeded, running %s; %s is gone", head, newImage, oldest)
	}

	expectUpgradeHeldWhileBackupRuns(t, newCSV)

	runOperatorSDK(t, "cleanup", olmPackage, "--namespace", namespace)
	cleanedUp = true
	expectNothingLeftOfRunBundle(t, namespace)
}

// bundleImage is the bundle image of a CSV of the catalog, named etcd-operator.v<version>.
func bundleImage(csv string) string {
	return olmBundleRepository + ":" + strings.TrimPrefix(csv, olmPackage+".")
}

// expectUpgradeHeldWhileBackupRuns: while a backup runs, OLM does not start an upgrade of the
// operator, and starts it once the backup has finished. The backup's claim names a StorageClass
// that does not exist yet, so its Job is under way, its pod Pending, until the test makes that
// class; then the backup completes. The upgrade is run bundle-upgrade to a bundle one patch
// version past the running one.
func expectUpgradeHeldWhileBackupRuns(t *testing.T, running *unstructured.Unstructured) {
	ctx := context.Background()
	namespace, current := running.GetNamespace(), running.GetName()
	// Bundle images are tagged v<version>, as their CSVs are named <package>.v<version>.
	next := olmPackage + "." + olmNextBundleImage[strings.LastIndex(olmNextBundleImage, ":")+1:]

	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: namespace},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 1, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
		},
	}
	create(t, cluster)
	waitAvailable(t, cluster, 1)
	class := "e2e-held-" + namespace
	claim := createClaim(t, namespace, "held-backups", class)
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: namespace},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: cluster.Name, Destination: etcdv1alpha1.StorageLocation{
			PVC: &etcdv1alpha1.PVCLocation{ClaimName: claim.Name},
		}},
	}
	create(t, backup)
	waitUpgradeable(t, namespace, current, "False", "BackupOrRestoreRunning")

	// run bundle-upgrade waits for the new CSV to succeed, which it may only once the backup
	// has ended: it runs meanwhile, and its outcome is read at the end. Should the test end
	// first, it is stopped before operator-sdk cleanup runs (cleanups run last registered first).
	type outcome struct {
		out []byte
		err error
	}
	upgraded := make(chan outcome, 1)
	upgradeCtx, stopUpgrade := context.WithCancel(ctx)
	t.Cleanup(stopUpgrade)
	go func() {
		out, err := operatorSDKOutput(upgradeCtx, "run", "bundle-upgrade", olmNextBundleImage, "--namespace", namespace)
		upgraded <- outcome{out, err}
	}()
	held := newObject(csvGVK, namespace, next)
	waitForLong(t, "CSV "+next+" held Pending by OLM (OperatorConditionNotUpgradeable)", func(ctx context.Context) (bool, error) {
		if len(upgraded) > 0 {
			ended := <-upgraded
			return false, fmt.Errorf("run bundle-upgrade ended while the backup runs (error: %w):\n%s", ended.err, ended.out)
		}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(held), held); err != nil {
			return false, ignoreNotFound(err)
		}
		phase, _, _ := unstructured.NestedString(held.Object, "status", "phase")
		reason, _, _ := unstructured.NestedString(held.Object, "status", "reason")
		return phase == "Pending" && reason == "OperatorConditionNotUpgradeable", nil
	})
	if owner := operatorDeploymentOwner(t, running); owner != current {
		t.Fatalf("while the backup runs, the operator Deployment belongs to %s, want %s", owner, current)
	}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(backup), backup); err != nil {
		t.Fatal(err)
	}
	if backup.Status.Phase != etcdv1alpha1.BackupRunning {
		t.Fatalf("backup %s is %s while its claim waits for its StorageClass, want Running", backup.Name, backup.Status.Phase)
	}
	t.Logf("%s held Pending while backup %s runs; %s still runs the operator", next, backup.Name, current)

	createStorageClassLikeDefault(t, class)
	waitBackupPhase(t, backup, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
	if backup.Status.Phase != etcdv1alpha1.BackupCompleted {
		t.Fatalf("backup %s: %+v, want Completed", backup.Name, backup.Status)
	}
	select {
	case ended := <-upgraded:
		if ended.err != nil {
			t.Fatalf("run bundle-upgrade to %s after the backup completed: %v\n%s", next, ended.err, ended.out)
		}
		// Its log times each phase of the new CSV: how long OLM held it, and when it went on.
		t.Logf("operator-sdk run bundle-upgrade %s:\n%s", olmNextBundleImage, ended.out)
	case <-time.After(operatorSDKTimeout + 2*time.Minute):
		t.Fatalf("run bundle-upgrade to %s has not ended %s after the backup completed", next, operatorSDKTimeout+2*time.Minute)
	}
	nextCSV := waitForCSVSucceeded(t, namespace, next)
	waitForLong(t, "CSV "+current+" deleted after the held upgrade", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(running), newObject(csvGVK, namespace, current))
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	if owner := operatorDeploymentOwner(t, nextCSV); owner != next {
		t.Errorf("after the upgrade, the operator Deployment belongs to %s, want %s", owner, next)
	}
	// OLM's record of the new CSV's phases says when it went past Pending: not before the backup
	// had ended (both times are in whole seconds, from the one node's clock).
	if backup.Status.LastBackup == nil {
		t.Fatalf("backup %s is Completed without a lastBackup", backup.Name)
	}
	ended := backup.Status.LastBackup.CompletionTime.Time
	if released := leftPending(nextCSV); released.IsZero() {
		t.Errorf("CSV %s records no phase after Pending: %v", next, nextCSV.Object["status"])
	} else if released.Before(ended) {
		t.Errorf("CSV %s went past Pending at %s, before backup %s ended at %s", next, released, backup.Name, ended)
	} else {
		t.Logf("backup %s ended at %s; CSV %s went past Pending at %s", backup.Name, ended.Format(time.RFC3339), next, released.Format(time.RFC3339))
	}

	// Gone before operator-sdk cleanup removes the operator that would otherwise act on them.
	for _, obj := range []client.Object{backup, cluster} {
		if err := k8sClient.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

// leftPending is when the CSV's recorded phases first went on from Pending towards installing
// (InstallReady, Installing or Succeeded), or zero if they never did.
func leftPending(csv *unstructured.Unstructured) time.Time {
	conditions, _, _ := unstructured.NestedSlice(csv.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		switch m["phase"] {
		case "InstallReady", "Installing", "Succeeded":
			at, _ := m["lastTransitionTime"].(string)
			t, err := time.Parse(time.RFC3339, at)
			if err != nil {
				return time.Time{}
			}
			return t
		}
	}
	return time.Time{}
}

// operatorDeploymentOwner is the CSV that owns the Deployment the CSV installs, by OLM's label.
func operatorDeploymentOwner(t *testing.T, csv *unstructured.Unstructured) string {
	t.Helper()
	name, _ := csvDeployment(t, csv)
	deployment := &appsv1.Deployment{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: csv.GetNamespace(), Name: name}, deployment); err != nil {
		t.Fatal(err)
	}
	return deployment.Labels["olm.owner"]
}

// createStorageClassLikeDefault makes a StorageClass named name with the cluster's default
// class's provisioner and settings, deleted when the test ends.
func createStorageClassLikeDefault(t *testing.T, name string) {
	t.Helper()
	classes := &storagev1.StorageClassList{}
	if err := k8sClient.List(context.Background(), classes); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(classes.Items, func(c storagev1.StorageClass) bool {
		return c.Annotations["storageclass.kubernetes.io/is-default-class"] == "true"
	})
	if i < 0 {
		t.Fatal("the cluster has no default StorageClass")
	}
	base := classes.Items[i]
	class := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: name},
		Provisioner: base.Provisioner, Parameters: base.Parameters, ReclaimPolicy: base.ReclaimPolicy,
		VolumeBindingMode: base.VolumeBindingMode, AllowVolumeExpansion: base.AllowVolumeExpansion,
	}
	create(t, class)
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), class) })
}

// runOperatorSDK runs operator-sdk and fails the test with its output if it fails.
func runOperatorSDK(t *testing.T, args ...string) {
	t.Helper()
	out, err := operatorSDKOutput(context.Background(), args...)
	if err != nil {
		t.Fatalf("operator-sdk %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("operator-sdk %s:\n%s", strings.Join(args, " "), out)
}

// operatorSDKOutput runs operator-sdk in a scratch directory (it leaves caches in its working
// directory), trusting the HTTPS registry, and returns its output; cancelling ctx kills it.
func operatorSDKOutput(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, operatorSDKTimeout+time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "operator-sdk-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cmd := exec.CommandContext(ctx, operatorSDK, append(args, "--timeout", operatorSDKTimeout.String())...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+registryCA)
	return cmd.CombinedOutput()
}

// expectNothingLeftOfRunBundle waits until the namespace holds nothing of what run bundle and
// OLM made (objects that go by garbage collection may take a moment) and the bundle's CRDs and
// cluster-wide RBAC are gone.
func expectNothingLeftOfRunBundle(t *testing.T, namespace string) {
	t.Helper()
	namespaced := []schema.GroupVersionKind{
		csvGVK.GroupVersion().WithKind("ClusterServiceVersionList"),
		subscriptionGVK.GroupVersion().WithKind("SubscriptionList"),
		catalogSourceGVK.GroupVersion().WithKind("CatalogSourceList"),
		installPlanListGVK,
		operatorGroupListGVK,
		{Group: "apps", Version: "v1", Kind: "DeploymentList"},
		{Version: "v1", Kind: "PodList"},
		{Version: "v1", Kind: "ServiceList"},
		{Version: "v1", Kind: "ConfigMapList"},
		{Version: "v1", Kind: "SecretList"},
		{Version: "v1", Kind: "ServiceAccountList"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleList"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBindingList"},
		{Group: "batch", Version: "v1", Kind: "JobList"},
	}
	// What every namespace has from the start.
	expected := map[string]bool{"ConfigMap/kube-root-ca.crt": true, "ServiceAccount/default": true}
	var left []string
	t.Cleanup(func() {
		if t.Failed() && len(left) > 0 {
			t.Logf("left after operator-sdk cleanup: %v", left)
		}
	})
	waitForLong(t, "nothing of run bundle left in "+namespace, func(ctx context.Context) (bool, error) {
		left = nil
		for _, gvk := range namespaced {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk)
			if err := k8sClient.List(ctx, list, client.InNamespace(namespace)); err != nil {
				return false, err
			}
			for _, item := range list.Items {
				if id := item.GetKind() + "/" + item.GetName(); !expected[id] {
					left = append(left, id)
				}
			}
		}
		crds := &unstructured.UnstructuredList{}
		crds.SetGroupVersionKind(crdGVK.GroupVersion().WithKind("CustomResourceDefinitionList"))
		if err := k8sClient.List(ctx, crds); err != nil {
			return false, err
		}
		for _, crd := range crds.Items {
			if strings.HasSuffix(crd.GetName(), "."+etcdv1alpha1.GroupVersion.Group) {
				left = append(left, "CustomResourceDefinition/"+crd.GetName())
			}
		}
		for _, kind := range []string{"ClusterRoleList", "ClusterRoleBindingList"} {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: kind})
			if err := k8sClient.List(ctx, list, client.MatchingLabels{"olm.owner.namespace": namespace}); err != nil {
				return false, err
			}
			for _, item := range list.Items {
				left = append(left, strings.TrimSuffix(kind, "List")+"/"+item.GetName())
			}
		}
		return len(left) == 0, nil
	})
}

// restoreTreeCRDs applies this tree's CRDs, as make deploy does, and waits until they are
// Established.
func restoreTreeCRDs(t *testing.T) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "config/crd/bases/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases (err %v)", err)
	}
	for _, file := range files {
		for _, crd := range readObjects(t, file) {
			apply := client.ApplyConfigurationFromUnstructured(crd)
			if err := k8sClient.Apply(context.Background(), apply, client.FieldOwner("e2e-run-bundle"), client.ForceOwnership); err != nil {
				t.Fatalf("apply CRD %s: %v", crd.GetName(), err)
			}
			live := newObject(crdGVK, "", crd.GetName())
			waitForLong(t, "CRD "+crd.GetName()+" Established again", func(ctx context.Context) (bool, error) {
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(live), live); err != nil {
					return false, ignoreNotFound(err)
				}
				return conditionTrue(live, "Established"), nil
			})
		}
	}
}
