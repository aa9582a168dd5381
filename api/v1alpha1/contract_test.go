package v1alpha1_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// updateCases: an object is created, one change is applied, and the API server must accept or
// refuse the update as the contract says.
var updateCases = []struct {
	name    string
	initial string
	change  func(u *unstructured.Unstructured)
	want    string // empty: the update must be accepted
}{
	{"cluster patch upgrade", cluster("version: 3.6.15"), setField("3.6.16", "spec", "version"), ""},
	{"cluster client service exposed once formed", withStatus(cluster("version: 3.6.16"), "clusterID: abc"), setField("LoadBalancer", "spec", "clientService", "type"), ""},
	{"cluster client service annotated once formed", withStatus(cluster("clientService: {type: NodePort}"), "clusterID: abc"),
		setField(map[string]any{"example.com/owner": "team-a"}, "spec", "clientService", "annotations"), ""},
	{"cluster minor upgrade", cluster("version: 3.6.16"), setField("3.7.3", "spec", "version"), ""},
	{"cluster minor upgrade while running", withStatus(cluster("version: 3.6.16"), "currentVersion: 3.6.16"), setField("3.7.3", "spec", "version"), ""},
	{"cluster patch rollback while running", withStatus(cluster("version: 3.6.16"), "currentVersion: 3.6.16"), setField("3.6.15", "spec", "version"), ""},
	{"cluster stuck upgrade taken back", withStatus(cluster("version: 3.7.3"), "currentVersion: 3.6.16"), setField("3.6.16", "spec", "version"), ""},
	{"cluster minor downgrade below running", withStatus(cluster("version: 3.7.3"), "currentVersion: 3.7.3"), setField("3.6.16", "spec", "version"), "version cannot be downgraded below the running version 3.7.3"},
	{"cluster second minor before the first is running", withStatus(cluster("version: 3.7.3"), "currentVersion: 3.6.16"), setField("3.8.0", "spec", "version"), "version can be at most one minor version above the running version 3.6.16"},
	{"cluster minor skip while running", withStatus(cluster("version: 3.5.21"), "currentVersion: 3.5.21"), setField("3.7.3", "spec", "version"), "version can be at most one minor version above the running version 3.5.21"},
	{"cluster never formed: version typo corrected", cluster("version: 3.6.99"), setField("3.6.16", "spec", "version"), ""},
	{"cluster never formed: any minor", cluster("version: 3.7.3"), setField("3.5.21", "spec", "version"), ""},
	{"cluster scaled while its version is ahead", withStatus(cluster("version: 3.8.0"), "currentVersion: 3.6.16"), setField(int64(5), "spec", "size"), ""},
	{"cluster scale", cluster("size: 3"), setField(int64(5), "spec", "size"), ""},
	{"cluster storage grows", withStatus(cluster("storage: {size: 1Gi}"), "clusterID: 8e9e05c52164694d"), setField("2Gi", "spec", "storage", "size"), ""},
	{"cluster storage shrinks", withStatus(cluster("storage: {size: 2Gi}"), "clusterID: 8e9e05c52164694d"), setField("1Gi", "spec", "storage", "size"), "storage.size cannot shrink"},
	{"cluster storage class set later", withStatus(cluster("storage: {size: 1Gi}"), "clusterID: 8e9e05c52164694d"), setField("fast", "spec", "storage", "storageClassName"), "storage.storageClassName cannot be changed"},
	{"cluster storage class changed", withStatus(cluster("storage: {storageClassName: slow}"), "clusterID: 8e9e05c52164694d"), setField("fast", "spec", "storage", "storageClassName"), "storage.storageClassName cannot be changed"},
	{"cluster becomes ephemeral", withStatus(cluster("storage: {size: 1Gi}"), "clusterID: 8e9e05c52164694d"), setField(true, "spec", "storage", "ephemeral"), "storage.ephemeral cannot be changed"},
	{"cluster never formed: storage shrinks", cluster("storage: {size: 2Gi}"), setField("1Gi", "spec", "storage", "size"), ""},
	{"cluster never formed: storage class corrected", withStatus(cluster("storage: {storageClassName: slow}"), "clusterID: ''"), setField("fast", "spec", "storage", "storageClassName"), ""},
	{"cluster never formed: storage class removed", cluster("storage: {storageClassName: slow}"), removeField("spec", "storage", "storageClassName"), ""},
	{"cluster never formed: becomes ephemeral", cluster("storage: {size: 1Gi}"), setField(true, "spec", "storage", "ephemeral"), ""},
	{"cluster tls added", cluster("size: 3"), setField(map[string]any{}, "spec", "tls"), "tls cannot be added to or removed from an existing cluster"},
	{"cluster tls removed", cluster("tls: {}"), removeField("spec", "tls"), "tls cannot be added to or removed from an existing cluster"},
	{"cluster tls provider changed", cluster("tls: {}"), setField(map[string]any{"provider": "CertManager", "certManager": map[string]any{"issuerRef": map[string]any{"name": "ca"}}}, "spec", "tls"), "tls.provider cannot be changed"},
	{"cluster auth removed", cluster("auth: {rootSecretName: root}"), removeField("spec", "auth"), "auth cannot be removed once set"},
	{"cluster auth added", cluster("size: 3"), setField(map[string]any{"rootSecretName": "root"}, "spec", "auth"), ""},
	{"cluster auth secret renamed", cluster("auth: {rootSecretName: root}"), setField("root-2", "spec", "auth", "rootSecretName"), ""},
	{"cluster paused", cluster("size: 3"), setField(true, "spec", "paused"), ""},
	{"cluster pinned image changed with its version", cluster("version: 3.6.16\nrepository: r.example/etcd@sha256:" + strings.Repeat("a", 64)),
		func(u *unstructured.Unstructured) {
			setField("3.7.3", "spec", "version")(u)
			setField("r.example/etcd@sha256:"+strings.Repeat("b", 64), "spec", "repository")(u)
		}, ""},
	{"cluster pinned image unpinned with a version change", cluster("version: 3.6.16\nrepository: r.example/etcd@sha256:" + strings.Repeat("a", 64)),
		func(u *unstructured.Unstructured) {
			setField("3.7.3", "spec", "version")(u)
			setField("r.example/etcd", "spec", "repository")(u)
		}, ""},
	{"cluster pinned image kept through a version change", cluster("version: 3.6.16\nrepository: r.example/etcd@sha256:" + strings.Repeat("a", 64)),
		setField("3.7.3", "spec", "version"), "spec.repository is pinned by digest"},
	{"cluster pinned by digest along with a version change", cluster("version: 3.6.16\nrepository: r.example/etcd"),
		func(u *unstructured.Unstructured) {
			setField("3.7.3", "spec", "version")(u)
			setField("r.example/etcd@sha256:"+strings.Repeat("b", 64), "spec", "repository")(u)
		}, ""},
	{"cluster pinned image changed alone", cluster("version: 3.6.16\nrepository: r.example/etcd@sha256:" + strings.Repeat("a", 64)),
		setField("r.example/etcd@sha256:"+strings.Repeat("b", 64), "spec", "repository"), ""},

	{"scheduled backup suspended", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'"), setField(true, "spec", "suspend"), ""},
	{"scheduled backup retention max age zero", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'\nretention: {maxAge: 24h}"), setField("0s", "spec", "retention", "maxAge"), "retention.maxAge must be above 0"},
	{"scheduled backup schedule mistyped", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '0 3 * * *'"), setField("0 3 * * 7", "spec", "schedule"), "schedule: the day of week (5th field) must be"},
	{"scheduled backup retention changed", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'"), setField(int64(3), "spec", "retention", "maxCount"), ""},
	{"backup cluster changed", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'"), setField("f", "spec", "clusterName"), "clusterName is immutable"},
	{"backup destination changed", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'"), setField("c", "spec", "destination", "pvc", "claimName"), "destination is immutable"},
	{"one-shot backup changed", backup("clusterName: e\ndestination: {pvc: {claimName: b}}"), setField(int64(5), "spec", "historyLimit"), "a one-shot EtcdBackup is an immutable record"},
	{"one-shot backup scheduled later", backup("clusterName: e\ndestination: {pvc: {claimName: b}}"), setField("@daily", "spec", "schedule"), "a one-shot EtcdBackup cannot become scheduled"},
	{"scheduled backup made one-shot", backup("clusterName: e\ndestination: {pvc: {claimName: b}}\nschedule: '@hourly'"), removeField("spec", "schedule"), "a one-shot EtcdBackup cannot become scheduled, nor the other way round"},

	{"restore retargeted", restore("source: {backup: {name: b}}\ntarget: {mode: InPlace, clusterName: r}"), setField("s", "spec", "target", "clusterName"), "an EtcdRestore cannot be changed once created"},
	{"restore labelled", restore("source: {backup: {name: b}}\ntarget: {mode: InPlace, clusterName: r}"), setField("x", "metadata", "labels", "team"), ""},
}

func TestUpdatesFollowTheImmutabilityRules(t *testing.T) {
	for _, tc := range updateCases {
		t.Run(tc.name, func(t *testing.T) {
			u := object(t, tc.initial)
			status, hasStatus := u.Object["status"]
			create(t, u)
			if hasStatus {
				u.Object["status"] = status
				if err := k8sClient.Status().Update(ctx(t), u); err != nil {
					t.Fatalf("write status: %v", err)
				}
			}
			tc.change(u)
			err := k8sClient.Update(ctx(t), u)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("update refused: %v", err)
				}
				return
			}
			expectRejected(t, err, tc.want)
		})
	}
}

// withStatus gives a manifest a status, written through the status subresource after the create
// as the operator would write it: "clusterID: ..." for a cluster that has formed,
// "currentVersion: ..." for the version its members run.
func withStatus(manifest, status string) string {
	return manifest + "\nstatus: {" + status + "}"
}

func setField(value any, path ...string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
			panic(err)
		}
	}
}

func removeField(path ...string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, path...) }
}

