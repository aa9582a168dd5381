package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The two root passwords of the test: the one in force when the snapshot is taken, and the one
// the user rotates to after it.
const (
	passwordAtSnapshot = "password-at-snapshot"
	passwordRotatedTo  = "password-rotated-to"
)

// An in-place restore of a snapshot taken before the root password was rotated. The restored
// member's etcd has the password of the snapshot's time; the user's Secret, and the operator's
// record, the rotated one. The operator logs in with the password it had set before, sets the
// Secret's, and the restore completes with no action from the user. Before, etcd refused every
// password the operator tried: the cluster reported CredentialsRejected and the restore waited
// at "0 of 1 members ready" until the user put the old password back in the Secret (issue 24).
//
// Against a kube-apiserver of its own (the suite's manager would reconcile the same cluster with
// a client that reaches no etcd) and real etcd servers on loopback. The operator enables
// authentication and rotates the password itself; the test plays the kubelet (each member pod
// runs as an etcd process) and the restore Job (etcdutl restores the snapshot into the seed
// member's data directory), and makes the cut-over's two writes as the restore reconciler does.
func TestInPlaceRestoreOfASnapshotTakenBeforeAPasswordRotation(t *testing.T) {
	f := newRestoredPasswordFixture(t)
	first := "c-m0000"

	f.until(t, "authentication on with the Secret's password", func() error {
		return f.authOnWith(first, passwordAtSnapshot)
	})
	f.put(t, first, passwordAtSnapshot, "written-before-the-snapshot")
	snapshot := f.snapshot(t, first, passwordAtSnapshot)

	f.setUserPassword(t, passwordRotatedTo)
	f.until(t, "the rotated password in etcd", func() error {
		return f.authOnWith(first, passwordRotatedTo)
	})
	f.put(t, first, passwordRotatedTo, "written-after-the-snapshot")

	rs := f.cutOverToSnapshot(t, snapshot)
	f.until(t, "the restore completed", func() error {
		got := &etcdv1alpha1.EtcdRestore{}
		if err := f.k8s.Get(t.Context(), client.ObjectKeyFromObject(rs), got); err != nil {
			return err
		}
		if got.Status.Phase != etcdv1alpha1.RestoreCompleted {
			return fmt.Errorf("restore %s: %s", got.Status.Phase, conditionText(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
		}
		return nil
	})

	seed := resources.SeedMemberName(f.cluster.Name, string(rs.UID))
	if err := f.authOnWith(seed, passwordRotatedTo); err != nil {
		t.Errorf("after the restore: %v", err)
	}
	if err := f.rootLogin(seed, passwordAtSnapshot); !errors.Is(err, errLoginRefused) {
		t.Errorf("the snapshot's password after the restore: %v, want it refused", err)
	}
	if got := f.keys(t, seed, passwordRotatedTo); got != "written-before-the-snapshot" {
		t.Errorf("keys after the restore: %q, want the snapshot's alone", got)
	}
	c := f.get(t)
	if reason := degradedReason(c); reason != "" {
		t.Errorf("Degraded %q after the restore: %s", reason, conditionText(c.Status.Conditions, etcdv1alpha1.ConditionDegraded))
	}
	record := &corev1.Secret{}
	if err := f.k8s.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: resources.RootCredentialsSecretName(c.Name)}, record); err != nil {
		t.Fatal(err)
	}
	rec, err := resources.ReadRootCredentials(record)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Password != passwordRotatedTo || rec.Pending != "" || len(rec.History) != 2 ||
		rec.History[0].Password != passwordRotatedTo || rec.History[1].Password != passwordAtSnapshot {
		t.Errorf("the operator's record after the restore: password set %t, pending %t, %d passwords in its history; want the rotated one, "+
			"nothing pending, and the rotated and the snapshot's", rec.Password == passwordRotatedTo, rec.Pending != "", len(rec.History))
	}
}

