//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/test/nativehist"
)

// BenchmarkClustersOnOneNode: one operator running BENCH_CLUSTERS (100) one-member clusters on
// ephemeral storage with small requests, so that they fit one node (its kubelet holds ~110
// pods). Once all are Available it measures an idle window (BENCH_SCALE_IDLE, 5 min): the
// manager's memory and CPU (the kubelet's summary API), its reconciles and their durations and
// its API requests by verb (its own metrics endpoint, read with a token allowed /metrics), the
// writes the API server's audit log shows in the clusters' namespace, and the etcd calls the
// members served. Then it crashes one member (every process of its pod killed: the kubelet
// restarts it on its data) and times its cluster back to Available, and then twenty at once and
// times until all are Available again. Side by side: the same figures before the clusters exist,
// the operator idle with none. BENCH_PROFILE=<dir> writes the operator's CPU profile of each idle
// window there (the operator restarted with PPROF_BIND_ADDRESS first, and without it after).
func BenchmarkClustersOnOneNode(b *testing.B) {
	n, err := strconv.Atoi(envOr("BENCH_CLUSTERS", "100"))
	if err != nil {
		b.Fatalf("BENCH_CLUSTERS: %v", err)
	}
	idle := envDuration("BENCH_SCALE_IDLE", 5*time.Minute)
	profiles := os.Getenv("BENCH_PROFILE")
	if profiles != "" {
		setOperatorEnv(b, corev1.EnvVar{Name: "PPROF_BIND_ADDRESS", Value: fmt.Sprintf(":%d", benchPprofPort)})
	}
	scrape := newOperatorScraper(b)
	for run := range b.N {
		waitForNoClusters(b, 15*time.Minute)
		empty := measureIdle(b, scrape, "", idle, profilePath(profiles, run, "no-clusters"))
		b.Logf("no clusters: %s", empty)

		ns := benchNamespace(b)
		start := time.Now()
		clusters := make([]*etcdv1alpha1.EtcdCluster, n)
		for i := range clusters {
			clusters[i] = &etcdv1alpha1.EtcdCluster{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("many-%03d", i), Namespace: ns},
				Spec: etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: etcdVersion, Storage: etcdv1alpha1.StorageSpec{Ephemeral: true},
					PodTemplate: etcdv1alpha1.PodTemplate{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("32Mi")}}}},
			}
			if err := k8sClient.Create(context.Background(), clusters[i]); err != nil {
				b.Fatal(err)
			}
		}
		waitAllAvailable(b, ns, n, 20*time.Minute)
		b.Logf("%d clusters created and Available in %v", n, time.Since(start).Round(time.Second))
		b.ReportMetric(time.Since(start).Seconds(), "all-available-s")
		time.Sleep(30 * time.Second) // the last status writes and first backups of settling

		busy := measureIdle(b, scrape, ns, idle, profilePath(profiles, run, fmt.Sprintf("%d-clusters", n)))
		b.Logf("%d clusters idle: %s", n, busy)
		b.ReportMetric(busy.rssMiB, "rss-MiB")
		b.ReportMetric(busy.cpuPercent, "idle-cpu-%core")
		b.ReportMetric(busy.reconcilesPerMin, "reconciles/min")
		b.ReportMetric(busy.p50*1000, "p50-reconcile-ms")
		b.ReportMetric(busy.p99*1000, "p99-reconcile-ms")
		b.ReportMetric(float64(busy.auditedWrites), "writes/idle-window")
		b.ReportMetric(busy.apiRequestsPerMin/float64(n), "api-requests/min/cluster")
		b.ReportMetric(busy.etcdCallsPerMin/float64(n), "etcd-calls/min/cluster")

		single := recoverFromCrash(b, ns, n, clusters[:1])
		b.Logf("one member crashed: its cluster Available again after %v", single.Round(100*time.Millisecond))
		all := recoverFromCrash(b, ns, n, clusters[1:21])
		printBenchLine("twenty members crashed at once: all %d Available again after %v (%.2f× the single crash)", n, all.Round(100*time.Millisecond), all.Seconds()/single.Seconds())
		b.ReportMetric(single.Seconds(), "one-crash-recovery-s")
		b.ReportMetric(all.Seconds(), "twenty-crashes-recovery-s")
		if err := k8sClient.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
	}
}