func TestEmptyClusterSpecGetsSafeDefaults(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: "default"}}
	create(t, c)

	got := c.Spec
	want := etcdv1alpha1.EtcdClusterSpec{
		Size:    3,
		Version: etcdv1alpha1.DefaultEtcdVersion,
		Storage: etcdv1alpha1.StorageSpec{
			Size:            ptr.To(resource.MustParse("4Gi")),
			RetentionPolicy: etcdv1alpha1.PVCRetentionPolicy{WhenScaled: etcdv1alpha1.DeletePVC, WhenDeleted: etcdv1alpha1.RetainPVC},
		},
		Tuning: etcdv1alpha1.EtcdTuning{
			AutoCompactionMode:      "periodic",
			AutoCompactionRetention: "1h",
			SnapshotCount:           10000,
			HeartbeatIntervalMillis: 100,
			ElectionTimeoutMillis:   1000,
		},
		QuorumLossRecovery: etcdv1alpha1.QuorumLossRecoverySpec{
			Policy: etcdv1alpha1.QuorumLossRecoveryManual,
			After:  &metav1.Duration{Duration: 10 * 60e9},
		},
		Defragmentation: etcdv1alpha1.DefragmentationSpec{
			Policy:           etcdv1alpha1.DefragmentationAuto,
			ThresholdPercent: 50,
			MinimumDBSize:    ptr.To(resource.MustParse("100Mi")),
		},
		ClientService: etcdv1alpha1.ClientServiceSpec{Type: corev1.ServiceTypeClusterIP},
		CorruptionCheck: etcdv1alpha1.CorruptionCheckSpec{
			Policy:   etcdv1alpha1.CorruptionCheckEnabled,
			Interval: &metav1.Duration{Duration: 4 * 3600e9},
		},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", got, want)
	}
}

