//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// The namespace, in the API server the test starts, whose ConfigMaps the informers hold.
const informedNamespace = "informed"

// A real kube-apiserver keeps its data in a cluster of the operator's, and a client-go informer
// holds one namespace's ConfigMaps through it, as every controller does. Restored in place with
// the revision bump, the API server's watch cache and the informer above it list afresh and
// hold exactly the backed-up ConfigMaps, then follow new writes. Restored again from the same
// backup without the bump, etcd holds the backed-up ConfigMaps again, at revisions the API
// server already had, and a fresh informer goes on holding what the restore took away and never
// sees a ConfigMap written after it: the hazard the bump is there for.
func TestAKubeAPIServerSurvivesAnInPlaceRestore(t *testing.T) {
	if os.Getenv("E2E_RESTORE_INFORMER") == "" {
		t.Skip("starts a kube-apiserver on this machine: run with make test-restore-informer")
	}
	f := newBackupFixture(t, "e2e-restore-informer-")
	endpoint := clientServiceEndpoint(t, f.cluster)
	server := startKubeAPIServer(t, endpoint)
	kube := newConfigMapWriter(t, server.config, informedNamespace)

	backedUp := map[string]string{"a": "backed up", "b": "backed up", "c": "backed up"}
	for _, name := range sortedKeys(backedUp) {
		kube.put(t, name, backedUp[name])
	}
	bumped := startConfigMapInformer(t, kube.config, informedNamespace)
	backup := f.createBackup(t, "before", etcdv1alpha1.EtcdBackupSpec{Destination: f.s3Destination("informer/", f.s3.CredentialsSecret)})
	waitBackupPhase(t, backup, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
	if backup.Status.Phase != etcdv1alpha1.BackupCompleted {
		t.Fatalf("backup failed: %+v", backup.Status)
	}
	kube.put(t, "b", "changed after the backup")
	kube.remove(t, "c")
	kube.put(t, "d", "created after the backup")
	bumped.waitHolds(t, map[string]string{"a": "backed up", "b": "changed after the backup", "d": "created after the backup"}, readyTimeout)
	source := etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name, URI: backup.Status.LastBackup.URI}}
	inPlace := etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: f.cluster.Name}

	ok := t.Run("with the bump, the informer lists afresh and holds the backed-up ConfigMaps", func(t *testing.T) {
		rs := f.createRestore(t, "bumped", etcdv1alpha1.EtcdRestoreSpec{Source: source, Target: inPlace, RevisionBump: "Auto"})
		// Bounded by the restore itself and a few minutes more: the API server's etcd client
		// backs off while the cluster is down, then its watch ends with the compaction error.
		converged := bumped.waitHolds(t, backedUp, restoreTimeout+3*time.Minute)
		waitRestorePhase(t, rs, restoreTimeout)
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted || rs.Status.InstallTime == nil {
			t.Fatalf("restore %s: %+v", rs.Status.Phase, rs.Status)
		}
		t.Logf("restored revision %d bumped by %d; the informer held the backed-up ConfigMaps %v after the cut-over",
			deref(rs.Status.RestoredRevision), rs.Status.RevisionBump, converged.Sub(rs.Status.InstallTime.Time).Round(time.Second))
		waitAvailable(t, f.cluster, 3)
		kube.put(t, "e", "created after the bumped restore")
		backedUp["e"] = "created after the bumped restore"
		bumped.waitHolds(t, backedUp, readyTimeout)
		expectRegistry(t, endpoint, backedUp)
		bumped.logRequests(t)
		server.logWatchCache(t)
		if bumped.relists() < 2 {
			t.Errorf("the informer listed %d times, want a list after the restore too", bumped.relists())
		}
	})
	if !ok {
		return
	}

	t.Run("without the bump, a fresh informer holds on to what the restore took away", func(t *testing.T) {
		unbumped := startConfigMapInformer(t, kube.config, informedNamespace)
		kube.remove(t, "a")
		kube.put(t, "g", "created before the unbumped restore")
		unbumped.waitHolds(t, map[string]string{"b": "backed up", "c": "backed up", "e": "created after the bumped restore", "g": "created before the unbumped restore"}, readyTimeout)
		rs := f.createRestore(t, "unbumped", etcdv1alpha1.EtcdRestoreSpec{Source: source, Target: inPlace, RevisionBump: "None"})
		waitRestorePhase(t, rs, restoreTimeout)
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted || rs.Status.RevisionBump != 0 {
			t.Fatalf("restore %s, bump %d: %+v", rs.Status.Phase, rs.Status.RevisionBump, rs.Status)
		}
		waitAvailable(t, f.cluster, 3)
		kube.put(t, "f", "created after the unbumped restore")
		restored := map[string]string{"a": "backed up", "b": "backed up", "c": "backed up", "f": "created after the unbumped restore"}
		// etcd holds the backed-up ConfigMaps and the new one: the restore did what it was asked.
		expectRegistry(t, endpoint, restored)
		const window = 5 * time.Minute
		holdsFor(t, window, "the informer without the bump", func(context.Context) (string, error) {
			if held := unbumped.holds(); maps.Equal(held, restored) {
				return fmt.Sprintf("it holds what etcd holds, %v: the restore without the bump did not leave it behind", held), nil
			}
			return "", nil
		})
		t.Logf("%v after the restore, the informer without the bump %s", window, describeStaleness(unbumped.holds(), restored))
		listed, err := kube.clientset.CoreV1().ConfigMaps(informedNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fresh := map[string]string{}
		for _, cm := range listed.Items {
			fresh[cm.Name] = cm.Data["value"]
		}
		t.Logf("a list through the API server now: %s", describeStaleness(fresh, restored))
		unbumped.logRequests(t)
		server.logWatchCache(t)
	})
}

