package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/controllers"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcd/etcdfake"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/test/nativehist"
	"github.com/etcd-database/etcd-operator/test/schedstat"
)

// How many EtcdClusters one operator runs, past what one node holds: N one-member clusters on
// an envtest API server, reconciled by the operator's own manager (newManager: its cache
// filters, workers, rate limiter and client settings) in a process of its own, whose etcd
// members are scripted (etcdfake) and whose pods this benchmark starts, as a kubelet would.
// Once every cluster reports Available and has settled, both it and, side by side, a process
// holding nothing but the same informers (the plainest alternative: list/watch and no
// reconciler) are measured over an idle window, then restarted, which enqueues every cluster at
// once as a resync does. Figures for docs/performance.md.
const (
	// scaleChildEnv makes the test binary one of the measured processes: "operator",
	// "informers" or "etcd-clients".
	scaleChildEnv = "ETCD_OPERATOR_SCALE_CHILD"
	// scaleClustersEnv lists the cluster counts to run, comma-separated (default 100).
	scaleClustersEnv = "SCALE_CLUSTERS"
	// scaleProfileEnv names a directory for the measured processes' CPU profiles (from each
	// mark to its report) and heap profiles (at each report): <mode>-<n>-cpu.pprof and
	// <mode>-<n>-heap.pprof, n counting the reports (the operator's 1: the formation, with no
	// CPU profile; 2: the idle window; the restarted operator's 1: its start until every
	// cluster was reconciled once, also without one).
	scaleProfileEnv = "SCALE_PROFILE"
	// scaleWindowEnv is the idle window, a Go duration (default 60s: two steady-state looks at
	// every cluster).
	scaleWindowEnv = "SCALE_WINDOW"
	// scaleSettle is how long the clusters run after the last one reported Available before
	// the window opens: longer than the steady-state requeue (30 s), so that the quick looks
	// that follow a cluster's formation are over and each cluster is on its steady cadence.
	scaleSettle = 35 * time.Second
	// clustersPerNamespace spreads the clusters over namespaces, as tenants would.
	clustersPerNamespace = 50
	// etcdClusterController is the EtcdCluster controller's name in controller-runtime's metrics.
	etcdClusterController = "etcdcluster"
)

// scaleKinds are the kinds the operator's manager holds informers for, which the bare
// informer process holds too.
func scaleKinds() []client.Object {
	return []client.Object{&etcdv1alpha1.EtcdCluster{}, &etcdv1alpha1.EtcdBackup{}, &etcdv1alpha1.EtcdRestore{},
		&corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &corev1.Service{}, &corev1.Secret{},
		&policyv1.PodDisruptionBudget{}, &batchv1.Job{}}
}

// childReport is what a measured process answers: for "report" and "drain", what happened
// since its last "mark", and its memory now.
type childReport struct {
	Ready      bool             `json:"ready,omitempty"`
	Seconds    float64          `json:"seconds"`
	CPUSeconds float64          `json:"cpuSeconds"`
	Requests   map[string]int64 `json:"requests"` // by "verb resource"
	// Reconciles of EtcdClusters, and those that returned an error.
	Reconciles      int64 `json:"reconciles"`
	ReconcileErrors int64 `json:"reconcileErrors"`
	// ReconcileP50 and ReconcileP99 are upper bounds of controller-runtime's native histogram
	// buckets (factor 1.09), in seconds.
	ReconcileP50 float64 `json:"reconcileP50"`
	ReconcileP99 float64 `json:"reconcileP99"`
	// RunQueueWait is how long the process's threads waited for a CPU (schedstat), in seconds;
	// SchedP99 the 99th percentile of how long its goroutines waited to run once runnable
	// (runtime/metrics /sched/latencies:seconds, a bucket's upper bound): what a reconcile
	// waits that is not its own work.
	RunQueueWait float64 `json:"runQueueWait"`
	SchedP99     float64 `json:"schedP99"`
	HeapLive     uint64  `json:"heapLive"` // heap in use after a full collection
	RSS          uint64  `json:"rss"`      // VmRSS, before that collection
	AnonRSS      uint64  `json:"anonRSS"`  // RssAnon
	PeakRSS      uint64  `json:"peakRSS"`  // VmHWM: the most the process has held, its start and the clusters' formation included
	Goroutines   int     `json:"goroutines"`
	// Writes are the first writes since the mark, path and body.
	Writes []string `json:"writes,omitempty"`
}

// writes counts the requests that change something: create, update, patch, delete.
func (r childReport) writes() int64 {
	var n int64
	for kind, c := range r.Requests {
		switch verb, _, _ := strings.Cut(kind, " "); verb {
		case "create", "update", "patch", "delete", "deletecollection":
			n += c
		}
	}
	return n
}