// waitForNoClusters waits until no EtcdCluster and no member pod is left, in any namespace:
// neither the window with no clusters nor the one with n may include the teardown of an
// earlier run's (a namespace of 100 clusters being deleted keeps the operator and the node
// busy for minutes).
func waitForNoClusters(b *testing.B, timeout time.Duration) {
	b.Helper()
	start := time.Now()
	for {
		clusters, pods := &etcdv1alpha1.EtcdClusterList{}, &corev1.PodList{}
		if err := k8sClient.List(context.Background(), clusters); err != nil {
			b.Fatal(err)
		}
		if err := k8sClient.List(context.Background(), pods, client.HasLabels{resources.LabelCluster}); err != nil {
			b.Fatal(err)
		}
		if len(clusters.Items) == 0 && len(pods.Items) == 0 {
			if waited := time.Since(start); waited > time.Second {
				b.Logf("waited %v for earlier clusters to be gone", waited.Round(time.Second))
			}
			return
		}
		if time.Since(start) > timeout {
			b.Fatalf("%d EtcdClusters and %d member pods still there after %v", len(clusters.Items), len(pods.Items), timeout)
		}
		time.Sleep(2 * time.Second)
	}
}

// idleFigures are what an idle window showed.
type idleFigures struct {
	rssMiB, workingSetMiB, cpuPercent, reconcilesPerMin, p50, p99 float64
	apiRequestsPerMin, apiWritesPerMin, etcdCallsPerMin           float64
	auditedWrites                                                 int
	tail                                                          tail
}

func (f idleFigures) String() string {
	return fmt.Sprintf("RSS %.1f MiB (working set %.1f), CPU %.2f%% of a core, %.1f reconciles/min (p50 ≤ %.1f ms, p99 ≤ %.1f ms), API %.1f requests/min (%.1f writes/min by its client), %d writes audited in the namespace, etcd %.1f calls/min",
		f.rssMiB, f.workingSetMiB, f.cpuPercent, f.reconcilesPerMin, f.p50*1000, f.p99*1000, f.apiRequestsPerMin, f.apiWritesPerMin, f.auditedWrites, f.etcdCallsPerMin) +
		"; " + f.tail.String()
}

// measureIdle measures the operator over window; ns names the clusters' namespace, whose writes
// the audit log counts and whose members' etcd calls are summed ("" for none). With a profile
// path, the operator's CPU profile of the window is written there.
func measureIdle(b *testing.B, scrape *operatorScraper, ns string, window time.Duration, profile string) idleFigures {
	b.Helper()
	before, cpuBefore, callsBefore := scrape.metrics(b), operatorCPUSeconds(b), membersCalls(b, ns)
	familiesBefore, waitBefore := scrape.families(b), operatorRunQueueWait(b)
	start := time.Now()
	looks := startPlainLooks(b, ns)
	profiled := make(chan error, 1)
	if profile != "" {
		podIP := operatorPod(b).Status.PodIP
		go func() { profiled <- writeCPUProfile(podIP, profile, window) }()
	} else {
		profiled <- nil
	}
	var high containerMemory
	for deadline := start.Add(window); time.Now().Before(deadline); time.Sleep(10 * time.Second) {
		if m := operatorMemory(b); m.WorkingSetBytes > high.WorkingSetBytes {
			high = m
		}
	}
	plain := looks.stop()
	after, cpuAfter, callsAfter := scrape.metrics(b), operatorCPUSeconds(b), membersCalls(b, ns)
	familiesAfter, waitAfter := scrape.families(b), operatorRunQueueWait(b)
	minutes := time.Since(start).Minutes()
	if err := <-profiled; err != nil {
		b.Fatalf("the operator's CPU profile: %v", err)
	}
	f := idleFigures{rssMiB: mib(high.RSSBytes), workingSetMiB: mib(high.WorkingSetBytes),
		cpuPercent: (cpuAfter - cpuBefore) / time.Since(start).Seconds() * 100}
	reconciles := after.sum("controller_runtime_reconcile_total", `controller="etcdcluster"`) - before.sum("controller_runtime_reconcile_total", `controller="etcdcluster"`)
	f.reconcilesPerMin = reconciles / minutes
	durations := reconcileDurations(familiesAfter).Minus(reconcileDurations(familiesBefore))
	if durations.Count() == 0 && reconciles > 0 {
		b.Fatal("the operator's reconcile-time histogram has no native buckets")
	}
	f.p50, f.p99 = durations.Quantile(0.5), durations.Quantile(0.99)
	requests := after.sum("rest_client_requests_total", "") - before.sum("rest_client_requests_total", "")
	writes := 0.0
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		writes += after.sum("rest_client_requests_total", `method="`+verb+`"`) - before.sum("rest_client_requests_total", `method="`+verb+`"`)
	}
	f.apiRequestsPerMin, f.apiWritesPerMin = requests/minutes, writes/minutes
	if ns != "" {
		for write, n := range auditedWrites(b, operatorServiceAccount(b), start, time.Now()) {
			if write.namespace == ns {
				f.auditedWrites += n
				b.Logf("audited in the idle window: %s × %d", write, n)
			}
		}
	}
	// The plain looks' own calls, two a look, are not the operator's.
	f.etcdCallsPerMin = (callsAfter - callsBefore - 2*float64(len(plain.durations)+plain.failed)) / minutes
	f.tail = tailFigures(familiesBefore, familiesAfter, waitAfter-waitBefore, minutes, plain)
	return f
}