// kubeAPIServer is envtest's kube-apiserver, run on this machine: config is a user of group
// system:masters; its log is kept under $ARTIFACTS.
type kubeAPIServer struct {
	config  *rest.Config
	logPath string
	logRead int
}

// startKubeAPIServer starts envtest's kube-apiserver (KUBEBUILDER_ASSETS) with its storage in
// the etcd cluster at etcdEndpoint.
func startKubeAPIServer(t *testing.T, etcdEndpoint string) *kubeAPIServer {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run with make test-restore-informer")
	}
	etcdURL, err := url.Parse(etcdEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(envOr("ARTIFACTS", t.TempDir()), t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "kube-apiserver.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	server := &envtest.APIServer{EtcdURL: etcdURL, Out: log, Err: log, StartTimeout: 2 * time.Minute, StopTimeout: time.Minute}
	err = server.Start()
	t.Cleanup(func() {
		if err := server.Stop(); err != nil {
			t.Logf("stop kube-apiserver: %v", err)
		}
		_ = log.Close()
		if t.Failed() {
			written, _ := os.ReadFile(logPath)
			t.Logf("kube-apiserver's log, the end:\n%s", lastLines(string(written), 40))
		}
	})
	if err != nil {
		t.Fatalf("start kube-apiserver on etcd %s: %v", etcdEndpoint, err)
	}
	cfg, err := server.AddUser(envtest.User{Name: "e2e", Groups: []string{"system:masters"}}, &rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = server.SecureServing.URL("https", "/").String()
	cfg.CAData = server.CA
	t.Logf("kube-apiserver at %s on etcd %s, its log in %s", cfg.Host, etcdEndpoint, logPath)
	return &kubeAPIServer{config: cfg, logPath: logPath}
}

// logWatchCache logs what the API server said of its watch cache since the last call: how many
// of its watches on etcd ended with the compaction error, and what it said of its ConfigMaps
// cache (it terminates its own watchers when it lists etcd afresh; its consistency check
// compares the cache with etcd, and only logs what it finds).
func (s *kubeAPIServer) logWatchCache(t *testing.T) {
	t.Helper()
	written, err := os.ReadFile(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	since := string(written[min(s.logRead, len(written)):])
	s.logRead = len(written)
	var configMaps []string
	for _, line := range strings.Split(since, "\n") {
		if strings.Contains(line, "configmaps") && (strings.Contains(line, "cacher") || strings.Contains(line, "consistency")) {
			configMaps = append(configMaps, line)
		}
	}
	t.Logf("kube-apiserver: %d of its watches on etcd ended with \"required revision has been compacted\"; of its ConfigMaps cache it said %d lines:\n%s",
		strings.Count(since, "required revision has been compacted"), len(configMaps), strings.Join(configMaps, "\n"))
}

// configMapWriter writes one namespace's ConfigMaps through the API server, each holding one
// value, retrying while the API server cannot reach etcd.
type configMapWriter struct {
	config    *rest.Config
	clientset *kubernetes.Clientset
	namespace string
}

func newConfigMapWriter(t *testing.T, cfg *rest.Config, namespace string) *configMapWriter {
	t.Helper()
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &configMapWriter{config: cfg, clientset: clientset, namespace: namespace}
	waitFor(t, "namespace "+namespace+" created through the kube-apiserver", func(ctx context.Context) (bool, error) {
		_, err := clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	return w
}

func (w *configMapWriter) put(t *testing.T, name, value string) {
	t.Helper()
	configMaps := w.clientset.CoreV1().ConfigMaps(w.namespace)
	waitFor(t, "ConfigMap "+name+" written", func(ctx context.Context) (bool, error) {
		cm, err := configMaps.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"value": value}}
			_, err = configMaps.Create(ctx, cm, metav1.CreateOptions{})
		case err == nil:
			cm.Data = map[string]string{"value": value}
			_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Logf("write ConfigMap %s: %v", name, err)
		}
		return err == nil, nil
	})
}

func (w *configMapWriter) remove(t *testing.T, name string) {
	t.Helper()
	waitFor(t, "ConfigMap "+name+" deleted", func(ctx context.Context) (bool, error) {
		err := w.clientset.CoreV1().ConfigMaps(w.namespace).Delete(ctx, name, metav1.DeleteOptions{})
		return err == nil || apierrors.IsNotFound(err), nil
	})
}

// configMapInformer is a client-go shared informer on one namespace's ConfigMaps with what it
// asked the API server noted: each list (client-go lists by a watch that sends the initial
// events, or by a plain list), each watch and the resourceVersion it resumed from, and each
// error a watch ended with.
type configMapInformer struct {
	informer cache.SharedIndexInformer
	started  time.Time

	mu      sync.Mutex
	notes   []string
	lists   int
	watches int
}

func startConfigMapInformer(t *testing.T, cfg *rest.Config, namespace string) *configMapInformer {
	t.Helper()
	i := &configMapInformer{started: time.Now()}
	noted := rest.CopyConfig(cfg)
	noted.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if !strings.HasSuffix(req.URL.Path, "/configmaps") {
				return next.RoundTrip(req)
			}
			query := req.URL.Query()
			i.noteRequest(query)
			resp, err := next.RoundTrip(req)
			if err == nil && query.Get("watch") != "" {
				resp.Body = &tooOldWatch{ReadCloser: resp.Body, note: func(message string) {
					i.note("the watch from resourceVersion %s was answered: %s", query.Get("resourceVersion"), message)
				}}
			}
			return resp, err
		})
	})
	clientset, err := kubernetes.NewForConfig(noted)
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace(namespace))
	i.informer = factory.Core().V1().ConfigMaps().Informer()
	if err := i.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { i.note("watch ended: %v", err) }); err != nil {
		t.Fatal(err)
	}
	// Only changes are noted: a relist hands every object over again, most of them unchanged.
	if _, err := i.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				i.note("added %s %q", cm.Name, cm.Data["value"])
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			before, ok1 := oldObj.(*corev1.ConfigMap)
			after, ok2 := newObj.(*corev1.ConfigMap)
			if ok1 && ok2 && before.ResourceVersion != after.ResourceVersion {
				i.note("updated %s %q (resourceVersion %s) to %q (%s)", after.Name, before.Data["value"], before.ResourceVersion, after.Data["value"], after.ResourceVersion)
			}
		},
		DeleteFunc: func(obj any) {
			switch deleted := obj.(type) {
			case *corev1.ConfigMap:
				i.note("deleted %s", deleted.Name)
			case cache.DeletedFinalStateUnknown:
				i.note("deleted %s, not seen deleted: a list no longer had it", deleted.Key)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		factory.Shutdown()
	})
	factory.Start(stop)
	synced, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(synced.Done(), i.informer.HasSynced) {
		t.Fatalf("the informer did not sync within %v", readyTimeout)
	}
	return i
}