// reads counts gets and lists (not watches).
func (r childReport) reads() int64 {
	var n int64
	for kind, c := range r.Requests {
		if verb, _, _ := strings.Cut(kind, " "); verb == "get" || verb == "list" {
			n += c
		}
	}
	return n
}

func (r childReport) cpuPercent() float64 { return 100 * r.CPUSeconds / r.Seconds }

func (r childReport) perMinute(count int64) float64 { return float64(count) * 60 / r.Seconds }

// scaleRun is one run's figures.
type scaleRun struct {
	clusters      int
	createSeconds float64 // the create calls
	formSeconds   float64 // first create to every cluster Available
	formation     childReport
	idle          struct{ operator, informers childReport }
	// restart: from each process's start until the operator had reconciled every cluster once
	// and its queue was empty, and until the bare informers had synced.
	restart               struct{ operator, informers childReport }
	loadBefore, loadAfter string
}

func BenchmarkManyClusters(b *testing.B) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		b.Skip("KUBEBUILDER_ASSETS is not set: run with make bench")
	}
	counts, err := clusterCounts(os.Getenv(scaleClustersEnv))
	if err != nil {
		b.Fatal(err)
	}
	window := time.Minute
	if v := os.Getenv(scaleWindowEnv); v != "" {
		if window, err = time.ParseDuration(v); err != nil {
			b.Fatalf("%s: %v", scaleWindowEnv, err)
		}
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	for _, n := range counts {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			var runs []scaleRun
			for range b.N {
				run := runScale(b, n, window)
				run.log(b)
				runs = append(runs, run)
			}
			reportScaleRuns(b, runs)
		})
	}
}

