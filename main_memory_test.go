package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/etcd-database/etcd-operator/controllers"
)

// The manager's memory with many objects in the cluster that are not the operator's, measured
// side by side in the same run: the manager as it runs (controllers.CacheOptions) and the same
// manager with controller-runtime's default cache, which holds every object of each kind it
// watches (what the operator did before), each run as a process of its own (this test binary
// started again, so that it can report its heap); and the operator's own binary, as the image
// runs it, whose resident set is what its memory limit must hold. All run against one envtest
// API server; figures for docs/performance.md.
const (
	// memoryChildEnv makes the test binary a manager that reports its memory: "operator" or
	// "default", the cache it is given.
	memoryChildEnv = "ETCD_OPERATOR_MEMORY_CHILD"
	// unrelatedObjects of each kind (Secrets, Pods), unrelatedSize bytes of payload each.
	unrelatedObjects = 2000
	unrelatedSize    = 10 << 10
	// settle is how long the manager runs after its caches have synced before it is measured.
	settle = 5 * time.Second
)

func TestMain(m *testing.M) {
	if cacheKind := os.Getenv(memoryChildEnv); cacheKind != "" {
		os.Exit(reportManagerMemory(cacheKind))
	}
	if mode := os.Getenv(scaleChildEnv); mode != "" {
		os.Exit(runScaleChild(mode))
	}
	code := m.Run()
	if unrelated.env != nil {
		_ = unrelated.env.Stop()
	}
	for _, file := range []string{unrelated.kubeconfig, unrelated.binary} {
		if file != "" {
			_ = os.RemoveAll(filepath.Dir(file))
		}
	}
	os.Exit(code)
}

// unrelated is the API server the benchmark's managers run against, filled once, and the
// operator's binary: the testing package calls a benchmark more than once.
var unrelated struct {
	once       sync.Once
	env        *envtest.Environment
	kubeconfig string
	binary     string
	err        error
}

// managerMemory is what a measured manager reports, in bytes.
type managerMemory struct {
	HeapLive uint64 // heap in use after a full collection: what the cache and the rest hold
	RSS      uint64 // resident set before that collection (VmRSS)
	AnonRSS  uint64 // its anonymous part (RssAnon): the heap and stacks, not the binary's pages
	PeakRSS  uint64 // high-water mark of the resident set (VmHWM)
}

func BenchmarkManagerMemory(b *testing.B) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		b.Skip("KUBEBUILDER_ASSETS is not set: run with make bench")
	}
	unrelated.once.Do(func() {
		if unrelated.binary, unrelated.err = buildManager(); unrelated.err == nil {
			unrelated.kubeconfig, unrelated.err = startUnrelatedCluster(b)
		}
	})
	if unrelated.err != nil {
		b.Fatal(unrelated.err)
	}
	sums := map[string]*managerMemory{"operator": {}, "default": {}, "binary": {}}
	b.ResetTimer()
	for i := range b.N {
		// The order rotates, so that none always runs on a warmer API server.
		order := []string{"operator", "default", "binary"}
		order = append(order[i%3:], order[:i%3]...)
		for _, kind := range order {
			var m managerMemory
			if kind == "binary" {
				m = runManagerBinary(b, unrelated.binary, unrelated.kubeconfig)
				b.Logf("%-8s       : RSS %5.1f MiB (anonymous %5.1f), peak RSS %5.1f MiB", kind, mib(m.RSS), mib(m.AnonRSS), mib(m.PeakRSS))
			} else {
				m = runMeasuredManager(b, kind, unrelated.kubeconfig)
				b.Logf("%-8s cache: heap %5.1f MiB live after GC, RSS %5.1f MiB (anonymous %5.1f), peak RSS %5.1f MiB",
					kind, mib(m.HeapLive), mib(m.RSS), mib(m.AnonRSS), mib(m.PeakRSS))
			}
			sums[kind].HeapLive += m.HeapLive
			sums[kind].RSS += m.RSS
			sums[kind].AnonRSS += m.AnonRSS
			sums[kind].PeakRSS += m.PeakRSS
		}
	}
	for kind, sum := range sums {
		if kind != "binary" {
			b.ReportMetric(mib(sum.HeapLive)/float64(b.N), kind+"-heap-MiB")
		}
		b.ReportMetric(mib(sum.RSS)/float64(b.N), kind+"-rss-MiB")
		b.ReportMetric(mib(sum.AnonRSS)/float64(b.N), kind+"-anon-rss-MiB")
		b.ReportMetric(mib(sum.PeakRSS)/float64(b.N), kind+"-peak-rss-MiB")
	}
}

