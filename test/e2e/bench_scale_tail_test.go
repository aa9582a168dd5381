//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/test/schedstat"
)

// tail is what the slow reconciles of an idle window are read against: the same two etcd
// calls a look makes, made plainly beside the operator (the floor of a look on this node,
// whoever makes it), how long the operator's threads waited for a CPU, how many of its
// goroutines waited over 10 ms for one of its Go processors, and its garbage collections.
type tail struct {
	plainLooks, plainFailed int
	plainP50, plainP99      float64 // seconds
	threadsWaitPerMin       float64 // seconds the operator's threads spent on a run queue, a minute
	slowGoroutineWaits      float64 // a minute: goroutines made ready that waited over ~10 ms to run
	gcPerMin, gcCPUPerMin   float64 // collections, and their CPU seconds, a minute
}

func (t tail) String() string {
	if t.plainLooks == 0 {
		return fmt.Sprintf("threads waited %.2f s/min for a CPU, %.1f goroutine waits over 10 ms/min, %.1f GCs/min (%.3f s of CPU)",
			t.threadsWaitPerMin, t.slowGoroutineWaits, t.gcPerMin, t.gcCPUPerMin)
	}
	return fmt.Sprintf("plain looks beside it: %d (%d failed), p50 %.1f ms, p99 %.1f ms; threads waited %.2f s/min for a CPU, %.1f goroutine waits over 10 ms/min, %.1f GCs/min (%.3f s of CPU)",
		t.plainLooks, t.plainFailed, t.plainP50*1000, t.plainP99*1000, t.threadsWaitPerMin, t.slowGoroutineWaits, t.gcPerMin, t.gcCPUPerMin)
}

// tailFigures are the tail's figures of a window of minutes, from the operator's metrics read
// at its start and end, its threads' wait for a CPU in it and the plain looks' durations.
func tailFigures(before, after map[string]*dto.MetricFamily, threadsWait time.Duration, minutes float64, plain plainLookResults) tail {
	t := tail{plainLooks: len(plain.durations), plainFailed: plain.failed, threadsWaitPerMin: threadsWait.Seconds() / minutes}
	if len(plain.durations) > 0 {
		sorted := slices.Sorted(slices.Values(plain.durations))
		at := func(q float64) float64 {
			return sorted[min(len(sorted)-1, int(math.Ceil(q*float64(len(sorted))))-1)].Seconds()
		}
		t.plainP50, t.plainP99 = at(0.5), at(0.99)
	}
	counter := func(name string) float64 {
		return firstCounter(after[name]) - firstCounter(before[name])
	}
	t.gcPerMin = counter("go_gc_cycles_total_gc_cycles_total") / minutes
	t.gcCPUPerMin = counter("go_cpu_classes_gc_total_cpu_seconds_total") / minutes
	t.slowGoroutineWaits = (waitsOver(after["go_sched_latencies_seconds"], 0.010) - waitsOver(before["go_sched_latencies_seconds"], 0.010)) / minutes
	return t
}

func firstCounter(f *dto.MetricFamily) float64 {
	if f == nil || len(f.GetMetric()) == 0 {
		return 0
	}
	return f.GetMetric()[0].GetCounter().GetValue()
}

// waitsOver counts the observations of the runtime's histogram f above the first bucket bound
// past limit: the Go collector exposes the runtime's scheduling latencies in buckets about
// eleven times apart (0.9 ms, 10.5 ms, 117 ms...).
func waitsOver(f *dto.MetricFamily, limit float64) float64 {
	if f == nil || len(f.GetMetric()) == 0 {
		return 0
	}
	h := f.GetMetric()[0].GetHistogram()
	for _, bucket := range h.GetBucket() {
		if bucket.GetUpperBound() >= limit {
			return float64(h.GetSampleCount() - bucket.GetCumulativeCount())
		}
	}
	return 0
}

// operatorRunQueueWait is how long the threads of the operator's pod's processes have waited
// for a CPU, read from this machine's /proc (the local cluster's node).
func operatorRunQueueWait(b *testing.B) time.Duration {
	b.Helper()
	var total time.Duration
	for _, pid := range processesOfPod(operatorPod(b)) {
		total += schedstat.RunQueueWait(strconv.Itoa(pid))
	}
	return total
}

// plainLooker makes, beside the operator, the two etcd calls of its look at a one-member
// cluster — the member list, then the member's status over the client's own connection — from
// one kept client per cluster of a namespace, at the operator's pace (two looks a cluster a
// minute, evenly spread), and times them.
type plainLooker struct {
	clients []*clientv3.Client
	done    chan struct{}
	ended   sync.WaitGroup
	mu      sync.Mutex
	results plainLookResults
}

type plainLookResults struct {
	durations []time.Duration
	failed    int
}

// startPlainLooks starts looking at every cluster of ns ("" for none) with a client of its own.
func startPlainLooks(b *testing.B, ns string) *plainLooker {
	b.Helper()
	l := &plainLooker{done: make(chan struct{})}
	if ns == "" {
		return l
	}
	pods := &corev1.PodList{}
	if err := k8sClient.List(context.Background(), pods, client.InNamespace(ns), client.HasLabels{resources.LabelCluster}); err != nil {
		b.Fatal(err)
	}
	for _, pod := range pods.Items {
		cl, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("http://%s:%d", pod.Status.PodIP, resources.ClientPort)},
			DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		l.clients = append(l.clients, cl)
	}
	if len(l.clients) == 0 {
		return l
	}
	l.ended.Go(func() {
		tick := time.NewTicker(time.Minute / time.Duration(2*len(l.clients)))
		defer tick.Stop()
		for i := 0; ; i = (i + 1) % len(l.clients) {
			select {
			case <-l.done:
				return
			case <-tick.C:
				l.ended.Go(func() { l.look(l.clients[i]) })
			}
		}
	})
	return l
}

func (l *plainLooker) look(cl *clientv3.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := cl.MemberList(ctx)
	if err == nil {
		_, err = pb.NewMaintenanceClient(cl.ActiveConnection()).Status(ctx, &pb.StatusRequest{})
	}
	took := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.results.failed++
		return
	}
	l.results.durations = append(l.results.durations, took)
}

// stop ends the looks, closes the clients and returns what the looks took.
func (l *plainLooker) stop() plainLookResults {
	close(l.done)
	l.ended.Wait()
	for _, cl := range l.clients {
		_ = cl.Close()
	}
	return l.results
}