func clusterCounts(list string) ([]int, error) {
	if strings.TrimSpace(list) == "" {
		return []int{100}, nil
	}
	var counts []int
	for _, field := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: want cluster counts, comma-separated", scaleClustersEnv, list)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// runScale runs n clusters on an API server of their own and measures both processes.
func runScale(b *testing.B, n int, window time.Duration) scaleRun {
	b.Helper()
	run := scaleRun{clusters: n, loadBefore: loadAverage()}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	// Every cluster has a ClusterIP Service: envtest's default range holds 256.
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.0.0.0/16")
	cfg, err := env.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kubeconfig := writeKubeconfig(b, env)
	cfg.QPS, cfg.Burst = 1000, 2000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := startKubelet(ctx, b, cfg)
	c := k.client

	operator := startScaleChild(b, "operator", kubeconfig)
	defer operator.stop()

	start := time.Now()
	createClusters(ctx, b, c, n)
	run.createSeconds = time.Since(start).Seconds()
	waitAvailable(ctx, b, k, n, start)
	run.formSeconds = time.Since(start).Seconds()
	run.formation = operator.ask(b, "report")

	informers := startScaleChild(b, "informers", kubeconfig)
	defer informers.stop()
	time.Sleep(scaleSettle)

	operator.ask(b, "mark")
	informers.ask(b, "mark")
	time.Sleep(window)
	run.idle.operator = operator.ask(b, "report")
	run.idle.informers = informers.ask(b, "report")
	// Status stayed truthful through the window: still Available, every one of them.
	if available := countAvailable(ctx, b, k); available != n {
		b.Fatalf("after the idle window %d of %d clusters report Available", available, n)
	}

	// A resync enqueues every cluster at once. So does a restart, whose initial list of each
	// informer enqueues them: measured from the process's start until every cluster has been
	// reconciled once and the queue is empty, side by side with the bare informers' start (the
	// lists' share).
	operator.stop()
	informers.stop()
	restarted := startScaleChild(b, "operator", kubeconfig)
	defer restarted.stop()
	run.restart.operator = restarted.ask(b, "drain "+strconv.Itoa(n))
	restarted.stop()
	informersAgain := startScaleChild(b, "informers", kubeconfig)
	defer informersAgain.stop()
	run.restart.informers = informersAgain.ask(b, "report")
	run.loadAfter = loadAverage()
	return run
}

func (run scaleRun) log(b *testing.B) {
	b.Helper()
	n := float64(run.clusters)
	b.Logf("%d one-member clusters created in %.1f s, all Available %.1f s after the first create; load average %s before, %s after",
		run.clusters, run.createSeconds, run.formSeconds, run.loadBefore, run.loadAfter)
	f := run.formation
	b.Logf("formation: the operator reconciled %d times (%d failed), used %.1f s of CPU, peak RSS %.1f MiB; requests %v",
		f.Reconciles, f.ReconcileErrors, f.CPUSeconds, mib(f.PeakRSS), f.Requests)
	for _, p := range []struct {
		name string
		r    childReport
	}{{"operator ", run.idle.operator}, {"informers", run.idle.informers}} {
		b.Logf("idle %3.0f s, %s: heap %6.1f MiB live after GC, RSS %6.1f MiB (anonymous %6.1f), peak RSS %6.1f MiB; CPU %5.2f %% of a core; %d goroutines",
			p.r.Seconds, p.name, mib(p.r.HeapLive), mib(p.r.RSS), mib(p.r.AnonRSS), mib(p.r.PeakRSS), p.r.cpuPercent(), p.r.Goroutines)
		b.Logf("idle %3.0f s, %s: %d writes (%.3f per cluster per minute), %d reads; requests %v",
			p.r.Seconds, p.name, p.r.writes(), p.r.perMinute(p.r.writes())/n, p.r.reads(), p.r.Requests)
		for _, w := range p.r.Writes {
			b.Logf("idle write: %s", w)
		}
	}
	o := run.idle.operator
	b.Logf("idle %3.0f s, reconciles: %.0f a minute (%.2f per cluster), %d failed; duration p50 ≤ %.1f ms, p99 ≤ %.1f ms; "+
		"the operator's threads waited %.2f s for a CPU, its goroutines' wait to run p99 ≤ %.1f ms",
		o.Seconds, o.perMinute(o.Reconciles), o.perMinute(o.Reconciles)/n, o.ReconcileErrors, 1000*o.ReconcileP50, 1000*o.ReconcileP99,
		o.RunQueueWait, 1000*o.SchedP99)
	w, wi := run.restart.operator, run.restart.informers
	b.Logf("restart: the operator reconciled %d times and its queue was empty %.2f s after its start; CPU %.2f s (%.2f ms a cluster), "+
		"peak RSS %.1f MiB; %d writes; p50 ≤ %.1f ms, p99 ≤ %.1f ms; waited for a CPU %.2f s; requests %v",
		w.Reconciles, w.Seconds, w.CPUSeconds, 1000*w.CPUSeconds/n, mib(w.PeakRSS), w.writes(), 1000*w.ReconcileP50, 1000*w.ReconcileP99,
		w.RunQueueWait, w.Requests)
	b.Logf("restart: the bare informers synced %.2f s after their start; CPU %.2f s (%.2f ms a cluster), peak RSS %.1f MiB; requests %v",
		wi.Seconds, wi.CPUSeconds, 1000*wi.CPUSeconds/n, mib(wi.PeakRSS), wi.Requests)
}

func reportScaleRuns(b *testing.B, runs []scaleRun) {
	mean := func(f func(scaleRun) float64) float64 {
		var sum float64
		for _, r := range runs {
			sum += f(r)
		}
		return sum / float64(len(runs))
	}
	metric := func(name string, f func(scaleRun) float64) { b.ReportMetric(mean(f), name) }
	metric("form-s", func(r scaleRun) float64 { return r.formSeconds })
	metric("operator-rss-MiB", func(r scaleRun) float64 { return mib(r.idle.operator.RSS) })
	metric("operator-heap-MiB", func(r scaleRun) float64 { return mib(r.idle.operator.HeapLive) })
	metric("operator-peak-rss-MiB", func(r scaleRun) float64 { return mib(r.idle.operator.PeakRSS) })
	metric("informers-rss-MiB", func(r scaleRun) float64 { return mib(r.idle.informers.RSS) })
	metric("informers-heap-MiB", func(r scaleRun) float64 { return mib(r.idle.informers.HeapLive) })
	metric("operator-cpu-%", func(r scaleRun) float64 { return r.idle.operator.cpuPercent() })
	metric("informers-cpu-%", func(r scaleRun) float64 { return r.idle.informers.cpuPercent() })
	metric("reconciles/min", func(r scaleRun) float64 { return r.idle.operator.perMinute(r.idle.operator.Reconciles) })
	metric("p50-ms", func(r scaleRun) float64 { return 1000 * r.idle.operator.ReconcileP50 })
	metric("p99-ms", func(r scaleRun) float64 { return 1000 * r.idle.operator.ReconcileP99 })
	metric("idle-writes", func(r scaleRun) float64 { return float64(r.idle.operator.writes()) })
	metric("restart-s", func(r scaleRun) float64 { return r.restart.operator.Seconds })
	metric("restart-cpu-ms/cluster", func(r scaleRun) float64 {
		return 1000 * r.restart.operator.CPUSeconds / float64(r.clusters)
	})
	metric("informers-start-cpu-ms/cluster", func(r scaleRun) float64 {
		return 1000 * r.restart.informers.CPUSeconds / float64(r.clusters)
	})
	metric("restart-writes", func(r scaleRun) float64 { return float64(r.restart.operator.writes()) })
	b.ReportMetric(0, "ns/op")
}

// loadAverage is the machine's load, as uptime says it.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// writeKubeconfig writes a kubeconfig of an admin of env for the measured processes.
func writeKubeconfig(b *testing.B, env *envtest.Environment) string {
	b.Helper()
	admin, err := env.AddUser(envtest.User{Name: "bench", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		b.Fatal(err)
	}
	file := filepath.Join(b.TempDir(), "kubeconfig")
	if err := os.WriteFile(file, kubeconfig, 0o600); err != nil {
		b.Fatal(err)
	}
	return file
}

// scaleNamespace is the namespace of cluster i.
func scaleNamespace(i int) string { return fmt.Sprintf("tenant-%03d", i/clustersPerNamespace) }

// createClusters creates n one-member clusters with ephemeral storage (no claim to bind: the
// benchmark plays no storage provisioner).
func createClusters(ctx context.Context, b *testing.B, c client.Client, n int) {
	b.Helper()
	for ns := range (n + clustersPerNamespace - 1) / clustersPerNamespace {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNamespace(ns * clustersPerNamespace)}}); err != nil {
			b.Fatal(err)
		}
	}
	inParallel(b, n, func(i int) error {
		return c.Create(ctx, &etcdv1alpha1.EtcdCluster{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("etcd-%04d", i), Namespace: scaleNamespace(i)},
			Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 1, Storage: etcdv1alpha1.StorageSpec{Ephemeral: true}},
		})
	})
}