// waitAllAvailable waits for n clusters of ns to be Available.
func waitAllAvailable(b *testing.B, ns string, n int, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if available := countAvailable(ns); available == n {
			return
		} else if time.Now().After(deadline) {
			b.Fatalf("%d of %d clusters Available after %v", available, n, timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// countAvailable counts the Available clusters of ns; -1 if they cannot be listed.
func countAvailable(ns string) int {
	list := &etcdv1alpha1.EtcdClusterList{}
	if err := k8sClient.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		return -1
	}
	available := 0
	for i := range list.Items {
		if isAvailable(&list.Items[i], int(list.Items[i].Spec.Size)) {
			available++
		}
	}
	return available
}

// recoverFromCrash kills every process of each cluster's member pod at once and returns how
// long until every crashed member's pod ran again and was Ready (its restart count past the
// kill's) and then all n clusters of ns were Available: status may never have stopped saying
// Available (a member back before the operator's next look), so the member's own restart is
// waited for first. It prints where each cluster's recovery went, as seen every 500 ms: the
// container running again (the kubelet's restart, the pod's sandbox included), the pod Ready
// (etcd answering the readiness probe), the cluster Available in a look after that (the
// operator's look and status write).
func recoverFromCrash(b *testing.B, ns string, n int, clusters []*etcdv1alpha1.EtcdCluster) time.Duration {
	b.Helper()
	pods, killed := crashMembers(b, clusters)
	type timeline struct{ running, ready time.Duration }
	seen := make([]timeline, len(pods))
	deadline := killed.Add(20 * time.Minute)
	var recovered time.Duration
	for {
		time.Sleep(500 * time.Millisecond)
		now := time.Since(killed)
		allReady := true
		for i, before := range pods {
			pod := &corev1.Pod{}
			if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(before), pod); err != nil {
				allReady = false
				continue
			}
			restarted := false
			for _, st := range pod.Status.ContainerStatuses {
				if st.Name == "etcd" && st.RestartCount > restartsOf(before) && st.State.Running != nil {
					restarted = true
				}
			}
			if restarted && seen[i].running == 0 {
				seen[i].running = now
			}
			if restarted && podReady(pod) {
				if seen[i].ready == 0 {
					seen[i].ready = now
				}
			} else {
				allReady = false
			}
		}
		if allReady && countAvailable(ns) == n {
			recovered = now
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d crashed members not back, or not every cluster Available, 20 min after the kill", len(pods))
		}
	}
	var running, ready []time.Duration
	for i, pod := range pods {
		running, ready = append(running, seen[i].running), append(ready, seen[i].ready)
		printBenchLine("crashed %s: container running again after %v, pod Ready after %v", pod.Name, seen[i].running.Round(100*time.Millisecond), seen[i].ready.Round(100*time.Millisecond))
	}
	spread := func(d []time.Duration) string {
		slices.Sort(d)
		return fmt.Sprintf("median %v, slowest %v", d[len(d)/2].Round(100*time.Millisecond), d[len(d)-1].Round(100*time.Millisecond))
	}
	printBenchLine("after the kill of %d: containers running again %s; pods Ready %s; every cluster Available after %v",
		len(pods), spread(running), spread(ready), recovered.Round(100*time.Millisecond))
	return recovered
}

func restartsOf(pod *corev1.Pod) int32 {
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == "etcd" {
			return st.RestartCount
		}
	}
	return 0
}

