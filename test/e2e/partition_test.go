//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
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
	// The taint eviction controller must evict nothing of the cluster itself: b's and c's
	// evictions are the test's, a's pod must stay.
	c := forcedAfterTheFloorNeverEvicted(ns, "split", 3)
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
	return stopKubeletOf(t, "kubelet")
}

// stopKubeletOf stops the kubelet the cluster scripts recorded as name: the first node's
// "kubelet", the second's "node2-kubelet".
func stopKubeletOf(t *testing.T, name string) *stoppedKubelet {
	t.Helper()
	runDir := envOr("CLUSTER_RUN_DIR", "/run/etcd-operator-cluster")
	raw, err := os.ReadFile(filepath.Join(runDir, "pids", name+".pid"))
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

// A node lost while its members' etcd runs on, then back after the survivor was forced: the
// old members must never serve through the client Service, and are not members of the forced
// cluster. Members b and c run on a second node (make test-partition starts one on this machine:
// a kubelet and containerd of its own) and a on the first, beside the operator. The second
// machine then stops: its kubelet is stopped (SIGSTOP) and every process of its pods frozen
// (the cgroup freezer), and it is cut off from a and from the operator (iptables), as a paused
// or cut-off virtual machine is. A cloud's node controller, or a person, then deletes its Node
// object: its pods are gone, and the operator forces a into a cluster of its own and makes the
// membership whole on the first node. Then the machine comes back in three steps: its etcd
// processes run again, still cut off from a (b and c, a majority of the old membership, serve
// at their own IPs); the partition heals (they reach a, which refuses them as removed, and etcd
// stops them); its kubelet starts afresh, as after a reboot (it registers its Node again, whose
// disk holds b's and c's kept claims). Checked all along from the force: the client Service
// never lists an old member's pod or IP, the cluster behind it never lists b's or c's member
// IDs, and clients connected through the Service with keepalive are never answered by b or c;
// a minute after the reboot nothing of the cluster runs on the second node; every write
// acknowledged before the loss and through the Service after the force is there at the end,
// and the history of a workload through the Service from the force on is linearizable.
func TestALostNodesMembersComeBackAfterTheForce(t *testing.T) {
	ctx := context.Background()
	c, _, node2, a, old, oldIDs := oneHereTwoOnTheSecondNode(t, "e2e-return-", "return")

	service := clientServiceEndpoint(t, c)
	// Clients connected through the Service before the loss, reading all along: half with
	// keepalive as kube-apiserver's etcd client has it, half without.
	readers := startServiceReaders(t, service, 6)
	before := startWriter(t, service, "/e2e/return/before")
	waitFor(t, "writes acknowledged before the loss", func(context.Context) (bool, error) { return before.ackedCount() > 20, nil })
	before.stop()
	time.Sleep(2 * time.Second) // every acknowledged write reaches a, which applied it

	cut, machine := stopTheSecondMachine(t, c, a, old)

	// From here, every look at the client Service's endpoints and at the membership behind it is
	// kept, with whether a had been forced by then.
	fenced := watchServiceForOldMembers(t, c, old, oldIDs)
	declareNodeGone(t, node2)
	waitForWithin(t, "the cluster recovered at size 3 on the first node", recoveryTimeout, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
		return err == nil && c.Status.QuorumRecovery != nil && c.Status.QuorumRecovery.CompletionTime != nil && isAvailable(c, 3), err
	})
	if qr := c.Status.QuorumRecovery; qr.Member != a.Name {
		t.Errorf("status.quorumRecovery %+v: want a recovery from %s", *qr, a.Name)
	}
	forced := c.Status.QuorumRecovery.ForcedTime.Time
	after := startWriter(t, service, "/e2e/return/after")
	// Its clients connect through the Service after the force. One running across the force
	// would not show what this test is about: a forced survivor lacks whatever the majority
	// committed that it had not heard of when it was cut off.
	workload := startWorkload(t, service)
	waitFor(t, "writes acknowledged through the Service after the force", func(context.Context) (bool, error) { return after.ackedCount() > 20, nil })

	// a was restarted to be forced: its new IP is cut off from the old members too.
	forcedA := getPod(t, c.Namespace, a.Name)
	for _, p := range old {
		cut.drop(t, forcedA.Status.PodIP, p.Status.PodIP)
	}

	// The machine comes back, still cut off from a and from the operator: its etcd processes run
	// again with the old membership and the connections they had, and its kubelet is still
	// stopped. b and c are a majority of the old membership: they serve at their own IPs.
	machine.thaw(t)
	waitForWithin(t, "an old member serving at its own IP after the return", time.Minute, func(context.Context) (bool, error) {
		return oldMemberServes(old[0].Status.PodIP) || oldMemberServes(old[1].Status.PodIP), nil
	})
	t.Logf("after the return, behind the partition, the old members serve at their own IPs")
	// The partition heals: the old members reach a, which refuses them as removed members, and
	// etcd stops a member that learns it was removed.
	cut.heal(t)
	waitForWithin(t, "the old members stopped once they reached a", 2*time.Minute, func(context.Context) (bool, error) {
		return !oldMemberServes(old[0].Status.PodIP) && !oldMemberServes(old[1].Status.PodIP), nil
	})
	t.Logf("the old members stopped serving once they reached the forced member")
	// The machine's kubelet starts afresh, as after a reboot: it registers its Node again and
	// ends the pods the API server no longer has. The old members' claims, kept, are on that
	// node: nothing of the cluster may run there.
	machine.restartKubelet(t)
	waitRegisteredAndReady(t, node2)
	holdsFor(t, time.Minute, "nothing of the cluster runs on the returned node", func(ctx context.Context) (string, error) {
		for _, p := range memberPods(t, c) {
			if p.Spec.NodeName == node2 {
				return "pod " + p.Name + " is on " + node2, nil
			}
		}
		for _, p := range old {
			if oldMemberServes(p.Status.PodIP) {
				return "old member " + p.Name + " serves at " + p.Status.PodIP, nil
			}
		}
		return "", nil
	})
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil || !isAvailable(c, 3) {
		t.Errorf("the cluster is not Available at size 3 after the return: %v, %+v", err, c.Status)
	}
	after.stop()
	// A connection made through the Service goes on to the pod it was sent to, whatever the
	// Service lists later: the node's connection tracking keeps the flow's address. A client
	// without keepalive that connected to b before the loss keeps that connection through the
	// outage, and b, back and not yet told it was removed, answers on it. Keepalive drops the
	// connection while b does not answer.
	withKeepAlive, without := readers.answeredByOldMembersSince(forced, oldIDs)
	t.Logf("readers without keepalive answered by an old member after the force: %v", without)
	if len(withKeepAlive) > 0 {
		t.Errorf("readers with keepalive, connected through the Service, were answered by an old member after the force: %v", withKeepAlive)
	}
	if sightings := fenced.stop(); len(sightings) > 0 {
		t.Errorf("after a was forced, the client Service showed old members: %v", sightings)
	}
	before.verifyAt(t, service)
	after.verifyAt(t, service)
	counts := checkLinearizable(t, workload)
	t.Logf("linearizable: %+v", counts)
}