func TestTLSDefaultsToOperatorIssuedCertificates(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "tls-defaults", Namespace: "default"},
		Spec:       etcdv1alpha1.EtcdClusterSpec{TLS: &etcdv1alpha1.TLSSpec{}},
	}
	create(t, c)
	tls := c.Spec.TLS
	if tls.Provider != etcdv1alpha1.TLSProviderOperator || tls.Validity.Hours() != 8760 || tls.RenewBefore.Hours() != 720 {
		t.Fatalf("tls defaults: provider %q validity %v renewBefore %v", tls.Provider, tls.Validity, tls.RenewBefore)
	}
}

func TestBackupDefaults(t *testing.T) {
	b := object(t, backup("clusterName: e\ndestination: {s3: {bucket: bkt, credentialsSecretName: c}}"))
	create(t, b)
	if limit, _, _ := unstructured.NestedInt64(b.Object, "spec", "historyLimit"); limit != 10 {
		t.Errorf("historyLimit = %d, want 10", limit)
	}
	if region, _, _ := unstructured.NestedString(b.Object, "spec", "destination", "s3", "region"); region != "us-east-1" {
		t.Errorf("region = %q, want us-east-1", region)
	}
}

// A restore is revision-safe unless its author says otherwise; a number is taken as it is.
func TestRestoreRevisionBumpDefaultsToAuto(t *testing.T) {
	for spec, want := range map[string]string{"": "Auto", "\nrevisionBump: None": "None", "\nrevisionBump: '2000000'": "2000000"} {
		rs := object(t, restore("source: {backup: {name: b}}\ntarget: {mode: InPlace, clusterName: r}"+spec))
		create(t, rs)
		if got, _, _ := unstructured.NestedString(rs.Object, "spec", "revisionBump"); got != want {
			t.Errorf("%q: revisionBump = %q, want %q", spec, got, want)
		}
	}
}