// tooOldResourceVersion is the message of the error a watch ends with when the API server no
// longer has the revision it resumes from, read the same in a JSON or a protobuf stream.
var tooOldResourceVersion = regexp.MustCompile(`too old resource version: \d+ \(\d+\)`)

// tooOldWatch is a watch's response body, noting tooOldResourceVersion once if it comes.
type tooOldWatch struct {
	io.ReadCloser
	tail  []byte
	noted bool
	note  func(message string)
}

func (w *tooOldWatch) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if !w.noted {
		// What ended the last read is kept, in case the message was split between two.
		w.tail = append(w.tail[max(0, len(w.tail)-100):], p[:n]...)
		if message := tooOldResourceVersion.Find(w.tail); message != nil {
			w.noted = true
			w.note(string(message))
		}
	}
	return n, err
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (i *configMapInformer) noteRequest(query url.Values) {
	rv := query.Get("resourceVersion")
	switch {
	case query.Get("watch") != "true" && query.Get("watch") != "1":
		i.mu.Lock()
		i.lists++
		i.mu.Unlock()
		i.note("list from resourceVersion %q", rv)
	case query.Get("sendInitialEvents") == "true":
		i.mu.Lock()
		i.lists++
		i.mu.Unlock()
		i.note("list (a watch sending the initial events) from resourceVersion %q", rv)
	default:
		i.mu.Lock()
		i.watches++
		i.mu.Unlock()
		i.note("watch from resourceVersion %s", rv)
	}
}