// returnWatch is how long a lost node, back while the forced survivor cannot restart, is
// watched for a member the recovery did without that starts again there.
const returnWatch = 75 * time.Second

// A lost node back while the forced survivor restarts: the members a recovery did without
// never start again on their old data. Members b and c run on a second node and a on the
// first, as in the test above; the second machine stops and is cut off, its Node object is
// deleted, and the operator forces a into a cluster of one. Once a serves alone it is
// restarted without --force-new-cluster, and until it is back the cluster answers nobody.
// Here the first node is cordoned as soon as a's forced pod is bound to it, so that its next
// pod finds no node and the cluster stays so while the second machine comes back, as after a
// reboot: its processes gone, the partition healed, its kubelet started afresh, registering
// its Node again. That node's disk still holds b's and c's claims, and in the old membership
// kept there b and c are a quorum: started there, they would serve the old cluster beside the
// forced one. For returnWatch from the return, then on until the cluster is whole again: no
// pod of b or c is bound to the returned node, the client Service never lists a pod of b or c,
// and nothing at b's or c's addresses, nor behind the Service, answers as b or c (their member
// IDs in the old membership). Then the first node takes pods again, and the cluster serves at
// size 3 without b's and c's member IDs, with every write acknowledged before the loss.
func TestALostNodesMembersStayDownWhileTheSurvivorRestarts(t *testing.T) {
	ctx := context.Background()
	c, node1, node2, a, old, oldIDs := oneHereTwoOnTheSecondNode(t, "e2e-restart-", "restart")

	service := clientServiceEndpoint(t, c)
	before := startWriter(t, service, "/e2e/restart/before")
	waitFor(t, "writes acknowledged before the loss", func(context.Context) (bool, error) { return before.ackedCount() > 20, nil })
	before.stop()
	time.Sleep(2 * time.Second) // every acknowledged write reaches a, which applied it

	cut, machine := stopTheSecondMachine(t, c, a, old)
	declareNodeGone(t, node2)

	// The pod a is forced in runs on the first node; a's next pod must find none.
	var forcedPod corev1.Pod
	if err := pollUntil(ctx, recoveryTimeout, func(context.Context) (bool, error) {
		for _, p := range memberPods(t, c) {
			if p.Name == a.Name && p.Annotations[resources.AnnotationForceNewCluster] != "" && p.Spec.NodeName != "" {
				forcedPod = p
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("a's forced pod bound to a node: %v", err)
	}
	cordon(t, node1, true)
	if forcedPod.Spec.NodeName != node1 {
		t.Fatalf("a's forced pod %s is on %s, not %s", forcedPod.UID, forcedPod.Spec.NodeName, node1)
	}
	t.Logf("a's forced pod (%s) bound to %s; %s cordoned", forcedPod.UID, node1, node1)
	waitForWithin(t, "a served alone, and its forced pod gone", recoveryTimeout, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		if qr := c.Status.QuorumRecovery; qr == nil || qr.ForcedTime == nil || qr.ServedTime == nil {
			return false, nil
		}
		return !slices.ContainsFunc(memberPods(t, c), func(p corev1.Pod) bool { return p.UID == forcedPod.UID }), nil
	})
	if qr := c.Status.QuorumRecovery; qr.Member != a.Name || !slices.Equal(slices.Sorted(slices.Values(qr.LostMembers)), []string{old[0].Name, old[1].Name}) {
		t.Errorf("status.quorumRecovery %+v: want a recovery from %s without %s and %s", *qr, a.Name, old[0].Name, old[1].Name)
	}
	for _, p := range memberPods(t, c) {
		if p.Name == a.Name && p.Spec.NodeName != "" {
			t.Fatalf("a's pod after the forced one (%s) was bound to %s before the cordon: the cluster was not held unreachable", p.UID, p.Spec.NodeName)
		}
	}
	t.Logf("a served alone at %s; its forced pod is gone, and its next pod finds no node", c.Status.QuorumRecovery.ServedTime)

	// The second machine comes back as after a reboot, with b's and c's claims on its disk.
	machine.reboot(t)
	cut.heal(t)
	machine.restartKubelet(t)
	returned := time.Now()
	waitRegisteredAndReady(t, node2)
	for _, p := range old {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.PVCName(p.Name)}, pvc); err != nil {
			t.Fatalf("the claim of %s, which holds its data on %s: %v", p.Name, node2, err)
		}
	}
	t.Logf("%s back and Ready %s after its kubelet started; the claims of %s and %s are there", node2, time.Since(returned).Round(time.Second), old[0].Name, old[1].Name)

	// Each thing seen is kept once, with when it was first seen.
	var sightings []string
	seen := map[string]bool{}
	for time.Since(returned) < returnWatch {
		at := time.Now().UTC().Format("15:04:05.000")
		for _, what := range oldMembersSeen(t, c, old, oldIDs, node2, service) {
			if !seen[what] {
				seen[what] = true
				sightings = append(sightings, what+" (from "+at+")")
			}
		}
		for _, p := range memberPods(t, c) {
			if p.Name == a.Name && p.Spec.NodeName != "" {
				t.Fatalf("a's pod %s was bound to %s while the node was cordoned", p.UID, p.Spec.NodeName)
			}
		}
		time.Sleep(time.Second)
	}
	if len(sightings) > 0 {
		t.Fatalf("while a restarted, members done without came back on %s:\n%s", node2, strings.Join(sightings, "\n"))
	}
	t.Logf("for %s after %s came back, no pod of %s or %s was bound there, listed by the Service or answered as an old member", returnWatch, node2, old[0].Name, old[1].Name)

	cordon(t, node1, false)
	waitForWithin(t, "the cluster serving at size 3 again", recoveryTimeout, func(ctx context.Context) (bool, error) {
		if seen := oldMembersSeen(t, c, old, oldIDs, node2, service); len(seen) > 0 {
			return false, fmt.Errorf("once a could restart, members done without came back: %v", seen)
		}
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
		return err == nil && isAvailable(c, 3), err
	})
	members, err := memberList(service)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if slices.Contains(oldIDs, m.ID) {
			t.Errorf("member %x (%s) of the old membership is a member again", m.ID, m.Name)
		}
	}
	t.Logf("members at the end: %v", podsByNode(memberPods(t, c)))
	before.verifyAt(t, service)
}

