//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// The install and upgrade as OperatorHub users do them, through OLM: skipped unless E2E_OLM=1, as
// they need OLM and the catalog on the cluster (make olm-catalog: OLM, the operator, bundle and
// catalog images of this tree and of the earlier releases, and the CatalogSource). OLM's types are
// handled as unstructured objects, so the tests need no OLM Go module.
var (
	olmCatalogSource    = envOr("E2E_OLM_CATALOG_SOURCE", "etcd-operator-catalog")
	olmCatalogNamespace = envOr("E2E_OLM_CATALOG_NAMESPACE", "olm")
	olmPackage          = envOr("E2E_OLM_PACKAGE", "etcd-operator")
	olmChannel          = envOr("E2E_OLM_CHANNEL", "stable")
	// The CSV installed first and upgraded from; empty means the channel's oldest version.
	olmStartingCSV = os.Getenv("E2E_OLM_STARTING_CSV")
	// A release's images.txt (make test-release): the catalog is that release's, and every image
	// the operator and its members run must be one of it, named by its digest.
	olmReleaseImages = os.Getenv("E2E_OLM_RELEASE_IMAGES")
)

// Bundle unpacking (a Job pulling the bundle image) and the operator's rollout come on top of
// the usual readiness.
const olmTimeout = 5 * time.Minute

var (
	catalogSourceGVK     = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "CatalogSource"}
	operatorGroupGVK     = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1", Kind: "OperatorGroup"}
	subscriptionGVK      = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "Subscription"}
	installPlanGVK       = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "InstallPlan"}
	operatorConditionGVK = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v2", Kind: "OperatorCondition"}
	csvGVK               = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "ClusterServiceVersion"}
	packageGVK           = schema.GroupVersionKind{Group: "packages.operators.coreos.com", Version: "v1", Kind: "PackageManifest"}
	crdGVK               = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
)

