//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// partitionHold is how long past spec.quorumLossRecovery.after the operator is watched for a
// force that must not come.
const partitionHold = 20 * time.Second

// A review found that quorum-loss recovery could split the brain: two members whose node stopped
// answering the API server were counted lost, and the third forced into a cluster of its own,
// while the two still served a majority behind the partition. Here it is done for real on the
// local cluster, with policy ForceNewCluster. Members b and c are cut off from member a and from
// the operator (their traffic dropped with iptables), the kubelet stops (SIGSTOP: every
// container keeps running, the node stops answering), and b's and c's pods are evicted as the
// taint eviction controller evicts pods of a lost node (DisruptionTarget, DeletionByTaintManager;
// never ending while no kubelet answers). b and c keep a quorum and acknowledge a writer's writes
// on their side, with a linearizability workload; a's side refuses them. Past
// quorumLossRecovery.after the operator has begun no recovery, and says what it waits for and the
// annotation that declares the members lost. Then the partition heals: the kubelet stops b and c,
// the operator restarts them on their data, and the cluster serves at size 3 with every write
// acknowledged on the majority's side, the histories linearizable.
//
// It stops the cluster's only kubelet, so it runs alone: make test-partition (E2E_PARTITION=1).
func TestQuorumLossBehindAPartition(t *testing.T) {
	if os.Getenv("E2E_PARTITION") == "" {
		t.Skip("stops the local cluster's kubelet: run alone, with make test-partition")
	}
	ctx := context.Background()
	ns := testNamespace(t, "e2e-partition-")
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "split", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size:    3,
			Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
			QuorumLossRecovery: etcdv1alpha1.QuorumLossRecoverySpec{
				Policy: etcdv1alpha1.QuorumLossRecoveryForceNewCluster,
				After:  &metav1.Duration{Duration: membership.MinRecoveryAfter},
			},
		},
	}
	// The taint eviction controller must evict nothing of the cluster itself: b's and c's
	// evictions are the test's, a's pod must stay.
	c.Spec.PodTemplate.Tolerations = []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, c, 3)
	pods := memberPods(t, c)
	if len(pods) != 3 {
		t.Fatalf("%d member pods, want 3", len(pods))
	}
	a, b, cc := pods[0], pods[1], pods[2]
	endpoint := func(p corev1.Pod) string { return p.Status.PodIP + ":" + strconv.Itoa(resources.ClientPort) }
	t.Logf("a %s (%s), b %s (%s), c %s (%s)", a.Name, a.Status.PodIP, b.Name, b.Status.PodIP, cc.Name, cc.Status.PodIP)

	majority := startWriter(t, endpoint(b), "/e2e/partition/majority")
	minority := startWriter(t, endpoint(a), "/e2e/partition/minority")
	workload := startWorkload(t, endpoint(b))
	waitFor(t, "writes acknowledged before the partition", func(context.Context) (bool, error) {
		return majority.ackedCount() > 20 && minority.ackedCount() > 20, nil
	})

	operatorIP := operatorPodIP(t)
	cut := newPartition(t)
	for _, side := range []string{b.Status.PodIP, cc.Status.PodIP} {
		cut.drop(t, a.Status.PodIP, side)
		cut.drop(t, operatorIP, side)
	}
	kubelet := stopKubelet(t)
	for _, p := range []corev1.Pod{b, cc} {
		evictAsFromALostNode(t, p)
	}

	waitForWithin(t, "Degraded to name the members that may still serve, and the annotation", recoveryTimeout, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		return d != nil && strings.Contains(d.Message, "may still be serving a majority") && strings.Contains(d.Message, etcdv1alpha1.AnnotationLostMembers+"="), nil
	})
	acked := majority.ackedCount()
	minorityAcked := minority.ackedCount()
	hold := time.Until(c.Status.QuorumLostTime.Add(c.Spec.QuorumLossRecovery.After.Duration + partitionHold))
	t.Logf("quorum lost at %s; watching for %s, past spec.quorumLossRecovery.after, for a force that must not come", c.Status.QuorumLostTime, hold.Round(time.Second))
	time.Sleep(hold)
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	if qr := c.Status.QuorumRecovery; qr != nil {
		t.Fatalf("a recovery began while %s and %s served a majority behind the partition: %+v", b.Name, cc.Name, *qr)
	}
	if got := majority.ackedCount(); got <= acked {
		t.Fatalf("the majority's side acknowledged no write during the partition (%d before, %d after): the test shows nothing", acked, got)
	}
	if got := minority.ackedCount(); got != minorityAcked {
		t.Errorf("member %s, cut off alone, acknowledged %d writes during the partition", a.Name, got-minorityAcked)
	}
	if pod := getPod(t, ns, a.Name); pod.UID != a.UID || pod.DeletionTimestamp != nil {
		t.Fatalf("the survivor %s was stopped or replaced during the partition", a.Name)
	}
	t.Logf("during the partition: %d writes acknowledged by the majority, %d by the minority", majority.ackedCount()-acked, minority.ackedCount()-minorityAcked)

	// The partition heals: the kubelet answers again and stops b and c, as they were evicted;
	// the operator restarts them on their data.
	kubelet.resume(t)
	cut.heal(t)
	for _, p := range []corev1.Pod{b, cc} {
		releasePod(t, p)
	}
	waitForWithin(t, "the cluster serving at size 3 again", recoveryTimeout, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
		return err == nil && isAvailable(c, 3), err
	})
	if qr := c.Status.QuorumRecovery; qr != nil {
		t.Errorf("a recovery is on record: %+v", *qr)
	}
	workload.SetEndpoints(clientServiceEndpoint(t, c)) // b's pod, made again, has another IP
	majority.verifyAt(t, clientServiceEndpoint(t, c))
	minority.verifyAt(t, clientServiceEndpoint(t, c))
	counts := checkLinearizable(t, workload)
	t.Logf("linearizable: %+v", counts)
}