func (i *configMapInformer) note(format string, args ...any) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.notes = append(i.notes, fmt.Sprintf("%6.1fs ", time.Since(i.started).Seconds())+fmt.Sprintf(format, args...))
}

func (i *configMapInformer) relists() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.lists
}

func (i *configMapInformer) logRequests(t *testing.T) {
	t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	t.Logf("the informer's lists: %d, watches resumed: %d; what it asked and saw:\n%s", i.lists, i.watches, strings.Join(i.notes, "\n"))
}

// holds is the informer's store: each ConfigMap's value by name.
func (i *configMapInformer) holds() map[string]string {
	held := map[string]string{}
	for _, obj := range i.informer.GetStore().List() {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			held[cm.Name] = cm.Data["value"]
		}
	}
	return held
}

// waitHolds waits until the informer holds exactly want, and returns when it first did.
func (i *configMapInformer) waitHolds(t *testing.T, want map[string]string, timeout time.Duration) time.Time {
	t.Helper()
	err := pollUntil(context.Background(), timeout, func(context.Context) (bool, error) {
		return maps.Equal(i.holds(), want), nil
	})
	if err != nil {
		i.logRequests(t)
		t.Fatalf("the informer %s", describeStaleness(i.holds(), want))
	}
	return time.Now()
}

// describeStaleness says how held differs from want, the truth.
func describeStaleness(held, want map[string]string) string {
	var stale []string
	for _, name := range sortedKeys(held) {
		if value, ok := want[name]; !ok {
			stale = append(stale, fmt.Sprintf("holds %s (%q), which is gone", name, held[name]))
		} else if value != held[name] {
			stale = append(stale, fmt.Sprintf("holds %s as %q, not %q", name, held[name], value))
		}
	}
	for _, name := range sortedKeys(want) {
		if _, ok := held[name]; !ok {
			stale = append(stale, fmt.Sprintf("lacks %s (%q)", name, want[name]))
		}
	}
	if len(stale) == 0 {
		return fmt.Sprintf("holds what etcd holds, %v", held)
	}
	return strings.Join(stale, ", ")
}

// expectRegistry reads, past the API server, the ConfigMaps of the informed namespace that etcd
// holds: want's names, no more.
func expectRegistry(t *testing.T, endpoint string, want map[string]string) {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := "/registry/configmaps/" + informedNamespace + "/"
	resp, err := cl.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, kv := range resp.Kvs {
		names = append(names, strings.TrimPrefix(string(kv.Key), prefix))
	}
	if got, wanted := strings.Join(names, ","), strings.Join(sortedKeys(want), ","); got != wanted {
		t.Errorf("etcd holds the ConfigMaps %s at revision %d, want %s", got, resp.Header.Revision, wanted)
	} else {
		t.Logf("etcd holds the ConfigMaps %s at revision %d", got, resp.Header.Revision)
	}
}