// printBenchLine prints a benchmark's line on stdout: go test keeps only the first 10 lines
// a benchmark logs, and the kills alone log twenty.
func printBenchLine(format string, args ...any) {
	fmt.Printf("    "+format+"\n", args...)
}

// crashMembers kills every process of each cluster's member pod at once, and returns the pods
// as they were before and when.
func crashMembers(b *testing.B, clusters []*etcdv1alpha1.EtcdCluster) ([]*corev1.Pod, time.Time) {
	b.Helper()
	var pods []*corev1.Pod
	for _, c := range clusters {
		list := &corev1.PodList{}
		if err := k8sClient.List(context.Background(), list, client.InNamespace(c.Namespace), client.MatchingLabels{resources.LabelCluster: c.Name}); err != nil || len(list.Items) != 1 {
			b.Fatalf("the member pod of %s: %d found (%v)", c.Name, len(list.Items), err)
		}
		pods = append(pods, &list.Items[0])
	}
	at := time.Now()
	var wg sync.WaitGroup
	for _, pod := range pods {
		wg.Go(func() { killProcessesOfPod(b, pod) })
	}
	wg.Wait()
	return pods, at
}

// membersCalls sums the gRPC calls every member of ns has served (0 for "").
func membersCalls(b *testing.B, ns string) float64 {
	if ns == "" {
		return 0
	}
	list := &etcdv1alpha1.EtcdClusterList{}
	if err := k8sClient.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for i := range list.Items {
		for _, n := range etcdCallsServed(b, &list.Items[i]) {
			total += n
		}
	}
	return total
}

// operatorCPUSeconds is the manager container's CPU time, from its node's summary API.
func operatorCPUSeconds(b *testing.B) float64 {
	b.Helper()
	pod := operatorPod(b)
	raw, err := newClientset(b).CoreV1().RESTClient().Get().Resource("nodes").Name(pod.Spec.NodeName).
		SubResource("proxy").Suffix("stats/summary").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var summary struct {
		Pods []struct {
			PodRef     struct{ Name, Namespace string } `json:"podRef"`
			Containers []struct {
				Name string `json:"name"`
				CPU  struct {
					UsageCoreNanoSeconds uint64 `json:"usageCoreNanoSeconds"`
				} `json:"cpu"`
			} `json:"containers"`
		} `json:"pods"`
	}
	if err := json.Unmarshal(raw, &summary); err != nil {
		b.Fatal(err)
	}
	for _, p := range summary.Pods {
		if p.PodRef.Namespace == pod.Namespace && p.PodRef.Name == pod.Name {
			for _, c := range p.Containers {
				if c.Name == managerContainer {
					return float64(c.CPU.UsageCoreNanoSeconds) / 1e9
				}
			}
		}
	}
	b.Fatalf("no CPU figure for the operator's pod %s", pod.Name)
	return 0
}

func operatorPod(b *testing.B) *corev1.Pod {
	b.Helper()
	d := &appsv1.Deployment{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, d); err != nil {
		b.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := k8sClient.List(context.Background(), pods, client.InNamespace(operatorNamespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		b.Fatal(err)
	}
	running := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil || p.Status.PodIP == "" })
	if len(running) != 1 {
		b.Fatalf("%d operator pods running, want one", len(running))
	}
	return &running[0]
}

// benchPprofPort is where the operator serves Go's profiling endpoints when BENCH_PROFILE is set.
const benchPprofPort = 6060

// profilePath is where run's profile of what goes in dir ("" when no profile is asked for).
func profilePath(dir string, run int, what string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, fmt.Sprintf("operator-cpu-%s-run%d.pprof", what, run+1))
}