// operatorPodIP is the IP of the running operator's pod.
func operatorPodIP(t *testing.T) string {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, d); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := k8sClient.List(context.Background(), pods, client.InNamespace(operatorNamespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			return p.Status.PodIP
		}
	}
	t.Fatal("no running operator pod")
	return ""
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// partition drops traffic between pairs of pod IPs, both ways, in the FORWARD chain the bridged
// pod traffic crosses (br_netfilter); heal removes every rule, and so does the test's cleanup.
type partition struct{ rules [][]string }

func newPartition(t *testing.T) *partition {
	p := &partition{}
	t.Cleanup(func() { p.heal(t) })
	return p
}

func (p *partition) drop(t *testing.T, x, y string) {
	t.Helper()
	for _, rule := range [][]string{{"-s", x, "-d", y, "-j", "DROP"}, {"-s", y, "-d", x, "-j", "DROP"}} {
		if out, err := exec.Command("iptables", append([]string{"-w", "-I", "FORWARD", "1"}, rule...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %v: %v: %s", rule, err, out)
		}
		p.rules = append(p.rules, rule)
	}
}

func (p *partition) heal(t *testing.T) {
	for _, rule := range p.rules {
		if out, err := exec.Command("iptables", append([]string{"-w", "-D", "FORWARD"}, rule...)...).CombinedOutput(); err != nil {
			t.Errorf("iptables -D %v: %v: %s", rule, err, out)
		}
	}
	p.rules = nil
}

// stoppedKubelet is the local cluster's kubelet, stopped with SIGSTOP: the containers it
// started keep running, and the node stops answering the API server.
type stoppedKubelet struct{ pid int }

func stopKubelet(t *testing.T) *stoppedKubelet {
	t.Helper()
	runDir := envOr("CLUSTER_RUN_DIR", "/run/etcd-operator-cluster")
	raw, err := os.ReadFile(filepath.Join(runDir, "pids", "kubelet.pid"))
	if err != nil {
		t.Fatalf("the kubelet's PID file: %v", err)
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		t.Fatalf("empty kubelet PID file")
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		t.Fatal(err)
	}
	k := &stoppedKubelet{pid: pid}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the kubelet (PID %d): %v", pid, err)
	}
	t.Cleanup(func() { k.resume(t) })
	return k
}

func (k *stoppedKubelet) resume(t *testing.T) {
	if k.pid == 0 {
		return
	}
	if err := syscall.Kill(k.pid, syscall.SIGCONT); err != nil {
		t.Errorf("resume the kubelet (PID %d): %v", k.pid, err)
	}
	k.pid = 0
}

// heldFinalizer keeps an evicted pod's object while no kubelet answers, as a lost node's pod
// stays: deleted, never confirmed ended.
const heldFinalizer = "e2e.etcd.database.dev/node-lost"

// evictAsFromALostNode does to pod what the taint eviction controller does to a pod of a node
// that stopped answering: the DisruptionTarget condition, then the deletion, which no kubelet
// confirms.
func evictAsFromALostNode(t *testing.T, pod corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Finalizers = append(pod.Finalizers, heldFinalizer)
	if err := k8sClient.Patch(ctx, &pod, patch); err != nil {
		t.Fatal(err)
	}
	status := client.MergeFrom(pod.DeepCopy())
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "DeletionByTaintManager", Message: "Taint manager: deleting due to NoExecute taint", LastTransitionTime: metav1.Now()})
	if err := k8sClient.Status().Patch(ctx, &pod, status); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Delete(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releasePod(t, pod) })
}