func TestScaleSubresourceDrivesSpecSize(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "scaled", Namespace: "default"}}
	create(t, c)

	scale := &autoscalingv1.Scale{}
	if err := k8sClient.SubResource("scale").Get(ctx(t), c, scale); err != nil {
		t.Fatalf("get scale: %v", err)
	}
	if scale.Spec.Replicas != 3 {
		t.Fatalf("scale.spec.replicas = %d, want 3", scale.Spec.Replicas)
	}
	scale.Spec.Replicas = 5
	if err := k8sClient.SubResource("scale").Update(ctx(t), c, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("update scale: %v", err)
	}
	if err := k8sClient.Get(ctx(t), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.Size != 5 {
		t.Fatalf("spec.size = %d after scaling to 5", c.Spec.Size)
	}
	scale.Spec.Replicas = 10
	expectRejected(t, k8sClient.SubResource("scale").Update(ctx(t), c, client.WithSubResourceBody(scale)), "should be less than or equal to 9")
}

func TestStatusIsASeparateSubresource(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "status", Namespace: "default"}}
	create(t, c)

	c.Status.Leader = "pretend"
	c.Spec.Size = 5
	if err := k8sClient.Update(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	if c.Status.Leader != "" || c.Spec.Size != 5 {
		t.Fatalf("an update of the object wrote status (leader %q) or lost spec (size %d)", c.Status.Leader, c.Spec.Size)
	}

	c.Status.Leader = "member-a"
	c.Spec.Size = 1
	if err := k8sClient.Status().Update(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	if c.Status.Leader != "member-a" || c.Spec.Size != 5 {
		t.Fatalf("a status update did not write status (leader %q) or changed spec (size %d)", c.Status.Leader, c.Spec.Size)
	}
}

func TestSamplesAreAccepted(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "etcd_*.yaml"))
	if err != nil || len(paths) != 3 {
		t.Fatalf("want one sample per kind, found %v (%v)", paths, err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			create(t, object(t, string(data)))
		})
	}
}

// kubectl explain is how users discover the API: every field must be documented there.
func TestKubectlExplainShowsDocumentedFields(t *testing.T) {
	//nolint:staticcheck // the admin kubectl is what a user runs; AddUser would only add RBAC to set up
	stdout, stderr, err := testEnv.ControlPlane.KubeCtl().Run("explain", "etcdcluster.spec")
	if err != nil {
		errText, _ := io.ReadAll(stderr)
		t.Fatalf("kubectl explain: %v\n%s", err, errText)
	}
	out, _ := io.ReadAll(stdout)
	for _, want := range []string{
		"Size is the number of voting members",
		"Version is the etcd version to run",
		"quorumLossRecovery",
		"Paused stops every change the operator would make",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl explain etcdcluster.spec lacks %q:\n%s", want, out)
		}
	}
}

// Defaults must be written the way Go serialises them, or every update from a typed client
// (the operator's own included) would change the spec and bump the generation.
func TestTypedRoundTripKeepsTheGeneration(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "round-trip", Namespace: "default"},
		Spec:       etcdv1alpha1.EtcdClusterSpec{TLS: &etcdv1alpha1.TLSSpec{}},
	}
	create(t, c)
	generation := c.Generation
	c.Labels = map[string]string{"touched": "yes"}
	if err := k8sClient.Update(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	if c.Generation != generation {
		t.Fatalf("generation %d -> %d after an update that changed only a label", generation, c.Generation)
	}
}