// restoredPasswordFixture is a one-member cluster with spec.auth whose members are real etcd
// processes, reconciled by the cluster and restore reconcilers against a real API server.
type restoredPasswordFixture struct {
	k8s      client.Client
	cluster  *etcdv1alpha1.EtcdCluster
	clusters *EtcdClusterReconciler
	restores *EtcdRestoreReconciler
	recorder *events.FakeRecorder
	// restore is the EtcdRestore under way, reconciled with the cluster once made.
	restore *etcdv1alpha1.EtcdRestore

	mu sync.Mutex
	// servers are the members' etcd processes by member name, made when reserved or started;
	// running are those whose pod runs.
	servers map[string]*etcdtest.Server
	running map[string]bool
}

func newRestoredPasswordFixture(t *testing.T) *restoredPasswordFixture {
	t.Helper()
	k8s := startAPIServer(t)
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restored-password"}}
	root := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: ns.Name}, Data: map[string][]byte{"password": []byte(passwordAtSnapshot)}}
	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns.Name},
		Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16", Auth: &etcdv1alpha1.AuthSpec{RootSecretName: root.Name}},
	}
	for _, obj := range []client.Object{ns, root, cluster} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	f := &restoredPasswordFixture{k8s: k8s, cluster: cluster, recorder: events.NewFakeRecorder(1000),
		servers: map[string]*etcdtest.Server{}, running: map[string]bool{}}
	// A formed cluster of one, as the operator made it; authentication is not on yet.
	name := "c-m0000"
	spec := resources.MemberSpec{Name: name, Version: "3.6.16", InitialCluster: resources.InitialCluster(cluster, []string{name}), State: "new"}
	pod := resources.MemberPod(cluster, spec, resources.EtcdImages{Repository: "registry.test/etcd"}, resources.PodSettings{})
	if err := ctrl.SetControllerReference(cluster, pod, k8s.Scheme()); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{resources.MemberPVC(cluster, spec), pod} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	images := resources.EtcdImages{Repository: "registry.test/etcd"}
	f.clusters = &EtcdClusterReconciler{Client: k8s, APIReader: k8s, Etcd: etcd.NewCacheWith(f.dial), Recorder: f.recorder, DefaultImages: images,
		ProbeAddresses: func(context.Context, []string) string { return "" }}
	f.restores = &EtcdRestoreReconciler{Client: k8s, APIReader: k8s, Recorder: f.recorder, AgentImage: "registry.test/agent", DefaultImages: images, Now: time.Now,
		Keyspaces: f.clusters.KeyspacesAt}
	f.runPods(t)
	return f
}

// startAPIServer starts a kube-apiserver of the test's own, with the CRDs, and returns a client
// of it.
func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	_, k8s := startAPIServerWithConfig(t)
	return k8s
}