// oldMembersSeen looks once for members a recovery did without (old, of member IDs oldIDs)
// back on node: a pod of theirs bound to it, listed by the client Service, or anything at
// their old pods' IPs or their pods' current ones, or behind the Service, that answers a read
// or a member list as one of them.
func oldMembersSeen(t *testing.T, c *etcdv1alpha1.EtcdCluster, old []corev1.Pod, oldIDs []uint64, node, service string) []string {
	t.Helper()
	oldNames := map[string]bool{}
	ips := map[string]bool{}
	for _, p := range old {
		oldNames[p.Name] = true
		ips[p.Status.PodIP] = true
	}
	var seen []string
	for _, p := range memberPods(t, c) {
		if !oldNames[p.Name] {
			continue
		}
		if p.Spec.NodeName == node {
			seen = append(seen, fmt.Sprintf("pod %s of %s (%s) bound to %s", p.UID, p.Name, p.Status.Phase, node))
		}
		if p.Status.PodIP != "" {
			ips[p.Status.PodIP] = true
		}
	}
	eps := &discoveryv1.EndpointSliceList{}
	if err := k8sClient.List(context.Background(), eps, client.InNamespace(c.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: resources.ClientServiceName(c.Name)}); err != nil {
		t.Fatal(err)
	}
	for _, s := range eps.Items {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && oldNames[e.TargetRef.Name] {
				seen = append(seen, fmt.Sprintf("pod %s of %s at %v among the client Service's endpoints", e.TargetRef.UID, e.TargetRef.Name, e.Addresses))
			}
		}
	}
	var mu sync.Mutex
	var probes sync.WaitGroup
	for ip := range ips {
		probes.Go(func() {
			if id, err := memberAnsweringAt(ip); err == nil && slices.Contains(oldIDs, id) {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("a read at %s answered by old member %x", ip, id))
				mu.Unlock()
			}
		})
	}
	probes.Go(func() {
		members, err := memberList(service)
		if err != nil {
			return
		}
		for _, m := range members {
			if slices.Contains(oldIDs, m.ID) {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("member %x (%s) in the membership behind the Service", m.ID, m.Name))
				mu.Unlock()
			}
		}
	})
	probes.Wait()
	return seen
}

