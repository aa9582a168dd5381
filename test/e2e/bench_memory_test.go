//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// BenchmarkOperatorMemory: the deployed operator's memory as the kubelet accounts its container
// (the working set its memory limit is enforced against, and the resident set), read from the
// node's summary API: idle; then with objects that are not its own in a namespace it watches —
// 2000 Secrets and 2000 Pods of 10 KiB (the Pods held back by a scheduling gate, so nothing
// runs); then running its own clusters (BENCH_MEMORY_CLUSTERS one-member clusters, 10 by
// default). The memory request and limit in config/manager are sized from it.
func BenchmarkOperatorMemory(b *testing.B) {
	clusters, err := strconv.Atoi(envOr("BENCH_MEMORY_CLUSTERS", "10"))
	if err != nil {
		b.Fatalf("BENCH_MEMORY_CLUSTERS: %v", err)
	}
	for range b.N {
		idle := sampleOperatorMemory(b, "idle")

		unrelated := plainBenchNamespace(b)
		start := time.Now()
		createUnrelated(b, unrelated, 2000, 10<<10)
		b.Logf("2000 Secrets and 2000 gated Pods of 10 KiB in %s, made in %s", unrelated, time.Since(start).Round(time.Second))
		withUnrelated := sampleOperatorMemory(b, "with 4000 objects not its own")

		ns := benchNamespace(b)
		var own []*etcdv1alpha1.EtcdCluster
		for i := range clusters {
			c := &etcdv1alpha1.EtcdCluster{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("mem-%02d", i), Namespace: ns},
				Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: etcdVersion, Storage: etcdv1alpha1.StorageSpec{Ephemeral: true}},
			}
			if err := k8sClient.Create(context.Background(), c); err != nil {
				b.Fatal(err)
			}
			own = append(own, c)
		}
		for _, c := range own {
			waitAvailableB(b, c, 1)
		}
		withClusters := sampleOperatorMemory(b, fmt.Sprintf("running %d clusters", clusters))

		for _, m := range []struct {
			name string
			mem  containerMemory
		}{{"idle", idle}, {"unrelated", withUnrelated}, {"clusters", withClusters}} {
			b.ReportMetric(mib(m.mem.WorkingSetBytes), m.name+"-working-set-MiB")
			b.ReportMetric(mib(m.mem.RSSBytes), m.name+"-rss-MiB")
		}
		b.ReportMetric((mib(withClusters.WorkingSetBytes)-mib(withUnrelated.WorkingSetBytes))/float64(clusters), "working-set-MiB/cluster")
	}
}

func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

// containerMemory is a container's memory in the kubelet's summary API.
type containerMemory struct {
	WorkingSetBytes uint64 `json:"workingSetBytes"`
	RSSBytes        uint64 `json:"rssBytes"`
	UsageBytes      uint64 `json:"usageBytes"`
}

// sampleOperatorMemory waits half a minute for the operator to settle, then reads its manager
// container's memory six times over half a minute and returns the highest readings.
func sampleOperatorMemory(b *testing.B, what string) containerMemory {
	b.Helper()
	time.Sleep(30 * time.Second)
	var high containerMemory
	for range 6 {
		m := operatorMemory(b)
		high.WorkingSetBytes = max(high.WorkingSetBytes, m.WorkingSetBytes)
		high.RSSBytes = max(high.RSSBytes, m.RSSBytes)
		high.UsageBytes = max(high.UsageBytes, m.UsageBytes)
		time.Sleep(5 * time.Second)
	}
	b.Logf("operator %s: working set %.1f MiB, RSS %.1f MiB, usage %.1f MiB (highest of 6 readings over 30 s)",
		what, mib(high.WorkingSetBytes), mib(high.RSSBytes), mib(high.UsageBytes))
	return high
}

// operatorMemory reads the deployed operator's manager container from its node's summary API.
func operatorMemory(b *testing.B) containerMemory {
	b.Helper()
	ctx := context.Background()
	d := &appsv1.Deployment{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, d); err != nil {
		b.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := k8sClient.List(ctx, pods, client.InNamespace(operatorNamespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		b.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName == "" {
		b.Fatalf("%d operator pods, want one running", len(pods.Items))
	}
	pod := pods.Items[0]
	clientset := newClientset(b)
	raw, err := clientset.CoreV1().RESTClient().Get().Resource("nodes").Name(pod.Spec.NodeName).
		SubResource("proxy").Suffix("stats/summary").DoRaw(ctx)
	if err != nil {
		b.Fatalf("summary API of node %s: %v", pod.Spec.NodeName, err)
	}
	var summary struct {
		Pods []struct {
			PodRef     struct{ Name, Namespace string } `json:"podRef"`
			Containers []struct {
				Name   string          `json:"name"`
				Memory containerMemory `json:"memory"`
			} `json:"containers"`
		} `json:"pods"`
	}
	if err := json.Unmarshal(raw, &summary); err != nil {
		b.Fatal(err)
	}
	for _, p := range summary.Pods {
		if p.PodRef.Namespace != pod.Namespace || p.PodRef.Name != pod.Name {
			continue
		}
		for _, c := range p.Containers {
			if c.Name == pod.Spec.Containers[0].Name && c.Memory.WorkingSetBytes > 0 {
				return c.Memory
			}
		}
	}
	b.Fatalf("the summary API of node %s has no memory figures for pod %s/%s", pod.Spec.NodeName, pod.Namespace, pod.Name)
	return containerMemory{}
}

// plainBenchNamespace is a namespace without a Pod Security profile, deleted when the benchmark
// ends.
func plainBenchNamespace(b *testing.B) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-unrelated-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
	return ns.Name
}

// createUnrelated makes n Secrets and n Pods with size bytes of payload each, as other workloads
// would; the Pods carry a scheduling gate, so that none is ever scheduled.
func createUnrelated(b *testing.B, namespace string, n, size int) {
	b.Helper()
	payload := strings.Repeat("x", size)
	work := make(chan int)
	var failed sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				meta := metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: namespace}
				podMeta := *meta.DeepCopy()
				podMeta.Annotations = map[string]string{"example.com/config": payload}
				for _, obj := range []client.Object{
					&corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"blob": []byte(payload)}},
					&corev1.Pod{ObjectMeta: podMeta, Spec: corev1.PodSpec{
						SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/never"}},
						Containers:      []corev1.Container{{Name: "app", Image: busyboxImage}},
					}},
				} {
					if err := k8sClient.Create(context.Background(), obj); err != nil {
						failed.Do(func() { firstErr = err })
					}
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}