// startAPIServerWithConfig is startAPIServer, with the configuration a manager connects with.
func startAPIServerWithConfig(t *testing.T) (*rest.Config, client.Client) {
	t.Helper()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k8s, err := client.New(cfg, client.Options{Scheme: testScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, k8s
}

// dial is the reconciler's etcd dial, with each member's client URL (a DNS name in the cluster)
// replaced by the loopback address its process listens at.
func (f *restoredPasswordFixture) dial(cfg etcd.Config) (etcd.Client, error) {
	f.mu.Lock()
	var endpoints []string
	for _, endpoint := range cfg.Endpoints {
		for name := range f.running {
			if endpoint == resources.ClientURL(f.cluster, name) {
				endpoints = append(endpoints, f.servers[name].ClientURL)
			}
		}
	}
	f.mu.Unlock()
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("no etcd runs at %v", cfg.Endpoints)
	}
	cfg.Endpoints = endpoints
	return etcd.New(cfg)
}

// server is the etcd process of member name, reserved on first use.
func (f *restoredPasswordFixture) server(t *testing.T, name string) *etcdtest.Server {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.servers[name] == nil {
		f.servers[name] = etcdtest.NewServer(t, name)
	}
	return f.servers[name]
}

// runPods plays the kubelet: the etcd of a member whose pod is gone stops, and a member pod
// not yet running starts its etcd (on the data its directory holds, if any) and is Ready.
func (f *restoredPasswordFixture) runPods(t *testing.T) {
	t.Helper()
	pods := &corev1.PodList{}
	if err := f.k8s.List(t.Context(), pods, client.InNamespace(f.cluster.Namespace), client.MatchingLabels(resources.Selector(f.cluster))); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp.IsZero() {
			present[pods.Items[i].Labels[resources.LabelMember]] = true
		}
	}
	for name := range f.running {
		if !present[name] {
			f.servers[name].Stop()
			f.mu.Lock()
			delete(f.running, name)
			f.mu.Unlock()
		}
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		name := pod.Labels[resources.LabelMember]
		if pod.Status.PodIP != "" || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		s := f.server(t, name)
		s.Start(t, "new", etcdtest.InitialCluster(s))
		waitAnswering(t, s)
		f.mu.Lock()
		f.running[name] = true
		f.mu.Unlock()
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := f.k8s.Status().Update(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}
}

// waitAnswering waits until s answers its status: with authentication on, by refusing a client
// without credentials.
func waitAnswering(t *testing.T, s *etcdtest.Server) {
	t.Helper()
	c := s.Client(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := c.Status(ctx, s.ClientURL)
		cancel()
		if err == nil || errors.Is(rpctypes.Error(err), rpctypes.ErrUserEmpty) {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.DataDir + ".log")
			t.Fatalf("etcd %s does not answer: %v\n%s", s.Name, err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// until reconciles the cluster, and the restore under way if any, playing the kubelet between
// reconciles, until done says so.
func (f *restoredPasswordFixture) until(t *testing.T, what string, done func() error) {
	t.Helper()
	var problem, reconcileErr error
	for range 30 {
		_, reconcileErr = f.clusters.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.cluster)})
		f.runPods(t)
		if f.restore != nil {
			if _, err := f.restores.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.restore)}); err != nil {
				reconcileErr = errors.Join(reconcileErr, err)
			}
		}
		if problem = done(); problem == nil {
			return
		}
	}
	c := f.get(t)
	t.Fatalf("not %s: %v\nlast reconcile: %v\nDegraded: %s\nProgressing: %s\nevents:\n%s", what, problem, reconcileErr,
		conditionText(c.Status.Conditions, etcdv1alpha1.ConditionDegraded), conditionText(c.Status.Conditions, etcdv1alpha1.ConditionProgressing), f.events())
}

// errLoginRefused is etcd refusing root's password.
var errLoginRefused = errors.New("etcd refused root's password")

// rootLogin logs in to member name's etcd as root with password and reads a key.
func (f *restoredPasswordFixture) rootLogin(name, password string) error {
	c, err := f.rootClient(name, password)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Get(ctx, "k")
	return err
}

func (f *restoredPasswordFixture) rootClient(name, password string) (*clientv3.Client, error) {
	f.mu.Lock()
	s := f.servers[name]
	f.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("member %s has no etcd", name)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL}, Username: "root", Password: password,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil && strings.Contains(err.Error(), "authentication failed") {
		return nil, fmt.Errorf("%w: %w", errLoginRefused, err)
	}
	return c, err
}