// A Subscription with Manual approval, starting at the channel's oldest release: OLM installs
// nothing before the plan is approved, then that release; it then proposes the channel's head,
// and once that plan is approved replaces the old CSV by the new one, rolling the operator's
// Deployment to the new image. The CRDs, upgraded with it, stay established.
//
// Meanwhile the old release runs a 3-member EtcdCluster under a writer and concurrent clients.
// Upgrading the operator must not touch it: it keeps serving, on the same member pods, with no
// container restarted, no acknowledged write lost and a linearizable history of what the clients
// saw, and the new release reconciles it (a scale-out to 4). The cluster is in the operator's own
// namespace, the one its OperatorGroup targets (OwnNamespace); make deploy's operator, which
// watches every namespace, is stopped for the test so that only one operator acts on it.
func TestOLMInstallsAndUpgradesWithManualApproval(t *testing.T) {
	if os.Getenv("E2E_OLM") != "1" {
		t.Skip("set E2E_OLM=1 (after make olm-catalog) to install and upgrade the operator through OLM")
	}

	catalog := newObject(catalogSourceGVK, olmCatalogNamespace, olmCatalogSource)
	waitForLong(t, "CatalogSource "+olmCatalogNamespace+"/"+olmCatalogSource+" READY", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(catalog), catalog); err != nil {
			return false, err
		}
		state, _, _ := unstructured.NestedString(catalog.Object, "status", "connectionState", "lastObservedState")
		return state == "READY", nil
	})

	namespace := testNamespace(t, "e2e-olm-")
	oldest, head := channelEnds(t, namespace)
	startingCSV := cmp.Or(olmStartingCSV, oldest)
	if startingCSV == head {
		t.Fatalf("the starting CSV %s is the head of channel %s: there is nothing to upgrade from", head, olmChannel)
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
		"startingCSV":         startingCSV,
	}
	create(t, sub)

	// Install: the plan waits for approval, and nothing is installed before.
	install := waitForInstallPlan(t, sub, "", startingCSV)
	csvs := &unstructured.UnstructuredList{}
	csvs.SetGroupVersionKind(csvGVK.GroupVersion().WithKind("ClusterServiceVersionList"))
	if err := k8sClient.List(context.Background(), csvs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	if len(csvs.Items) != 0 {
		t.Fatalf("%d CSVs exist before the InstallPlan was approved", len(csvs.Items))
	}
	approve(t, install)
	oldCSV := waitForCSVSucceeded(t, namespace, startingCSV)
	waitForInstallPlanComplete(t, install)
	oldImage := waitForOperatorRunning(t, oldCSV)
	t.Logf("%s Succeeded, running %s", startingCSV, oldImage)

	stopDeployedOperator(t)
	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "upgraded", Namespace: namespace},
		// Only fields the oldest release knows: its CRD is the one in place until the upgrade.
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size:    3,
			Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
		},
	}
	create(t, cluster)
	// Whether the namespace is deleted (success) or kept for inspection (failure), make deploy's
	// operator, back once the test ends, must not act on this cluster alongside OLM's.
	t.Cleanup(func() { patchSpec(t, cluster, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Paused = true }) })
	waitAvailable(t, cluster, 3)
	writes := startWriter(t, clientServiceEndpoint(t, cluster), "/e2e/olm")
	clients := startWorkload(t, clientServiceEndpoint(t, cluster))
	waitFor(t, "the writer's and the clients' first operations", func(context.Context) (bool, error) {
		return writes.ackedCount() > 10 && clients.Completed() > 10, nil
	})
	specBefore := cluster.Spec.DeepCopy()
	membersBefore := incarnations(memberPods(t, cluster))
	ackedBefore := writes.ackedCount()
	t.Logf("EtcdCluster %s/%s Available with 3 members under %s, %d writes acknowledged", namespace, cluster.Name, startingCSV, ackedBefore)

	// Upgrade: OLM proposes the channel's head, and again waits for approval.
	upgrade := waitForInstallPlan(t, sub, install.GetName(), head)
	approve(t, upgrade)
	newCSV := waitForCSVSucceeded(t, namespace, head)
	waitForLong(t, "CSV "+startingCSV+" deleted after the upgrade", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(oldCSV), newObject(csvGVK, namespace, startingCSV))
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	waitForInstallPlanComplete(t, upgrade)
	if replaces, _, _ := unstructured.NestedString(newCSV.Object, "spec", "replaces"); replaces != startingCSV {
		t.Errorf("CSV %s replaces %q, want %s", head, replaces, startingCSV)
	}
	newImage := waitForOperatorRunning(t, newCSV)
	if newImage == oldImage {
		t.Errorf("%s and %s run the same operator image %s", startingCSV, head, newImage)
	}
	t.Logf("upgraded to %s, running %s; %s is gone", head, newImage, startingCSV)
	waitForLong(t, "Subscription "+olmPackage+" at the latest version "+head, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), sub); err != nil {
			return false, err
		}
		installed, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
		state, _, _ := unstructured.NestedString(sub.Object, "status", "state")
		return installed == head && state == "AtLatestKnown", nil
	})

	owned, _, _ := unstructured.NestedSlice(newCSV.Object, "spec", "customresourcedefinitions", "owned")
	for _, o := range owned {
		name, _ := o.(map[string]any)["name"].(string)
		crd := newObject(crdGVK, "", name)
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(crd), crd); err != nil {
			t.Fatalf("CRD %s after the upgrade: %v", name, err)
		}
		if !conditionTrue(crd, "Established") {
			t.Errorf("CRD %s is not Established after the upgrade", name)
		}
	}

	// The cluster served through the upgrade, untouched, and the new release reconciles it.
	waitAvailable(t, cluster, 3)
	if acked := writes.ackedCount(); acked <= ackedBefore {
		t.Errorf("no write acknowledged during the upgrade (%d before, %d after)", ackedBefore, acked)
	}
	if !containsAll(toMap(t, &cluster.Spec), toMap(t, specBefore)) {
		t.Errorf("EtcdCluster %s lost spec fields in the upgrade:\nbefore: %+v\n after: %+v", cluster.Name, *specBefore, cluster.Spec)
	}
	scaleTo(t, cluster, 4)
	membersAfter := incarnations(memberPods(t, cluster))
	for name, before := range membersBefore {
		if after, ok := membersAfter[name]; !ok || after != before {
			t.Errorf("member pod %s was replaced or restarted: before the upgrade %+v, now %+v (present: %t)", name, before, after, ok)
		}
	}
	writes.verify(t)
	checkLinearizable(t, clients)
	if olmReleaseImages != "" {
		// The head's operator pod and the member it made, in the namespace the release was
		// installed to. The members the starting release made run what it chose: v0.1.0 runs
		// etcd by tag even from a pinned RELATED_IMAGE_ETCD (docs/olm.md).
		pods := &corev1.PodList{}
		if err := k8sClient.List(context.Background(), pods, client.InNamespace(namespace)); err != nil {
			t.Fatal(err)
		}
		var madeByHead []corev1.Pod
		for _, pod := range pods.Items {
			if _, before := membersBefore[pod.Name]; before {
				t.Logf("pod %s, made by %s, runs %s", pod.Name, startingCSV, pod.Spec.Containers[0].Image)
				continue
			}
			madeByHead = append(madeByHead, pod)
		}
		expectReleaseImagesRun(t, madeByHead)
	}
	// It runs its cluster (the scale-out above), and may do nothing outside its namespace.
	expectRightsOnlyInItsNamespace(t, newCSV)

	expectUpgradeableWhileBackupRuns(t, cluster, head)
}