// oneMemberHereTwoThere creates c, of size 1, and grows it to 3 with its first member a on
// node1 and the two others on node2, one node cordoned at a time.
func oneMemberHereTwoThere(t *testing.T, c *etcdv1alpha1.EtcdCluster, node1, node2 string) (a corev1.Pod, there []corev1.Pod) {
	t.Helper()
	cordon(t, node2, true)
	if err := k8sClient.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, c, 1)
	cordon(t, node1, true)
	cordon(t, node2, false)
	scaleTo(t, c, 3)
	cordon(t, node1, false)
	for _, p := range memberPods(t, c) {
		if p.Spec.NodeName == node1 {
			a = p
		} else {
			there = append(there, p)
		}
	}
	if a.Name == "" || len(there) != 2 || there[0].Spec.NodeName != node2 || there[1].Spec.NodeName != node2 {
		t.Fatalf("want one member on %s and two on %s: %v", node1, node2, podsByNode(memberPods(t, c)))
	}
	return a, there
}

// stopTheSecondMachine cuts the members on the second node (old) off from a and from the
// operator, stops the machine (stopSecondNode), and waits until the operator finds the quorum
// lost: it must force nothing while the second node's Node object is there.
func stopTheSecondMachine(t *testing.T, c *etcdv1alpha1.EtcdCluster, a corev1.Pod, old []corev1.Pod) (*partition, *stoppedMachine) {
	t.Helper()
	cut := newPartition(t)
	for _, p := range old {
		cut.drop(t, a.Status.PodIP, p.Status.PodIP)
		cut.drop(t, operatorPodIP(t), p.Status.PodIP)
	}
	machine := stopSecondNode(t)
	waitForWithin(t, "quorum lost", recoveryTimeout, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		return d != nil && d.Reason == etcdv1alpha1.ReasonQuorumLost && c.Status.QuorumLostTime != nil, nil
	})
	if qr := c.Status.QuorumRecovery; qr != nil && qr.ForcedTime != nil {
		t.Fatalf("a was forced while the second node's Node object was there: %+v", *qr)
	}
	return cut, machine
}