// authOnWith: member name's etcd has authentication on and accepts password for root.
func (f *restoredPasswordFixture) authOnWith(name, password string) error {
	if err := f.rootLogin(name, password); err != nil {
		return fmt.Errorf("root with %s: %w", password, err)
	}
	f.mu.Lock()
	s := f.servers[name]
	f.mu.Unlock()
	anonymous, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer func() { _ = anonymous.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := anonymous.Get(ctx, "k"); err == nil {
		return errors.New("etcd serves a client without credentials: authentication is off")
	}
	return nil
}

func (f *restoredPasswordFixture) put(t *testing.T, name, password, key string) {
	t.Helper()
	c, err := f.rootClient(name, password)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Put(t.Context(), key, "v"); err != nil {
		t.Fatal(err)
	}
}

// keys are the keys member name's etcd holds, comma-separated.
func (f *restoredPasswordFixture) keys(t *testing.T, name, password string) string {
	t.Helper()
	c, err := f.rootClient(name, password)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	resp, err := c.Get(t.Context(), "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return strings.Join(keys, ",")
}

// snapshot takes a snapshot of member name's etcd, as a backup Job does, into a file.
func (f *restoredPasswordFixture) snapshot(t *testing.T, name, password string) string {
	t.Helper()
	c, err := f.rootClient(name, password)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	r, err := c.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, r); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// setUserPassword is the user rotating the password in the Secret spec.auth names.
func (f *restoredPasswordFixture) setUserPassword(t *testing.T, password string) {
	t.Helper()
	root := &corev1.Secret{}
	if err := f.k8s.Get(t.Context(), client.ObjectKey{Namespace: f.cluster.Namespace, Name: f.cluster.Spec.Auth.RootSecretName}, root); err != nil {
		t.Fatal(err)
	}
	root.Data = map[string][]byte{"password": []byte(password)}
	if err := f.k8s.Update(t.Context(), root); err != nil {
		t.Fatal(err)
	}
}

// cutOverToSnapshot brings an in-place restore of snapshot to its cut-over: the EtcdRestore,
// its record of what it restored and replaced, the seed member's data restored by etcdutl on a
// claim given to the cluster, and the cluster told to restart from it.
func (f *restoredPasswordFixture) cutOverToSnapshot(t *testing.T, snapshot string) *etcdv1alpha1.EtcdRestore {
	t.Helper()
	ctx := t.Context()
	c := f.get(t)
	rs := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "before-rotation", Namespace: c.Namespace, Finalizers: []string{restoreFinalizer}},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Location: &etcdv1alpha1.SnapshotLocation{
				StorageLocation: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}, Key: "snapshot.db"}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: c.Name},
		},
	}
	if err := f.k8s.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	replaced := &etcdv1alpha1.ReplacedData{ClusterID: c.Status.ClusterID}
	for _, m := range c.Status.Members {
		replaced.Members = append(replaced.Members, m.Name)
	}
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, StartTime: ptrTime(time.Now()), Replaced: replaced,
		RestoredRevision: ptr.To[int64](2), SnapshotURI: "pvc://backups/snapshot.db", SnapshotSHA256: "not-checked-here"}
	if err := f.k8s.Status().Update(ctx, rs); err != nil {
		t.Fatal(err)
	}

	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	s := f.server(t, seed)
	etcdutl := filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl")
	if out, err := exec.Command(etcdutl, "snapshot", "restore", snapshot, "--data-dir", s.DataDir, "--name", seed,
		"--initial-cluster", etcdtest.InitialCluster(s), "--initial-advertise-peer-urls", s.PeerURL).CombinedOutput(); err != nil {
		t.Fatalf("etcdutl: %v\n%s", err, out)
	}
	claim := resources.MemberPVC(c, resources.MemberSpec{Name: seed, InitialCluster: resources.InitialCluster(c, []string{seed}), State: "new"})
	claim.Labels, claim.OwnerReferences = resources.MemberLabels(c, seed), resources.ClaimOwners(c)
	if err := f.k8s.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Annotations = map[string]string{resources.AnnotationRestorePending: rs.Name, resources.AnnotationRestoreSeed: seed}
	if err := f.k8s.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	f.restore = rs
	return rs
}

func (f *restoredPasswordFixture) get(t *testing.T) *etcdv1alpha1.EtcdCluster {
	t.Helper()
	c := &etcdv1alpha1.EtcdCluster{}
	if err := f.k8s.Get(t.Context(), client.ObjectKeyFromObject(f.cluster), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *restoredPasswordFixture) events() string { return drainEvents(f.recorder) }

// conditionText is the condition of type condType, as status shows it.
func conditionText(conditions []metav1.Condition, condType string) string {
	cond := meta.FindStatusCondition(conditions, condType)
	if cond == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
}