// buildManager builds the operator's binary as `make build` does, into a directory of its own.
func buildManager() (string, error) {
	dir, err := os.MkdirTemp("", "manager-binary-")
	if err != nil {
		return "", err
	}
	binary := filepath.Join(dir, "manager")
	cmd := exec.Command("go", "build", "-o", binary, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return binary, nil
}

// runManagerBinary runs the operator's binary until its three controllers have started their
// workers (after their caches synced) and it has settled, and reads its memory from /proc.
func runManagerBinary(b *testing.B, binary, kubeconfig string) managerMemory {
	b.Helper()
	cmd := exec.Command(binary, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	logs, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	started := make(chan struct{})
	go func() {
		workers := 0
		s := bufio.NewScanner(logs)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			if strings.Contains(s.Text(), "Starting workers") {
				if workers++; workers == 3 {
					close(started)
				}
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(3 * time.Minute):
		b.Fatal("the manager's three controllers did not start their workers within 3 minutes")
	}
	time.Sleep(settle)
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	return managerMemory{RSS: procStatus(status, "VmRSS"), AnonRSS: procStatus(status, "RssAnon"), PeakRSS: procStatus(status, "VmHWM")}
}

func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

// startUnrelatedCluster starts an API server with the operator's CRDs and objects that are not
// the operator's, and returns the path of a kubeconfig for it (once written, also with an error,
// so that it is removed).
func startUnrelatedCluster(b *testing.B) (string, error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	unrelated.env = &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := unrelated.env.Start()
	if err != nil {
		return "", err
	}
	admin, err := unrelated.env.AddUser(envtest.User{Name: "bench", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "manager-memory-")
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(file, kubeconfig, 0o600); err != nil {
		return file, err
	}
	start := time.Now()
	if err := createUnrelatedObjects(cfg); err != nil {
		return file, err
	}
	b.Logf("%d Secrets and %d Pods of %d KiB each, in a namespace of their own, made in %s",
		unrelatedObjects, unrelatedObjects, unrelatedSize>>10, time.Since(start).Round(time.Second))
	return file, nil
}

// createUnrelatedObjects fills a namespace with Secrets and Pods (and one of each other kind
// the operator watches) that are not the operator's, as other workloads would.
func createUnrelatedObjects(cfg *rest.Config) error {
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}}
	if err := c.Create(ctx, ns); err != nil {
		return err
	}
	payload := strings.Repeat("x", unrelatedSize)
	container := corev1.Container{Name: "app", Image: "registry.test/app:1"}
	objectsOf := func(i int) []client.Object {
		meta := metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: ns.Name}
		podMeta := *meta.DeepCopy()
		podMeta.Annotations = map[string]string{"example.com/config": payload}
		return []client.Object{
			&corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"blob": []byte(payload)}},
			&corev1.Pod{ObjectMeta: podMeta, Spec: corev1.PodSpec{Containers: []corev1.Container{container}}},
		}
	}
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				for _, obj := range objectsOf(i) {
					if err := c.Create(ctx, obj); err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				}
			}
		})
	}
	for i := range unrelatedObjects {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	others := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns.Name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns.Name}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns.Name}, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{container}}}}},
	}
	for _, obj := range others {
		if err := c.Create(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// runMeasuredManager starts this test binary as a manager with the given cache and returns
// the memory it reports.
func runMeasuredManager(b *testing.B, cacheKind, kubeconfig string) managerMemory {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), memoryChildEnv+"="+cacheKind, "KUBECONFIG="+kubeconfig)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("manager with the %s cache: %v", cacheKind, err)
	}
	var m managerMemory
	if err := json.Unmarshal(out, &m); err != nil {
		b.Fatalf("manager with the %s cache reported %q: %v", cacheKind, out, err)
	}
	return m
}

// reportManagerMemory runs the operator's manager with the given cache until its informers
// have synced and it has settled, then writes its memory to stdout as JSON.
func reportManagerMemory(cacheKind string) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	cacheOptions := controllers.CacheOptions(nil)
	if cacheKind == "default" {
		cacheOptions = cache.Options{}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := newManager(cfg, options{metricsAddr: "0", probeAddr: "0"}, cacheOptions)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}()
	// The controllers start these informers; getting them waits until each has synced.
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.Pod{}, &corev1.PersistentVolumeClaim{},
		&corev1.Service{}, &policyv1.PodDisruptionBudget{}, &batchv1.Job{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	time.Sleep(settle)
	var m managerMemory
	m.RSS, m.AnonRSS, m.PeakRSS = procStatus("/proc/self/status", "VmRSS"), procStatus("/proc/self/status", "RssAnon"), procStatus("/proc/self/status", "VmHWM")
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	m.HeapLive = stats.HeapAlloc
	if err := json.NewEncoder(os.Stdout).Encode(m); err != nil {
		return 1
	}
	return 0
}

// procStatus is a size field of a process's status file, in bytes.
func procStatus(file, field string) uint64 {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