// waitRegisteredAndReady waits for a node's kubelet, started afresh, to register its Node and
// report it Ready.
func waitRegisteredAndReady(t *testing.T, node string) {
	t.Helper()
	waitForWithin(t, "node "+node+" registered and Ready again", 2*time.Minute, func(ctx context.Context) (bool, error) {
		n := &corev1.Node{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return false, ignoreNotFound(err)
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// declareNodeGone deletes the Node object of a machine that stopped, as a cloud's node
// controller or a person does: its pods go with it.
func declareNodeGone(t *testing.T, node string) {
	t.Helper()
	if err := k8sClient.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted Node %s: its machine is declared gone", node)
}

// forcedAfterTheFloorNeverEvicted is a cluster of the partition tests: quorum-loss recovery
// policy ForceNewCluster after the 2-minute floor, and pods that tolerate a node's unreachable
// and not-ready taints for ever, so that no taint eviction takes them, only the test.
func forcedAfterTheFloorNeverEvicted(ns, name string, size int32) *etcdv1alpha1.EtcdCluster {
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size:    size,
			Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
			QuorumLossRecovery: etcdv1alpha1.QuorumLossRecoverySpec{
				Policy: etcdv1alpha1.QuorumLossRecoveryForceNewCluster,
				After:  &metav1.Duration{Duration: membership.MinRecoveryAfter},
			},
		},
	}
	c.Spec.PodTemplate.Tolerations = []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	return c
}

// nodeOtherThan is a node of the cluster other than name (the local cluster has two at most).
func nodeOtherThan(t *testing.T, name string) string {
	t.Helper()
	nodes := &corev1.NodeList{}
	if err := k8sClient.List(context.Background(), nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Name != name {
			return n.Name
		}
	}
	t.Fatalf("no node other than %s", name)
	return ""
}

// cordon marks a node unschedulable, or schedulable again; the test's cleanup makes it
// schedulable whatever happened.
func cordon(t *testing.T, node string, unschedulable bool) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := k8sClient.Patch(context.Background(), n, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if unschedulable {
		t.Cleanup(func() {
			_ = ignoreNotFound(k8sClient.Patch(context.Background(), n, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`))))
		})
	}
}

func podsByNode(pods []corev1.Pod) map[string][]string {
	out := map[string][]string{}
	for _, p := range pods {
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p.Name)
	}
	return out
}

// memberIDsAt asks the member at endpoint for the etcd member IDs of pods (by member name).
func memberIDsAt(t *testing.T, endpoint string, pods []corev1.Pod) []uint64 {
	t.Helper()
	members, err := memberList(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, p := range pods {
		for _, m := range members {
			if m.Name == p.Name {
				ids = append(ids, m.ID)
			}
		}
	}
	if len(ids) != len(pods) {
		t.Fatalf("member IDs of %d pods found, want %d: %+v", len(ids), len(pods), members)
	}
	return ids
}

func memberList(endpoint string) ([]*etcdserverpb.Member, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	return resp.Members, nil
}

// oldMemberServes: a linearizable read at ip's client port succeeded.
func oldMemberServes(ip string) bool {
	_, err := memberAnsweringAt(ip)
	return err == nil
}

// memberAnsweringAt makes a linearizable read at ip's client port and says which member
// answered it (the response header's member ID).
func memberAnsweringAt(ip string) (uint64, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ip + ":" + strconv.Itoa(resources.ClientPort)}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/e2e/return/probe")
	if err != nil {
		return 0, err
	}
	return resp.Header.MemberId, nil
}

// serviceWatch records, every 200 ms once the survivor is forced, any old member the client
// Service shows: an old pod or IP among its endpoints, or an old member ID in the membership a
// client of the Service is given.
type serviceWatch struct {
	cancel    context.CancelFunc
	done      chan struct{}
	sightings []string
}

func watchServiceForOldMembers(t *testing.T, c *etcdv1alpha1.EtcdCluster, old []corev1.Pod, oldIDs []uint64) *serviceWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &serviceWatch{cancel: cancel, done: make(chan struct{})}
	oldPods := map[string]string{}
	for _, p := range old {
		oldPods[string(p.UID)] = p.Name
		oldPods[p.Status.PodIP] = p.Name
	}
	service := clientServiceEndpoint(t, c)
	go func() {
		defer close(w.done)
		forced := false
		for ctx.Err() == nil {
			now := time.Now().Format(time.RFC3339Nano)
			cur := &etcdv1alpha1.EtcdCluster{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), cur); err == nil && cur.Status.QuorumRecovery != nil && cur.Status.QuorumRecovery.ForcedTime != nil {
				forced = true
			}
			if !forced {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			eps := &discoveryv1.EndpointSliceList{}
			if err := k8sClient.List(ctx, eps, client.InNamespace(c.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: resources.ClientServiceName(c.Name)}); err == nil {
				for _, s := range eps.Items {
					for _, e := range s.Endpoints {
						if e.TargetRef != nil && oldPods[string(e.TargetRef.UID)] != "" {
							w.sightings = append(w.sightings, "pod "+oldPods[string(e.TargetRef.UID)]+" among the endpoints at "+now)
						}
						for _, addr := range e.Addresses {
							if oldPods[addr] != "" {
								w.sightings = append(w.sightings, "IP "+addr+" of "+oldPods[addr]+" among the endpoints at "+now)
							}
						}
					}
				}
			}
			if members, err := memberList(service); err == nil {
				for _, m := range members {
					if slices.Contains(oldIDs, m.ID) {
						w.sightings = append(w.sightings, fmt.Sprintf("member %x (%s) in the membership behind the Service at %s", m.ID, m.Name, now))
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *serviceWatch) stop() []string {
	w.cancel()
	<-w.done
	return w.sightings
}

// stoppedMachine is the second node stopped as a paused machine is: its kubelet stopped
// (SIGSTOP) and every process of its pods frozen by the cgroup freezer, which the second node's
// pods all sit under (hack/cluster/second-node.sh).
type stoppedMachine struct {
	kubelet *stoppedKubelet
	freezer string
}

func stopSecondNode(t *testing.T) *stoppedMachine {
	t.Helper()
	freezer := filepath.Join("/sys/fs/cgroup/freezer", envOr("E2E_SECOND_NODE_CGROUP", "etcd-operator-node2"), "freezer.state")
	if err := os.WriteFile(freezer, []byte("FROZEN"), 0o644); err != nil {
		t.Fatalf("freeze the second node's pods: %v", err)
	}
	m := &stoppedMachine{freezer: freezer}
	t.Cleanup(func() { m.thaw(t) })
	m.kubelet = stopKubeletOf(t, "node2-kubelet")
	return m
}

// reboot ends every process of the second node's pods, as a machine that restarts loses
// them, and thaws their cgroups: killed while frozen, they end without running again. The
// kubelet stays stopped.
func (m *stoppedMachine) reboot(t *testing.T) {
	t.Helper()
	if m.freezer == "" {
		t.Fatal("the second node's pods are not frozen")
	}
	root := filepath.Dir(m.freezer)
	var killed []int
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "cgroup.procs" {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, field := range strings.Fields(string(raw)) {
			pid, err := strconv.Atoi(field)
			if err != nil {
				return err
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed = append(killed, pid)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("end the second node's pods' processes: %v", err)
	}
	m.thaw(t)
	if err := pollUntil(context.Background(), 30*time.Second, func(context.Context) (bool, error) {
		return !slices.ContainsFunc(killed, processRuns), nil
	}); err != nil {
		t.Fatalf("the second node's pods' processes (%v) did not end: %v", killed, err)
	}
	t.Logf("ended %d processes of the second node's pods, as a reboot does", len(killed))
}

// processRuns: pid is a process that has not ended (a zombie has).
func processRuns(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, state, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(state, "Z")
}

// thaw runs the pods' processes again; the kubelet stays stopped.
func (m *stoppedMachine) thaw(t *testing.T) {
	if m.freezer == "" {
		return
	}
	if err := os.WriteFile(m.freezer, []byte("THAWED"), 0o644); err != nil {
		t.Errorf("thaw the second node's pods: %v", err)
	}
	m.freezer = ""
}

// restartKubelet ends the stopped kubelet and starts it again with the same command line, as a
// rebooted machine starts its kubelet; the new process is recorded where the cluster scripts
// find it (hack/cluster/second-node.sh down stops it).
func (m *stoppedMachine) restartKubelet(t *testing.T) {
	t.Helper()
	pid := m.kubelet.pid
	args, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Split(strings.TrimRight(string(args), "\x00"), "\x00")
	m.kubelet.resume(t)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if err := pollUntil(context.Background(), 30*time.Second, func(context.Context) (bool, error) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return os.IsNotExist(err), nil
	}); err != nil {
		t.Fatalf("the second node's kubelet (PID %d) did not end: %v", pid, err)
	}
	logPath := filepath.Join(envOr("CLUSTER_DIR", "/var/lib/etcd-operator-cluster"), "logs", "node2-kubelet.log")
	logFile, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(exe, argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the second node's kubelet again: %v", err)
	}
	pidFile := filepath.Join(envOr("CLUSTER_RUN_DIR", "/run/etcd-operator-cluster"), "pids", "node2-kubelet.pid")
	if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d %s\n", cmd.Process.Pid, exe)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted the second node's kubelet: PID %d", cmd.Process.Pid)
	_ = cmd.Process.Release()
}

// serviceReaders are clients connected through the client Service, each reading a key every
// 500 ms over its one connection and keeping which member answered each read (the response
// header's member ID). Even ones use keepalive as kube-apiserver's etcd client does (ping after
// 30 s without a frame, drop the connection after 10 s more); odd ones use none.
type serviceReaders struct {
	mu      sync.Mutex
	answers []readerAnswer
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

type readerAnswer struct {
	reader    int
	keepAlive bool
	at        time.Time
	member    uint64
}

func startServiceReaders(t *testing.T, endpoint string, n int) *serviceReaders {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &serviceReaders{cancel: cancel}
	for i := range n {
		cfg := clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
		keepAlive := i%2 == 0
		if keepAlive {
			cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 30*time.Second, 10*time.Second
		}
		cli, err := clientv3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.done.Go(func() {
			defer func() { _ = cli.Close() }()
			for ctx.Err() == nil {
				readCtx, cancelRead := context.WithTimeout(ctx, 2*time.Second)
				resp, err := cli.Get(readCtx, "/e2e/return/read")
				cancelRead()
				if err == nil {
					r.mu.Lock()
					r.answers = append(r.answers, readerAnswer{reader: i, keepAlive: keepAlive, at: time.Now(), member: resp.Header.MemberId})
					r.mu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

func (r *serviceReaders) stop() {
	r.cancel()
	r.done.Wait()
}

// answeredByOldMembersSince stops the readers and says, for those with keepalive and those
// without, which were answered by one of oldIDs after since, and how often.
func (r *serviceReaders) answeredByOldMembersSince(since time.Time, oldIDs []uint64) (withKeepAlive, without map[int]int) {
	r.stop()
	withKeepAlive, without = map[int]int{}, map[int]int{}
	for _, a := range r.answers {
		if a.at.Before(since) || !slices.Contains(oldIDs, a.member) {
			continue
		}
		if a.keepAlive {
			withKeepAlive[a.reader]++
		} else {
			without[a.reader]++
		}
	}
	return withKeepAlive, without
}

// oneHereTwoOnTheSecondNode is a 3-member cluster under policy ForceNewCluster whose pods the
// taint eviction never takes (they go only with their Node object): a on node1, the node the
// operator runs on, and the old members b and c on node2, the second node (skipped without
// one). It returns their member IDs too.
func oneHereTwoOnTheSecondNode(t *testing.T, nsPrefix, name string) (c *etcdv1alpha1.EtcdCluster, node1, node2 string, a corev1.Pod, old []corev1.Pod, oldIDs []uint64) {
	t.Helper()
	node2 = os.Getenv("E2E_SECOND_NODE")
	if node2 == "" {
		t.Skip("needs a second node: run with make test-partition")
	}
	node1 = nodeOtherThan(t, node2)
	c = forcedAfterTheFloorNeverEvicted(testNamespace(t, nsPrefix), name, 1)
	a, old = oneMemberHereTwoThere(t, c, node1, node2)
	oldIDs = memberIDsAt(t, a.Status.PodIP+":"+strconv.Itoa(resources.ClientPort), old)
	t.Logf("a %s on %s; on %s: %s %s, %s %s (member IDs %x)", a.Name, node1, node2, old[0].Name, old[0].Status.PodIP, old[1].Name, old[1].Status.PodIP, oldIDs)
	return c, node1, node2, a, old, oldIDs
}