// namespacedRights are what the operator does to namespaced objects: each must be allowed in
// the namespace an OwnNamespace install serves, and nowhere else.
var namespacedRights = []authorizationv1.ResourceAttributes{
	{Verb: "get", Resource: "secrets"},
	{Verb: "list", Resource: "secrets"},
	{Verb: "create", Resource: "pods"},
	{Verb: "list", Resource: "pods"},
	{Verb: "list", Resource: "events"},
	{Verb: "create", Resource: "pods", Subresource: "eviction"},
	{Verb: "delete", Resource: "persistentvolumeclaims"},
	{Verb: "create", Resource: "services"},
	{Verb: "create", Group: "batch", Resource: "jobs"},
	{Verb: "create", Group: "policy", Resource: "poddisruptionbudgets"},
	{Verb: "list", Group: etcdv1alpha1.GroupVersion.Group, Resource: "etcdclusters"},
	{Verb: "update", Group: etcdv1alpha1.GroupVersion.Group, Resource: "etcdclusters/status"},
}

// clusterScopedRights are all an OwnNamespace install may hold on the whole cluster: its
// metrics endpoint's token and access reviews.
var clusterScopedRights = map[string]bool{"authentication.k8s.io/tokenreviews": true, "authorization.k8s.io/subjectaccessreviews": true}

// expectRightsOnlyInItsNamespace: installed OwnNamespace, the operator's service account may act
// on namespaced objects in its own namespace and in no other, as the API server answers
// `kubectl auth can-i --as` (a SubjectAccessReview); and no ClusterRoleBinding gives it a
// ClusterRole with rights on namespaced resources. Before, OLM made the CSV's clusterPermissions
// (every rule of the manager) a ClusterRole bound cluster-wide, whatever the install mode.
func expectRightsOnlyInItsNamespace(t *testing.T, csv *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	namespace := csv.GetNamespace()
	_, spec := csvDeployment(t, csv)
	serviceAccount, _, _ := unstructured.NestedString(spec, "spec", "template", "spec", "serviceAccountName")
	if serviceAccount == "" {
		t.Fatalf("CSV %s names no service account for its Deployment", csv.GetName())
	}
	allowed := func(attrs authorizationv1.ResourceAttributes, in string) bool {
		t.Helper()
		attrs.Namespace = in
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + namespace + ":" + serviceAccount,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &attrs,
		}}
		if err := k8sClient.Create(ctx, review); err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
	const elsewhere = metav1.NamespaceDefault
	for _, attrs := range namespacedRights {
		right := attrs.Verb + " " + strings.TrimPrefix(attrs.Group+"/"+attrs.Resource, "/")
		if !allowed(attrs, namespace) {
			t.Errorf("the operator may not %s in its own namespace %s", right, namespace)
		}
		if allowed(attrs, elsewhere) {
			t.Errorf("the operator installed for namespace %s may %s in namespace %s", namespace, right, elsewhere)
		}
	}

	bindings := &rbacv1.ClusterRoleBindingList{}
	if err := k8sClient.List(ctx, bindings); err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings.Items {
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == serviceAccount && s.Namespace == namespace
		}) {
			continue
		}
		role := &rbacv1.ClusterRole{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: b.RoleRef.Name}, role); err != nil {
			t.Fatalf("ClusterRole %s of ClusterRoleBinding %s: %v", b.RoleRef.Name, b.Name, err)
		}
		for _, rule := range role.Rules {
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					if !clusterScopedRights[group+"/"+resource] {
						t.Errorf("ClusterRoleBinding %s gives the operator %v on %s/%s in every namespace (ClusterRole %s)",
							b.Name, rule.Verbs, group, resource, role.Name)
					}
				}
			}
		}
	}
	if !t.Failed() {
		t.Logf("service account %s: %d namespaced rights in %s, none in %s, cluster-wide only %v",
			serviceAccount, len(namespacedRights), namespace, elsewhere, slices.Sorted(maps.Keys(clusterScopedRights)))
	}
}