// inParallel calls do for 0..n-1 from 16 goroutines, and fails b with the first error.
func inParallel(b *testing.B, n int, do func(i int) error) {
	b.Helper()
	work := make(chan int)
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				if err := do(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := first.Load(); err != nil {
		b.Fatal(*err)
	}
}

// kubelet plays the kubelet, which envtest does not run: every member pod the operator makes
// runs and is Ready at once, with an IP of its own. It watches through a cache of its own,
// filtered as the operator's is, which also serves the benchmark's reads of the clusters.
type kubelet struct {
	client client.Client
	cache  cache.Cache
	nextIP atomic.Uint32
	starts chan client.ObjectKey
}

func startKubelet(ctx context.Context, b *testing.B, cfg *rest.Config) *kubelet {
	b.Helper()
	scheme := scaleScheme()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	cacheOpts := controllers.CacheOptions(nil)
	cacheOpts.Scheme = scheme
	podCache, err := cache.New(cfg, cacheOpts)
	if err != nil {
		b.Fatal(err)
	}
	k := &kubelet{client: c, cache: podCache, starts: make(chan client.ObjectKey, 1<<16)}
	go func() { _ = podCache.Start(ctx) }()
	informer, err := podCache.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := podCache.GetInformer(ctx, &etcdv1alpha1.EtcdCluster{}); err != nil {
		b.Fatal(err)
	}
	notStarted := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Status.PodIP == "" && pod.DeletionTimestamp.IsZero() {
			k.starts <- client.ObjectKeyFromObject(pod)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    notStarted,
		UpdateFunc: func(_, obj any) { notStarted(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	for range 8 {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case key := <-k.starts:
					if err := k.start(ctx, key); err != nil && ctx.Err() == nil {
						b.Errorf("start pod %s: %v", key, err)
					}
				}
			}
		}()
	}
	return k
}

// start makes a pod Running and Ready, read afresh so that a change since the event is kept.
func (k *kubelet) start(ctx context.Context, key client.ObjectKey) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := &corev1.Pod{}
		if err := k.client.Get(ctx, key, pod); err != nil {
			return client.IgnoreNotFound(err)
		}
		if pod.Status.PodIP != "" || !pod.DeletionTimestamp.IsZero() {
			return nil
		}
		n := k.nextIP.Add(1)
		ip := fmt.Sprintf("10.%d.%d.%d", n>>16&0xff, n>>8&0xff, n&0xff)
		now := metav1.Now()
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "etcd", Ready: true, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
		return k.client.Status().Update(ctx, pod)
	})
}

// waitAvailable waits until every cluster reports Available for its current generation.
func waitAvailable(ctx context.Context, b *testing.B, k *kubelet, n int, start time.Time) {
	b.Helper()
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*300*time.Millisecond)
	for {
		available := countAvailable(ctx, b, k)
		if available == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d clusters Available %s after the first create", available, n, time.Since(start).Round(time.Second))
		}
		time.Sleep(time.Second)
	}
}

// countAvailable counts the clusters whose status says Available, for their generation, with a
// cluster ID: what the reconciler writes only from etcd's own answers.
func countAvailable(ctx context.Context, b *testing.B, k *kubelet) int {
	b.Helper()
	list := &etcdv1alpha1.EtcdClusterList{}
	if err := k.cache.List(ctx, list); err != nil {
		b.Fatal(err)
	}
	available := 0
	for _, c := range list.Items {
		cond := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionAvailable)
		if cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == c.Generation && c.Status.ClusterID != "" {
			available++
		}
	}
	return available
}

// scaleChild is a measured process: this test binary, run again as the operator's manager or
// as bare informers, told what to do on its stdin, answering one JSON line each.
type scaleChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startScaleChild(b *testing.B, mode, kubeconfig string) *scaleChild {
	b.Helper()
	return startScaleChildWith(b, mode, kubeconfig)
}