// releasePod removes heldFinalizer, if the pod is still there.
func releasePod(t *testing.T, pod corev1.Pod) {
	ctx := context.Background()
	current := &corev1.Pod{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(&pod), current); err != nil || current.UID != pod.UID {
		return
	}
	patch := client.MergeFrom(current.DeepCopy())
	current.Finalizers = slices.DeleteFunc(current.Finalizers, func(f string) bool { return f == heldFinalizer })
	if err := k8sClient.Patch(ctx, current, patch); ignoreNotFound(err) != nil {
		t.Errorf("release pod %s: %v", pod.Name, err)
	}
}

// Members a person declares lost may still run: the declaration is theirs, the fence is the
// operator's. Members b and c are cut off from member a and from the operator (iptables) while
// their kubelet answers, so they keep a quorum of their own; the operator takes no step while
// nothing says they are lost. Once they are declared lost and a named to recover from, the
// recovery takes b's and c's pods out of the client Service and stops them, and forces a only
// once they are gone: from the force on, the client Service never lists an old member's pod,
// and the cluster serves at size 3 with every key a had.
func TestDeclaredLostMembersAreFencedFromClients(t *testing.T) {
	if os.Getenv("E2E_PARTITION") == "" {
		t.Skip("changes the node's iptables rules: run with make test-partition")
	}
	ctx := context.Background()
	ns := testNamespace(t, "e2e-fence-")
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "fence", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size:               3,
			Version:            etcdVersion,
			Storage:            etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
			QuorumLossRecovery: etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryManual},
		},
	}
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, c, 3)
	pods := memberPods(t, c)
	if len(pods) != 3 {
		t.Fatalf("%d member pods, want 3", len(pods))
	}
	a, b, cc := pods[0], pods[1], pods[2]
	old := map[types.UID]string{b.UID: b.Name, cc.UID: cc.Name}
	before := startWriter(t, a.Status.PodIP+":"+strconv.Itoa(resources.ClientPort), "/e2e/fence/before")
	waitFor(t, "writes acknowledged before the partition", func(context.Context) (bool, error) { return before.ackedCount() > 20, nil })
	before.stop()
	time.Sleep(2 * time.Second) // every acknowledged write reaches a, which forwarded it

	cut := newPartition(t)
	for _, side := range []string{b.Status.PodIP, cc.Status.PodIP} {
		cut.drop(t, a.Status.PodIP, side)
		cut.drop(t, operatorPodIP(t), side)
	}
	// b and c run on their claims: nothing says they are lost, and the operator waits for them.
	waitForWithin(t, "quorum lost, nothing done", recoveryTimeout, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		return d != nil && d.Reason == etcdv1alpha1.ReasonQuorumLost && c.Status.QuorumLostTime != nil, nil
	})

	// From here, every look at the client Service's endpoints is kept, with whether the
	// survivor had been forced by then.
	watchCtx, stopWatch := context.WithCancel(ctx)
	var oldAfterForce []string
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		forced := false
		for watchCtx.Err() == nil {
			cur := &etcdv1alpha1.EtcdCluster{}
			if err := k8sClient.Get(watchCtx, client.ObjectKeyFromObject(c), cur); err == nil && cur.Status.QuorumRecovery != nil && cur.Status.QuorumRecovery.ForcedTime != nil {
				forced = true
			}
			eps := &discoveryv1.EndpointSliceList{}
			if err := k8sClient.List(watchCtx, eps, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: resources.ClientServiceName(c.Name)}); err == nil && forced {
				for _, s := range eps.Items {
					for _, e := range s.Endpoints {
						if e.TargetRef != nil && old[e.TargetRef.UID] != "" {
							oldAfterForce = append(oldAfterForce, old[e.TargetRef.UID]+" at "+time.Now().Format(time.RFC3339Nano))
						}
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	annotate(t, c, etcdv1alpha1.AnnotationLostMembers, b.Name+","+cc.Name)
	survivor := awaitManualRecoveryOffer(t, c, []string{a.Name})
	annotate(t, c, etcdv1alpha1.AnnotationRecoverFrom, survivor)
	waitForWithin(t, "the cluster recovered at size 3", recoveryTimeout, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
		return err == nil && c.Status.QuorumRecovery != nil && c.Status.QuorumRecovery.CompletionTime != nil && isAvailable(c, 3), err
	})
	stopWatch()
	<-watched
	if len(oldAfterForce) > 0 {
		t.Errorf("the client Service listed pods of the old membership after the survivor was forced: %v", oldAfterForce)
	}
	if qr := c.Status.QuorumRecovery; qr.Member != a.Name || !slices.Equal(qr.LostMembers, []string{b.Name, cc.Name}) {
		t.Errorf("status.quorumRecovery %+v: want a recovery from %s without %s and %s", *qr, a.Name, b.Name, cc.Name)
	}
	for uid, name := range old {
		pod := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err == nil && pod.UID == uid {
			t.Errorf("the pod of %s, done without, is still there", name)
		}
	}
	before.verifyAt(t, clientServiceEndpoint(t, c))
}