// expectUpgradeableWhileBackupRuns: the operator OLM runs tells OLM not to upgrade it while a
// backup runs, through its OperatorCondition, and lifts that when the backup has ended. The
// backup's store does not exist, so its Job retries for half a minute and then fails.
func expectUpgradeableWhileBackupRuns(t *testing.T, cluster *etcdv1alpha1.EtcdCluster, csv string) {
	ctx := context.Background()
	waitUpgradeable(t, cluster.Namespace, csv, "True", "NoBackupOrRestoreRunning")

	credentials := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "unreachable-s3", Namespace: cluster.Namespace},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
	}
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "during-upgrade-window", Namespace: cluster.Namespace},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: cluster.Name, Destination: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
			Bucket: "nowhere", Endpoint: "http://no-such-store." + cluster.Namespace + ".svc:9000", ForcePathStyle: true, AllowPlainHTTP: true,
			CredentialsSecretName: credentials.Name,
		}}},
	}
	for _, obj := range []client.Object{credentials, backup} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	waitUpgradeable(t, cluster.Namespace, csv, "False", "BackupOrRestoreRunning")
	waitUpgradeable(t, cluster.Namespace, csv, "True", "NoBackupOrRestoreRunning")
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(backup), backup); err != nil {
		t.Fatal(err)
	}
	if backup.Status.Phase != etcdv1alpha1.BackupFailed {
		t.Errorf("backup to a store that does not exist: phase %s, want Failed", backup.Status.Phase)
	}
}

// waitUpgradeable waits until the operator of the CSV has set the Upgradeable condition of its
// OperatorCondition to status, for reason.
func waitUpgradeable(t *testing.T, namespace, csv, status, reason string) {
	t.Helper()
	condition := newObject(operatorConditionGVK, namespace, csv)
	waitForLong(t, "OperatorCondition "+csv+" Upgradeable="+status+" ("+reason+")", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(condition), condition); err != nil {
			return false, ignoreNotFound(err)
		}
		conditions, _, _ := unstructured.NestedSlice(condition.Object, "spec", "conditions")
		for _, c := range conditions {
			if m, ok := c.(map[string]any); ok && m["type"] == "Upgradeable" {
				return m["status"] == status && m["reason"] == reason, nil
			}
		}
		return false, nil
	})
}

// A pod's incarnation: recreating the pod changes its UID, restarting a container its count.
type incarnation struct {
	uid      types.UID
	restarts int32
}

func incarnations(pods []corev1.Pod) map[string]incarnation {
	m := make(map[string]incarnation, len(pods))
	for _, pod := range pods {
		inc := incarnation{uid: pod.UID}
		for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
			inc.restarts += s.RestartCount
		}
		m[pod.Name] = inc
	}
	return m
}

// stopDeployedOperator scales make deploy's operator, which watches every namespace, to zero
// until the test ends and waits for its pods to be gone, so that it does not reconcile the
// EtcdCluster the OLM-installed operator runs: two operators acting on one cluster would fight
// over its membership. Only a sequential test may call it: the parallel tests, which need that
// operator, start once every sequential test has ended.
func stopDeployedOperator(t *testing.T) {
	t.Helper()
	deployment := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}
	if err := k8sClient.Get(context.Background(), key, deployment); apierrors.IsNotFound(err) {
		t.Logf("no operator Deployment %s to stop", key)
		return
	} else if err != nil {
		t.Fatal(err)
	}
	replicas := ptr.Deref(deployment.Spec.Replicas, 1)
	t.Cleanup(func() {
		scaleDeployment(t, deployment, replicas)
		waitForLong(t, "operator Deployment "+key.String()+" back with "+strconv.Itoa(int(replicas))+" replicas", func(ctx context.Context) (bool, error) {
			err := k8sClient.Get(ctx, key, deployment)
			return err == nil && rolledOut(deployment), err
		})
	})
	scaleDeployment(t, deployment, 0)
	selector, err := metav1.LabelSelectorAsSelector(deployment.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	waitForLong(t, "operator pods of "+key.String()+" gone", func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		err := k8sClient.List(ctx, pods, client.InNamespace(key.Namespace), client.MatchingLabelsSelector{Selector: selector})
		return err == nil && len(pods.Items) == 0, err
	})
	t.Logf("stopped the operator Deployment %s until the test ends", key)
}

