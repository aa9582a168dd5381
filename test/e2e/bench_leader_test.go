//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// leaderLease is the manager's leader-election Lease (main.go's LeaderElectionID).
const leaderLease = "etcd-operator.etcd.database.dev"

// BenchmarkLeaderFailover runs the operator as two replicas under each set of leader-election
// times, side by side: controller-runtime's (15 s lease, 10 s renew deadline, 2 s retry period),
// the shorter lease the operator had before (10 s, 7 s, 3 s) and the operator's defaults. For each it counts the Lease's writes over an idle window
// (BENCH_LEASE_WINDOW, 1 min, reported per 5 minutes), then crashes the leader (every process
// of its pod killed: no hand-over, which LeaderElectionReleaseOnCancel makes only on a clean
// stop) and times until a new holder takes the Lease. The Deployment is put back after.
func BenchmarkLeaderFailover(b *testing.B) {
	window := envDuration("BENCH_LEASE_WINDOW", time.Minute)
	for _, times := range []struct{ name, lease, renew, retry string }{
		{"controller-runtime-15s-10s-2s", "15s", "10s", "2s"},
		{"10s-7s-3s", "10s", "7s", "3s"},
		{"operator-defaults", "", "", ""},
	} {
		b.Run(times.name, func(b *testing.B) {
			var args []string
			if times.lease != "" {
				args = []string{"--leader-election-lease-duration=" + times.lease, "--leader-election-renew-deadline=" + times.renew,
					"--leader-election-retry-period=" + times.retry}
			}
			runOperatorReplicas(b, 2, args)
			var failover time.Duration
			writes := 0
			for i := 0; i < b.N; i++ {
				writes += leaseWrites(b, window)
				failover += killLeader(b)
				waitOperatorReplicas(b, 2, args)
			}
			b.ReportMetric(failover.Seconds()/float64(b.N), "failover-s")
			b.ReportMetric(float64(writes)/float64(b.N)*(5*time.Minute).Seconds()/window.Seconds(), "lease-writes/5min")
		})
	}
}

// runOperatorReplicas runs the operator Deployment as replicas pods with extra manager args
// (leader-election flags, which replace any the Deployment has), until the benchmark ends.
func runOperatorReplicas(b *testing.B, replicas int32, extra []string) {
	b.Helper()
	d := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}
	if err := k8sClient.Get(context.Background(), key, d); err != nil {
		b.Fatal(err)
	}
	original := d.DeepCopy()
	b.Cleanup(func() {
		current := &appsv1.Deployment{}
		if err := k8sClient.Get(context.Background(), key, current); err != nil {
			b.Fatal(err)
		}
		current.Spec.Replicas, current.Spec.Template.Spec.Containers = original.Spec.Replicas, original.Spec.Template.Spec.Containers
		if err := k8sClient.Update(context.Background(), current); err != nil {
			b.Fatal(err)
		}
		waitOperatorReplicas(b, ptr.Deref(original.Spec.Replicas, 1), nil)
	})
	i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == managerContainer })
	if i < 0 {
		b.Fatalf("no %s container in the operator Deployment", managerContainer)
	}
	c := &d.Spec.Template.Spec.Containers[i]
	c.Args = append(slices.DeleteFunc(slices.Clone(c.Args), func(a string) bool {
		return strings.HasPrefix(a, "--leader-election-") && !strings.HasPrefix(a, "--leader-election-namespace")
	}), extra...)
	d.Spec.Replicas = ptr.To(replicas)
	if err := k8sClient.Update(context.Background(), d); err != nil {
		b.Fatal(err)
	}
	waitOperatorReplicas(b, replicas, extra)
}

// waitOperatorReplicas waits for the Deployment to run replicas ready pods, each with the args
// wanted, and for one of them to hold the Lease.
func waitOperatorReplicas(b *testing.B, replicas int32, wanted []string) {
	b.Helper()
	waitFor(b, fmt.Sprintf("the operator running as %d ready replicas with %v, one leading", replicas, wanted), func(ctx context.Context) (bool, error) {
		d := &appsv1.Deployment{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, d); err != nil || !rolledOut(d) {
			return false, err
		}
		pods := &corev1.PodList{}
		if err := k8sClient.List(ctx, pods, client.InNamespace(operatorNamespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return false, err
		}
		ready := 0
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp != nil {
				return false, nil
			}
			for _, c := range pod.Spec.Containers {
				if c.Name == managerContainer && podReady(&pod) && !slices.ContainsFunc(wanted, func(a string) bool { return !slices.Contains(c.Args, a) }) {
					ready++
				}
			}
		}
		holder, _ := leaseHolder(ctx)
		return ready == int(replicas) && slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return holder == p.Name }), nil
	})
}

// leaseHolder is the pod that holds the leader-election Lease (its identity is
// <pod name>_<uuid>), and the Lease's resourceVersion.
func leaseHolder(ctx context.Context) (string, string) {
	lease := &coordinationv1.Lease{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: leaderLease}, lease); err != nil {
		return "", ""
	}
	holder, _, _ := strings.Cut(ptr.Deref(lease.Spec.HolderIdentity, ""), "_")
	return holder, lease.ResourceVersion
}

// leaseWrites counts the Lease's writes over window: each renewal changes its resourceVersion,
// and renewals are seconds apart, so a look every 200 ms sees each.
func leaseWrites(b *testing.B, window time.Duration) int {
	b.Helper()
	_, last := leaseHolder(context.Background())
	writes := 0
	for deadline := time.Now().Add(window); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, rv := leaseHolder(context.Background()); rv != "" && rv != last {
			writes, last = writes+1, rv
		}
	}
	return writes
}

// killLeader kills every process of the leading pod on this machine (SIGKILL: a crash, which
// releases nothing; a pod deleted through the API, even without a grace period, is sent SIGTERM
// and hands the Lease over at once) and returns how long until a new holder takes the Lease:
// the other replica, or the crashed one's restarted container, whichever first.
func killLeader(b *testing.B) time.Duration {
	b.Helper()
	lease := &coordinationv1.Lease{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: leaderLease}, lease); err != nil {
		b.Fatal(err)
	}
	identity := ptr.Deref(lease.Spec.HolderIdentity, "")
	leader, _, _ := strings.Cut(identity, "_")
	pod := &corev1.Pod{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: leader}, pod); err != nil {
		b.Fatalf("the leading pod %q: %v", leader, err)
	}
	killed := time.Now()
	killProcessesOfPod(b, pod)
	for {
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: leaderLease}, lease); err == nil {
			if now := ptr.Deref(lease.Spec.HolderIdentity, ""); now != "" && now != identity {
				took := time.Since(killed)
				b.Logf("leader %s killed; %s holds the Lease after %v", identity, now, took.Round(100*time.Millisecond))
				return took
			}
		}
		if time.Since(killed) > 2*time.Minute {
			b.Fatalf("no new holder took the Lease within 2 minutes of %s's kill", identity)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