func startScaleChildWith(b *testing.B, mode, kubeconfig string, env ...string) *scaleChild {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), scaleChildEnv+"="+mode, "KUBECONFIG="+kubeconfig)
	// Its logs (errors only) go to a file, whose end is shown if the run fails.
	logs, err := os.Create(filepath.Join(b.TempDir(), mode+".log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = logs
	b.Cleanup(func() {
		_ = logs.Close()
		if b.Failed() {
			data, _ := os.ReadFile(logs.Name())
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			b.Logf("%s's last log lines:\n%s", mode, strings.Join(lines[max(0, len(lines)-10):], "\n"))
		}
	})
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	child := &scaleChild{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	child.out.Buffer(make([]byte, 1<<20), 1<<20)
	if ready := child.read(b); !ready.Ready {
		b.Fatalf("%s: not ready", mode)
	}
	return child
}

func (c *scaleChild) ask(b *testing.B, command string) childReport {
	b.Helper()
	if _, err := fmt.Fprintln(c.in, command); err != nil {
		b.Fatal(err)
	}
	return c.read(b)
}

func (c *scaleChild) read(b *testing.B) childReport {
	b.Helper()
	if !c.out.Scan() {
		b.Fatalf("%s: no answer: %v", c.cmd.Env[len(c.cmd.Env)-2], c.out.Err())
	}
	var r childReport
	if err := json.Unmarshal(c.out.Bytes(), &r); err != nil {
		b.Fatalf("answer %q: %v", c.out.Bytes(), err)
	}
	return r
}

// stop ends the process: it exits when its stdin closes.
func (c *scaleChild) stop() {
	_ = c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// runScaleChild is a measured process: the operator's manager with scripted etcd members, or
// the bare informers. Every request it sends the API server is counted.
func runScaleChild(mode string) int {
	if mode == "etcd-clients" {
		return holdEtcdClients()
	}
	started := time.Now()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	requests := &requestCounter{counts: map[string]int64{}}
	cfg.Wrap(requests.wrap)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reader cache.Cache
	switch mode {
	case "operator":
		members := &scriptedMembers{clusters: map[string]*etcdfake.Cluster{}}
		mgr, err := newManager(cfg, options{metricsAddr: "0", probeAddr: "0", etcdDial: members.dial}, controllers.CacheOptions(nil))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			if err := mgr.Start(ctx); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}()
		reader = mgr.GetCache()
	case "informers":
		opts := controllers.CacheOptions(nil)
		opts.Scheme = scaleScheme()
		c, err := cache.New(cfg, opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() { _ = c.Start(ctx) }()
		reader = c
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want operator or informers\n", scaleChildEnv, mode)
		return 2
	}
	// The operator's controllers hold all these informers. Getting one waits for its sync
	// only once the cache has started, which runs apart: WaitForCacheSync waits for both.
	for _, obj := range scaleKinds() {
		if _, err := reader.GetInformer(ctx, obj); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if !reader.WaitForCacheSync(ctx) {
		fmt.Fprintln(os.Stderr, "the informers did not sync")
		return 1
	}
	// Until the first mark, what it reports counts from its start (CPU time, requests and
	// reconciles all start at zero).
	probe := &scaleProbe{requests: requests, mode: mode, profileDir: os.Getenv(scaleProfileEnv), mark: probeSnapshot{at: started}}
	return probe.serve(os.Stdin, os.Stdout)
}

// scaleProbe measures its own process between a mark and a report.
type scaleProbe struct {
	requests *requestCounter
	mark     probeSnapshot
	// mode and profileDir: where, if anywhere, its profiles go; reports counts them.
	mode, profileDir string
	reports          int
	profiling        *os.File
}

type probeSnapshot struct {
	at              time.Time
	cpu             time.Duration
	requests        map[string]int64
	reconciles      int64
	reconcileErrors int64
	durations       nativehist.Histogram
	runQueueWait    time.Duration
	schedLatencies  *metrics.Float64Histogram
}

func (p *scaleProbe) snapshot() probeSnapshot {
	s := probeSnapshot{at: time.Now(), cpu: processCPU(), requests: p.requests.snapshot(),
		runQueueWait: schedstat.RunQueueWait("self"), schedLatencies: schedLatencies()}
	families, _ := crmetrics.Registry.Gather()
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if labelOf(m, "controller") != etcdClusterController {
				continue
			}
			switch f.GetName() {
			case "controller_runtime_reconcile_total":
				s.reconciles += int64(m.GetCounter().GetValue())
			case "controller_runtime_reconcile_errors_total":
				s.reconcileErrors += int64(m.GetCounter().GetValue())
			case "controller_runtime_reconcile_time_seconds":
				s.durations = nativehist.Of(m.GetHistogram())
			}
		}
	}
	return s
}

// queueIdle: the EtcdCluster controller has nothing queued and no reconcile running.
func queueIdle() bool {
	families, _ := crmetrics.Registry.Gather()
	busy := 0.0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case f.GetName() == "workqueue_depth" && labelOf(m, "name") == etcdClusterController:
				busy += m.GetGauge().GetValue()
			case f.GetName() == "controller_runtime_active_workers" && labelOf(m, "controller") == etcdClusterController:
				busy += m.GetGauge().GetValue()
			}
		}
	}
	return busy == 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// serve answers the benchmark: "mark" starts a measurement; "report" ends it; "drain <n>" ends