func scaleDeployment(t *testing.T, deployment *appsv1.Deployment, replicas int32) {
	t.Helper()
	patch := client.MergeFrom(deployment.DeepCopy())
	deployment.Spec.Replicas = &replicas
	if err := k8sClient.Patch(context.Background(), deployment, patch); err != nil {
		t.Fatalf("scale Deployment %s/%s to %d: %v", deployment.Namespace, deployment.Name, replicas, err)
	}
}

// channelEnds is the oldest version and the head of olmChannel, as the package server lists them
// (it lists the global catalog namespace's packages in every namespace).
func channelEnds(t *testing.T, namespace string) (oldest, head string) {
	t.Helper()
	pkg := newObject(packageGVK, namespace, olmPackage)
	waitForLong(t, "PackageManifest "+olmPackage+" served from "+olmCatalogSource, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pkg), pkg); err != nil {
			return false, ignoreNotFound(err)
		}
		source, _, _ := unstructured.NestedString(pkg.Object, "status", "catalogSource")
		return source == olmCatalogSource, nil
	})
	channels, _, _ := unstructured.NestedSlice(pkg.Object, "status", "channels")
	for _, c := range channels {
		channel, _ := c.(map[string]any)
		if channel["name"] != olmChannel {
			continue
		}
		head, _ = channel["currentCSV"].(string)
		entries, _, _ := unstructured.NestedSlice(channel, "entries")
		var oldestVersion semver.Version
		for _, e := range entries {
			entry, _ := e.(map[string]any)
			version, err := semver.Parse(entry["version"].(string))
			if err != nil {
				t.Fatalf("channel %s entry %v: %v", olmChannel, entry, err)
			}
			if oldest == "" || version.LT(oldestVersion) {
				oldest, oldestVersion = entry["name"].(string), version
			}
		}
	}
	if head == "" || oldest == "" {
		t.Fatalf("package %s has no channel %q with entries: %v", olmPackage, olmChannel, channels)
	}
	return oldest, head
}

// waitForInstallPlan waits for the Subscription to reference an InstallPlan other than previous,
// awaiting approval, and checks that it installs exactly csv.
func waitForInstallPlan(t *testing.T, sub *unstructured.Unstructured, previous, csv string) *unstructured.Unstructured {
	t.Helper()
	var name string
	waitForLong(t, "Subscription "+sub.GetName()+" has an InstallPlan for "+csv, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), sub); err != nil {
			return false, err
		}
		name, _, _ = unstructured.NestedString(sub.Object, "status", "installPlanRef", "name")
		return name != "" && name != previous, nil
	})
	plan := newObject(installPlanGVK, sub.GetNamespace(), name)
	waitForLong(t, "InstallPlan "+name+" RequiresApproval", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(plan), plan); err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(plan.Object, "status", "phase")
		if phase == "Failed" {
			t.Fatalf("InstallPlan %s failed: %v", name, plan.Object["status"])
		}
		return phase == "RequiresApproval", nil
	})
	if names, _, _ := unstructured.NestedStringSlice(plan.Object, "spec", "clusterServiceVersionNames"); !slices.Equal(names, []string{csv}) {
		t.Fatalf("InstallPlan %s installs %v, want [%s]", name, names, csv)
	}
	return plan
}

func approve(t *testing.T, plan *unstructured.Unstructured) {
	t.Helper()
	patch := client.MergeFrom(plan.DeepCopy())
	if err := unstructured.SetNestedField(plan.Object, true, "spec", "approved"); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Patch(context.Background(), plan, patch); err != nil {
		t.Fatalf("approve InstallPlan %s: %v", plan.GetName(), err)
	}
}

func waitForInstallPlanComplete(t *testing.T, plan *unstructured.Unstructured) {
	t.Helper()
	waitForLong(t, "InstallPlan "+plan.GetName()+" Complete", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(plan), plan); err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(plan.Object, "status", "phase")
		if phase == "Failed" {
			t.Fatalf("InstallPlan %s failed: %v", plan.GetName(), plan.Object["status"])
		}
		return phase == "Complete", nil
	})
}

func waitForCSVSucceeded(t *testing.T, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	csv := newObject(csvGVK, namespace, name)
	waitForLong(t, "CSV "+name+" Succeeded", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(csv), csv); err != nil {
			return false, ignoreNotFound(err)
		}
		phase, _, _ := unstructured.NestedString(csv.Object, "status", "phase")
		if phase == "Failed" {
			message, _, _ := unstructured.NestedString(csv.Object, "status", "message")
			t.Fatalf("CSV %s failed: %s", name, message)
		}
		return phase == "Succeeded", nil
	})
	return csv
}