// writeCPUProfile writes the operator's CPU profile over window to path, read from the profiling
// endpoint of its pod at podIP.
func writeCPUProfile(podIP, path string, window time.Duration) error {
	c := &http.Client{Timeout: window + time.Minute}
	resp, err := c.Get(fmt.Sprintf("http://%s:%d/debug/pprof/profile?seconds=%d", podIP, benchPprofPort, int(window.Seconds())))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// operatorScraper reads the operator's metrics endpoint (HTTPS, authenticated and authorized
// through the API server) with the token of a ServiceAccount allowed to get /metrics.
type operatorScraper struct {
	token string
	http  *http.Client
}

func newOperatorScraper(b *testing.B) *operatorScraper {
	b.Helper()
	ctx := context.Background()
	ns := plainBenchNamespace(b)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "metrics-scraper", Namespace: ns}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}}}
	for _, o := range []client.Object{sa, role, binding} {
		if err := k8sClient.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), binding)
		_ = k8sClient.Delete(context.Background(), role)
	})
	token, err := newClientset(b).CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return &operatorScraper{token: token.Status.Token, http: &http.Client{Timeout: 20 * time.Second,
		// The metrics server's certificate is self-signed unless cert-manager gives one.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}} //nolint:gosec // a test reading its own operator's metrics
}

// metricLines are the samples of a metrics page, "name{labels} value".
type metricLines []string

func (s *operatorScraper) metrics(b *testing.B) metricLines {
	b.Helper()
	var lines metricLines
	for attempt := 0; ; attempt++ {
		resp, err := s.get(b, "")
		if err == nil && resp.StatusCode == http.StatusOK {
			scanner := bufio.NewScanner(resp.Body)
			scanner.Buffer(make([]byte, 1<<20), 1<<20)
			for scanner.Scan() {
				if line := scanner.Text(); !strings.HasPrefix(line, "#") {
					lines = append(lines, line)
				}
			}
			resp.Body.Close()
			return lines
		}
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("HTTP %s", resp.Status)
		}
		if attempt == 5 {
			b.Fatalf("the operator's metrics: %v", err)
		}
		time.Sleep(2 * time.Second) // the authorization just granted may not be in force yet
	}
}

// sum adds the values of the samples of name whose labels contain match.
func (m metricLines) sum(name, match string) float64 {
	total := 0.0
	for _, line := range m {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") || !strings.Contains(line, match) {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			total += v
		}
	}
	return total
}

// get asks the operator's metrics endpoint for its page in format ("" for the text format).
func (s *operatorScraper) get(b *testing.B, format expfmt.Format) (*http.Response, error) {
	b.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://%s:8443/metrics", operatorPod(b).Status.PodIP), nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if format != "" {
		req.Header.Set("Accept", string(format))
	}
	return s.http.Do(req)
}

// families is one read of the operator's metrics in the protobuf format, by family name: the
// text format carries only the classic buckets of the reconcile-time histogram (10, 25, 50 ms
// apart), not its native ones.
func (s *operatorScraper) families(b *testing.B) map[string]*dto.MetricFamily {
	b.Helper()
	resp, err := s.get(b, expfmt.NewFormat(expfmt.TypeProtoDelim))
	if err != nil {
		b.Fatalf("the operator's metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("the operator's metrics: HTTP %s", resp.Status)
	}
	decoder := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	families := map[string]*dto.MetricFamily{}
	for {
		family := &dto.MetricFamily{}
		if err := decoder.Decode(family); errors.Is(err, io.EOF) {
			return families
		} else if err != nil {
			b.Fatalf("the operator's metrics in the protobuf format: %v", err)
		}
		families[family.GetName()] = family
	}
}

// reconcileDurations is the native histogram of the cluster reconciler's reconcile durations
// (controller-runtime's, buckets 10 % apart).
func reconcileDurations(families map[string]*dto.MetricFamily) nativehist.Histogram {
	for _, m := range families["controller_runtime_reconcile_time_seconds"].GetMetric() {
		for _, label := range m.GetLabel() {
			if label.GetName() == "controller" && label.GetValue() == "etcdcluster" {
				return nativehist.Of(m.GetHistogram())
			}
		}
	}
	return nativehist.Histogram{}
}