// it once at least n reconciles have run since the mark and the queue is empty. Its stdin
// closing ends the process.
func (p *scaleProbe) serve(in io.Reader, out io.Writer) int {
	enc := json.NewEncoder(out)
	if err := enc.Encode(childReport{Ready: true}); err != nil {
		return 1
	}
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		command, arg, _ := strings.Cut(lines.Text(), " ")
		var answer childReport
		switch command {
		case "mark":
			p.startProfile()
			p.mark = p.snapshot()
			p.requests.takeWrites()
		case "report":
			answer = p.report()
		case "drain":
			n, _ := strconv.ParseInt(arg, 10, 64)
			deadline := time.Now().Add(10 * time.Minute)
			for time.Now().Before(deadline) {
				s := p.snapshot()
				if s.reconciles-p.mark.reconciles >= n && queueIdle() {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			answer = p.report()
		default:
			fmt.Fprintf(os.Stderr, "unknown command %q\n", lines.Text())
			return 2
		}
		if err := enc.Encode(answer); err != nil {
			return 1
		}
	}
	return 0
}

// startProfile starts a CPU profile, if profiles are asked for.
func (p *scaleProbe) startProfile() {
	if p.profileDir == "" || p.profiling != nil {
		return
	}
	f, err := os.Create(filepath.Join(p.profileDir, fmt.Sprintf("%s-%d-cpu.pprof", p.mode, p.reports+1)))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpu profile:", err)
		return
	}
	p.profiling = f
}

// endProfile ends the CPU profile, if one runs, and writes a heap profile.
func (p *scaleProbe) endProfile() {
	if p.profiling == nil {
		return
	}
	pprof.StopCPUProfile()
	_ = p.profiling.Close()
	p.profiling = nil
	if f, err := os.Create(filepath.Join(p.profileDir, fmt.Sprintf("%s-%d-heap.pprof", p.mode, p.reports))); err == nil {
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		_ = f.Close()
	}
}