// waitForOperatorRunning waits until the CSV's Deployment runs the CSV's operator image on every
// replica, and returns that image, which must be tagged with the CSV's version.
func waitForOperatorRunning(t *testing.T, csv *unstructured.Unstructured) string {
	t.Helper()
	name, spec := csvDeployment(t, csv)
	containers, _, _ := unstructured.NestedSlice(spec, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("CSV %s: Deployment %s has %d containers, want 1", csv.GetName(), name, len(containers))
	}
	image, _ := containers[0].(map[string]any)["image"].(string)
	version, _, _ := unstructured.NestedString(csv.Object, "spec", "version")
	tag := image
	if olmReleaseImages != "" {
		tag = releaseImageTags(t)[image]
	}
	if !strings.HasSuffix(tag, "/etcd-operator:v"+version) {
		t.Errorf("CSV %s (version %s) runs image %s, not etcd-operator:v%s%s", csv.GetName(), version, image, version,
			map[bool]string{true: " by the digest the release lists for it"}[olmReleaseImages != ""])
	}

	deployment := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: csv.GetNamespace(), Name: name}
	waitForLong(t, "Deployment "+key.String()+" rolled out with "+image, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, key, deployment); err != nil {
			return false, ignoreNotFound(err)
		}
		c := deployment.Spec.Template.Spec.Containers
		return len(c) == 1 && c[0].Image == image && rolledOut(deployment), nil
	})
	return image
}

// releaseImageTags reads a release's images.txt (a tag and a digest per line) as the tag of each
// image by digest: <repository>@<digest> -> <repository>:<tag>.
func releaseImageTags(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(olmReleaseImages)
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) != 2 || !strings.Contains(fields[0], ":") {
			t.Fatalf("%s: %q is not a tag and a digest", olmReleaseImages, line)
		}
		tags[fields[0][:strings.LastIndex(fields[0], ":")]+"@"+fields[1]] = fields[0]
	}
	return tags
}

// expectReleaseImagesRun: every container of the pods is an image of the release by its digest,
// and the node pulled exactly that image (from the mirror: the release's images were not
// imported into the node, and its tags name other images there). The container status's image
// is not looked at: the kubelet reports there any name the node has for the same image.
func expectReleaseImagesRun(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	tags := releaseImageTags(t)
	for _, pod := range pods {
		pulled := map[string]string{}
		for _, status := range pod.Status.ContainerStatuses {
			pulled[status.Name] = status.ImageID
		}
		for _, container := range pod.Spec.Containers {
			tag, ok := tags[container.Image]
			digest := container.Image[strings.LastIndex(container.Image, "@")+1:]
			switch {
			case !ok:
				t.Errorf("pod %s runs %s, not an image of the release by its digest", pod.Name, container.Image)
			case !strings.HasSuffix(pulled[container.Name], digest):
				t.Errorf("pod %s runs %s (%s) from image %q, not the release's", pod.Name, container.Image, tag, pulled[container.Name])
			default:
				t.Logf("pod %s runs %s (%s)", pod.Name, container.Image, tag)
			}
		}
	}
}

// csvDeployment is the name and the install spec of the one Deployment the CSV installs.
func csvDeployment(t *testing.T, csv *unstructured.Unstructured) (string, map[string]any) {
	t.Helper()
	deployments, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "deployments")
	if len(deployments) != 1 {
		t.Fatalf("CSV %s installs %d Deployments, want 1", csv.GetName(), len(deployments))
	}
	spec, _ := deployments[0].(map[string]any)
	name, _ := spec["name"].(string)
	return name, spec
}

// containsAll reports whether got has every field of want, with the same value; fields a newer
// schema defaults may come on top.
func containsAll(got, want any) bool {
	wantMap, ok := want.(map[string]any)
	if !ok {
		return reflect.DeepEqual(got, want)
	}
	gotMap, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range wantMap {
		if !containsAll(gotMap[k], v) {
			return false
		}
	}
	return true
}

// toMap is a typed value as the JSON fields it is stored with, for containsAll.
func toMap(t *testing.T, value any) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(value)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newObject(gvk schema.GroupVersionKind, namespace, name string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(namespace)
	obj.SetName(name)
	return obj
}

func waitForLong(t testing.TB, what string, done wait.ConditionWithContextFunc) {
	t.Helper()
	if err := pollTolerant(t, what, 2*time.Second, olmTimeout, done); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