func (p *scaleProbe) report() childReport {
	p.reports++
	s := p.snapshot()
	defer p.endProfile()
	r := childReport{
		Seconds:         s.at.Sub(p.mark.at).Seconds(),
		CPUSeconds:      (s.cpu - p.mark.cpu).Seconds(),
		Requests:        map[string]int64{},
		Reconciles:      s.reconciles - p.mark.reconciles,
		ReconcileErrors: s.reconcileErrors - p.mark.reconcileErrors,
		Goroutines:      runtime.NumGoroutine(),
		Writes:          p.requests.takeWrites(),
	}
	for kind, n := range s.requests {
		if d := n - p.mark.requests[kind]; d > 0 {
			r.Requests[kind] = d
		}
	}
	r.RunQueueWait = (s.runQueueWait - p.mark.runQueueWait).Seconds()
	r.SchedP99 = histogramQuantile(s.schedLatencies, p.mark.schedLatencies, 0.99)
	window := s.durations.Minus(p.mark.durations)
	r.ReconcileP50, r.ReconcileP99 = window.Quantile(0.5), window.Quantile(0.99)
	r.RSS, r.AnonRSS, r.PeakRSS = procStatus("/proc/self/status", "VmRSS"), procStatus("/proc/self/status", "RssAnon"), procStatus("/proc/self/status", "VmHWM")
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	r.HeapLive = stats.HeapAlloc
	return r
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// schedLatencies is the runtime's histogram of how long goroutines waited to run, since start.
func schedLatencies() *metrics.Float64Histogram {
	sample := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return sample[0].Value.Float64Histogram()
}

// histogramQuantile is the upper bound of the bucket holding the q-quantile of what a runtime
// histogram counted between earlier and later.
func histogramQuantile(later, earlier *metrics.Float64Histogram, q float64) float64 {
	if later == nil {
		return 0
	}
	if earlier == nil {
		earlier = &metrics.Float64Histogram{Counts: make([]uint64, len(later.Counts))}
	}
	if len(later.Counts) != len(earlier.Counts) {
		return 0
	}
	var total uint64
	for i := range later.Counts {
		total += later.Counts[i] - earlier.Counts[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range later.Counts {
		if seen += later.Counts[i] - earlier.Counts[i]; seen >= rank {
			return later.Buckets[i+1]
		}
	}
	return math.Inf(1)
}

// requestCounter counts the requests sent through a rest.Config, by verb and resource.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int64
	// writes holds the first few writes' paths and bodies since the last mark: what an idle
	// operator wrote, should it write.
	writes []string
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (c *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		kind := requestKind(req.Method, req.URL)
		sample := ""
		if req.Method != http.MethodGet && req.GetBody != nil {
			if body, err := req.GetBody(); err == nil {
				data, _ := io.ReadAll(io.LimitReader(body, 2048))
				sample = req.Method + " " + req.URL.Path + " " + string(data)
			}
		}
		c.mu.Lock()
		c.counts[kind]++
		if sample != "" && len(c.writes) < 5 {
			c.writes = append(c.writes, sample)
		}
		c.mu.Unlock()
		return next.RoundTrip(req)
	})
}

func (c *requestCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// takeWrites returns the writes sampled since it was last called, and starts afresh.
func (c *requestCounter) takeWrites() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	writes := c.writes
	c.writes = nil
	return writes
}

// requestKind is a request's verb, as the API server's audit log names it, and its resource:
// "patch etcdclusters/status", "watch pods", "discovery" for the rest.
func requestKind(method string, u *url.URL) string {
	segments := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch {
	case len(segments) > 2 && segments[0] == "api":
		segments = segments[2:]
	case len(segments) > 3 && segments[0] == "apis":
		segments = segments[3:]
	default:
		return "discovery"
	}
	if segments[0] == "namespaces" && len(segments) > 2 {
		segments = segments[2:]
	}
	resource, named := segments[0], len(segments) > 1
	if len(segments) > 2 {
		resource += "/" + segments[2]
	}
	verb := ""
	switch method {
	case http.MethodGet:
		switch {
		case u.Query().Get("watch") == "true" || u.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	return verb + " " + resource
}

// scriptedMembers answers for every cluster's members: a one-member cluster whose member runs
// where its pod does. A cluster's scripted etcd is made at its first dial, from the client URLs
// the reconciler dials (those of the member pods that have an IP), and answers from then on as
// a healthy etcd of those members does; the reconciler's own status, conditions and decisions
// come from its answers, as from real etcd's.
type scriptedMembers struct {
	mu       sync.Mutex
	clusters map[string]*etcdfake.Cluster // by the peer Service's domain
}

func (s *scriptedMembers) dial(cfg etcd.Config) (etcd.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("scripted etcd: no endpoint")
	}
	domain, err := peerDomain(cfg.Endpoints[0])
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	f := s.clusters[domain]
	if f == nil {
		if f, err = newScriptedCluster(domain, cfg.Endpoints); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.clusters[domain] = f
	}
	s.mu.Unlock()
	for _, endpoint := range cfg.Endpoints {
		if _, known := f.Statuses[endpoint]; !known {
			// Members are fixed when the cluster is made (it is read unlocked below): a
			// benchmark that grows clusters needs a fake that adds members as etcd does.
			return nil, fmt.Errorf("scripted etcd: %s is no member of %s", endpoint, domain)
		}
	}
	cl, err := f.Dial(cfg)
	if err != nil {
		return nil, err
	}
	return hashingMember{cl}, nil
}

// peerDomain is the peer Service's domain of a member's client URL
// (<member>.<cluster>-peer.<namespace>.svc).
func peerDomain(clientURL string) (string, error) {
	u, err := url.Parse(clientURL)
	if err != nil {
		return "", err
	}
	_, domain, ok := strings.Cut(u.Hostname(), ".")
	if !ok {
		return "", fmt.Errorf("scripted etcd: %s names no member", clientURL)
	}
	return domain, nil
}

func newScriptedCluster(domain string, endpoints []string) (*etcdfake.Cluster, error) {
	f := &etcdfake.Cluster{ID: hash64(domain), Statuses: map[string]etcd.MemberStatus{}}
	for _, endpoint := range endpoints {
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, err
		}
		name, _, _ := strings.Cut(u.Hostname(), ".")
		id := hash64(endpoint)
		peer := (&url.URL{Scheme: u.Scheme, Host: u.Hostname() + ":" + strconv.Itoa(resources.PeerPort)}).String()
		f.Members = append(f.Members, etcd.Member{ID: id, Name: name, PeerURLs: []string{peer}, ClientURLs: []string{endpoint}})
	}
	leader := f.Members[0].ID
	for _, m := range f.Members {
		f.Statuses[m.ClientURLs[0]] = etcd.MemberStatus{MemberID: m.ID, LeaderID: leader, Version: etcdv1alpha1.DefaultEtcdVersion,
			Revision: 10, RaftIndex: 10, RaftAppliedIndex: 10, RaftTerm: 2, DBSizeBytes: 1 << 20, DBSizeInUseBytes: 1 << 20}
	}
	return f, nil
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// hashingMember answers the keyspace comparison the reconciler runs on a cluster's first
// settled look (etcdfake leaves it to the real-etcd tests): every member's keyspace the same.
type hashingMember struct{ etcd.Client }

func (hashingMember) KeyspaceAt(_ context.Context, _ string, revision int64) (etcd.KeyspaceDigest, error) {
	return etcd.KeyspaceDigest{Revision: revision, Hash: 1}, nil
}

// scaleScheme holds the kinds the benchmark and the bare informers read.
func scaleScheme() *k8sruntime.Scheme {
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(etcdv1alpha1.AddToScheme(scheme))
	return scheme
}

// scaleEtcdEndpointEnv gives the "etcd-clients" process the client URLs of the real etcd
// members it connects to, comma-separated.
const scaleEtcdEndpointEnv = "SCALE_ETCD_ENDPOINT"

// BenchmarkEtcdClientsPerCluster measures what BenchmarkManyClusters's scripted members stand
// in for: the operator keeps one etcd client per cluster (etcd.Cache), each with its own gRPC
// connection to the cluster's members and, where the cluster has more than one member, one kept
// connection per member to ask each about itself. A process of its own holds one such client per
// cluster of SCALE_CLUSTERS, all connected to real etcd on loopback — one server, as for
// one-member clusters, then a cluster of three, each client knowing the three — each having
// listed the members and asked every member's status once, as a steady-state look does; its
// memory is read before and after.
func BenchmarkEtcdClientsPerCluster(b *testing.B) {
	if os.Getenv("ETCD_BIN") == "" {
		b.Skip("ETCD_BIN is not set: run with make bench")
	}
	counts, err := clusterCounts(os.Getenv(scaleClustersEnv))
	if err != nil {
		b.Fatal(err)
	}
	for _, members := range []int{1, 3} {
		var endpoints []string
		for _, server := range etcdtest.StartCluster(b, members) {
			endpoints = append(endpoints, server.ClientURL)
		}
		for _, n := range counts {
			b.Run(fmt.Sprintf("members=%d/clusters=%d", members, n), func(b *testing.B) {
				var heap, anon float64
				for range b.N {
					child := startScaleChildWith(b, "etcd-clients", "", scaleEtcdEndpointEnv+"="+strings.Join(endpoints, ","))
					before := child.ask(b, "report")
					after := child.ask(b, "dial "+strconv.Itoa(n))
					child.stop()
					b.Logf("%d etcd clients of %d members: heap %.1f → %.1f MiB live after GC (%.1f KiB a client), anonymous RSS %.1f → %.1f MiB (%.1f KiB a client), %d → %d goroutines; dialled and asked in %.2f s; load average %s",
						n, members, mib(before.HeapLive), mib(after.HeapLive), float64(after.HeapLive-before.HeapLive)/1024/float64(n),
						mib(before.AnonRSS), mib(after.AnonRSS), float64(after.AnonRSS-before.AnonRSS)/1024/float64(n),
						before.Goroutines, after.Goroutines, after.Seconds, loadAverage())
					heap += float64(after.HeapLive-before.HeapLive) / 1024 / float64(n)
					anon += float64(after.AnonRSS-before.AnonRSS) / 1024 / float64(n)
				}
				b.ReportMetric(heap/float64(b.N), "heap-KiB/client")
				b.ReportMetric(anon/float64(b.N), "anon-rss-KiB/client")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// holdEtcdClients answers "report" with its memory and "dial <n>" by connecting n clients as
// the reconciler does (one etcd.Cache entry per cluster), each to every member of the
// SCALE_ETCD_ENDPOINT list, listing the members and asking each member's status, then reporting
// its memory with them all held.
func holdEtcdClients() int {
	endpoints := strings.Split(os.Getenv(scaleEtcdEndpointEnv), ",")
	clients := etcd.NewCache()
	probe := &scaleProbe{requests: &requestCounter{counts: map[string]int64{}}, mark: probeSnapshot{at: time.Now()}}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(childReport{Ready: true}); err != nil {
		return 1
	}
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		command, arg, _ := strings.Cut(lines.Text(), " ")
		switch command {
		case "report":
		case "dial":
			n, _ := strconv.Atoi(arg)
			probe.mark = probeSnapshot{at: time.Now()}
			for i := range n {
				cl, err := clients.Get(fmt.Sprintf("tenant/etcd-%04d", i), etcd.Config{Endpoints: endpoints})
				if err == nil {
					_, _, err = cl.Members(context.Background())
				}
				for _, endpoint := range endpoints {
					if err == nil {
						_, err = cl.Status(context.Background(), endpoint)
					}
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
		default:
			return 2
		}
		if err := enc.Encode(probe.report()); err != nil {
			return 1
		}
	}
	return 0
}
