//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/test/linearizability"
)

// recoveryTimeout bounds a recovery from quorum loss: the copy of the survivor's data, its
// forced restart, and the lost members added back one at a time as learners, after the wait of
// quorumLossRecovery.after: 4 to 5 minutes on the machine the suite was written on, three
// other tests beside it; the margin is for CI's slower one.
const recoveryTimeout = 10 * time.Minute

// A cluster whose majority lost its volumes for good is recovered from the survivor with the
// furthest log, with every key the survivor had; first a copy of its data is kept. With the
// default policy (Manual) nothing happens until the user names the member. Under write load,
// what is lost is bounded: no acknowledged write at or below the survivor's revision. With
// every member's volume lost, policy FromLatestBackup restores the newest backup. Members whose
// volumes' node is gone (their pods find no node) count as lost once that has lasted
// quorumLossRecovery.after, and their claims are kept. With password authentication, survivors
// that restarted cannot answer without a quorum: their logs are read from their data instead.
// The cases run beside each other and the other parallel tests, each on its own cluster: most of
// their time is the wait of quorumLossRecovery.after (2 minutes at least), which takes no CPU.
func TestQuorumLostForGoodIsRecovered(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		size      int32
		lose      int
		policy    etcdv1alpha1.QuorumLossRecoveryPolicy
		underLoad bool
		// loss: how the members are lost.
		loss memberLoss
		// auth: authentication on, with a password (no TLS). Without a quorum no one can
		// authenticate: once the survivors have restarted and forgotten the operator's token, no
		// survivor answers the operator, and their logs are read from their data.
		auth bool
		// extended: run only by make test-e2e-extended (E2E_EXTENDED=1), not in CI. Each such
		// case takes a path another case in CI takes too, with a difference no code branches on
		// (the plain force is also the one under write load; five members are also the
		// authentication case's; the day-two matrix's covering cells recover by annotation on
		// clusters of 3 and 5, with and without TLS and authentication), and keeps its minutes
		// of a parallel slot out of CI's hour.
		extended bool
	}{
		{"3 members lose 2, policy ForceNewCluster", 3, 2, etcdv1alpha1.QuorumLossRecoveryForceNewCluster, false, claimsGone, false, true},
		{"5 members lose 3, policy ForceNewCluster", 5, 3, etcdv1alpha1.QuorumLossRecoveryForceNewCluster, false, claimsGone, false, true},
		{"3 members lose 2, policy Manual, then the annotation", 3, 2, etcdv1alpha1.QuorumLossRecoveryManual, false, claimsGone, false, true},
		{"3 members lose 2 under write load", 3, 2, etcdv1alpha1.QuorumLossRecoveryForceNewCluster, true, claimsGone, false, false},
		{"3 members lose the node of 2 volumes, policy ForceNewCluster", 3, 2, etcdv1alpha1.QuorumLossRecoveryForceNewCluster, false, volumesNodeGone, false, false},
		{"3 members, the node of 2 stops answering, policy ForceNewCluster", 3, 2, etcdv1alpha1.QuorumLossRecoveryForceNewCluster, false, nodeStopsAnswering, false, false},
		{"5 members with password authentication lose 3 in a restart, policy ForceNewCluster", 5, 3, etcdv1alpha1.QuorumLossRecoveryForceNewCluster, false, claimsGoneInARestart, true, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.extended && os.Getenv("E2E_EXTENDED") == "" {
				t.Skip("an extended case, not in CI: run with make test-e2e-extended")
			}
			inParallel(t, 260*time.Second)
			ctx := context.Background()
			ns := testNamespace(t, "e2e-quorum-")
			c := &etcdv1alpha1.EtcdCluster{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("q%d", i), Namespace: ns},
				Spec: etcdv1alpha1.EtcdClusterSpec{
					Size:    tc.size,
					Version: etcdVersion,
					Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
					QuorumLossRecovery: etcdv1alpha1.QuorumLossRecoverySpec{
						Policy: tc.policy,
						After:  &metav1.Duration{Duration: membership.MinRecoveryAfter},
					},
				},
			}
			if tc.loss == nodeStopsAnswering {
				// Its pods may be placed on the test's node without a kubelet, and are evicted
				// 10 s after it stops answering rather than the default 5 min.
				c.Spec.PodTemplate.Tolerations = deadNodeTolerations
			}
			user, password := "", ""
			if tc.auth {
				user, password = "root", quorumLossRootPassword
				root := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: ns}, StringData: map[string]string{"password": password}}
				if err := k8sClient.Create(ctx, root); err != nil {
					t.Fatal(err)
				}
				c.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: root.Name}
			}
			if err := k8sClient.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
			waitAvailable(t, c, int(tc.size))
			if tc.auth {
				// Until authentication is on, any password works.
				waitFor(t, "authentication on", func(ctx context.Context) (bool, error) {
					cl, err := clientv3.New(clientv3.Config{Endpoints: []string{clientServiceEndpoint(t, c)}, DialTimeout: 2 * time.Second,
						Logger: zap.NewNop(), Username: user, Password: "wrong"})
					if err == nil {
						_, err = cl.Put(ctx, "/e2e/auth-probe", "x")
						_ = cl.Close()
					}
					return err != nil && strings.Contains(err.Error(), "authentication failed"), nil
				})
			}

			// Keys written, then time for every member to apply them: a write a quorum
			// acknowledged may not be on the survivor yet, and would then be lost, as etcd's own
			// disaster recovery would lose it. verify reads them back after the recovery.
			w := startWriterAs(t, clientServiceEndpoint(t, c), "/e2e/quorum", user, password)
			waitFor(t, "writes acknowledged", func(context.Context) (bool, error) { return w.ackedCount() > 50, nil })
			w.stop()
			waitMembersAtOneRevision(t, c, user, password)
			var load *revisionWriter
			if tc.underLoad {
				load = startRevisionWriter(t, clientServiceEndpoint(t, c), "/e2e/load")
				waitFor(t, "writes under load acknowledged", func(context.Context) (bool, error) { return load.ackedCount() > 20, nil })
			}

			lost := loseMembers(t, c, tc.lose, tc.loss)
			t.Logf("lost members %v", lost)
			survivors := slices.DeleteFunc(memberNames(c), func(n string) bool { return slices.Contains(lost, n) })

			if tc.policy == etcdv1alpha1.QuorumLossRecoveryManual {
				survivor := awaitManualRecoveryOffer(t, c, survivors)
				annotate(t, c, etcdv1alpha1.AnnotationRecoverFrom, survivor)
			}
			if tc.loss == nodeStopsAnswering {
				awaitDeclarationOfLostMembers(t, c, lost)
				annotate(t, c, etcdv1alpha1.AnnotationLostMembers, strings.Join(lost, ","))
			}

			// A fresh linearizability workload from the moment the forced survivor serves,
			// through the regrowth that follows: clients of the forced cluster must see one
			// history. (The workload has no password; the authentication case has the writer
			// only.)
			var workload *linearizability.Workload
			if !tc.auth {
				waitForWithin(t, "the forced survivor serving", recoveryTimeout, func(ctx context.Context) (bool, error) {
					err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
					return err == nil && c.Status.QuorumRecovery != nil && c.Status.QuorumRecovery.ServedTime != nil, err
				})
				workload = startWorkload(t, clientServiceEndpoint(t, c))
			}
			waitForWithin(t, "the cluster recovered at its spec size", recoveryTimeout, func(ctx context.Context) (bool, error) {
				err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
				return err == nil && isAvailable(c, int(tc.size)) && c.Status.QuorumRecovery != nil && c.Status.QuorumRecovery.CompletionTime != nil, err
			})
			logPrinterColumns(t, ns)
			if workload != nil {
				t.Logf("linearizable from the force on: %+v", checkLinearizable(t, workload))
			}

			qr := c.Status.QuorumRecovery
			t.Logf("status.quorumRecovery: %+v, preserved %+v", *qr, qr.PreservedData)
			if !slices.Contains(survivors, qr.Member) {
				t.Errorf("recovered from %s, which is not a survivor %v", qr.Member, survivors)
			}
			// Done without: the lost, and the survivors not chosen (stopped before the force,
			// their claims kept).
			doneWithout := slices.Sorted(slices.Values(slices.Concat(lost, slices.DeleteFunc(slices.Clone(survivors), func(n string) bool { return n == qr.Member }))))
			if got := slices.Sorted(slices.Values(qr.LostMembers)); !slices.Equal(got, doneWithout) {
				t.Errorf("lostMembers %v, want %v", got, doneWithout)
			}
			if qr.PreservedData == nil || qr.PreservedData.Revision == 0 || qr.PreservedData.DBSHA256 == "" || qr.ForcedTime == nil || qr.ServedTime == nil {
				t.Errorf("the record misses a step: %+v", *qr)
			}
			copyClaim := &corev1.PersistentVolumeClaim{}
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.QuorumRecoveryClaimName(c.Name)}, copyClaim); err != nil {
				t.Errorf("the claim holding the copy of the survivor's data: %v", err)
			}
			if _, ok := c.Annotations[etcdv1alpha1.AnnotationRecoverFrom]; ok {
				t.Errorf("the %s annotation is left after the recovery: a later loss would be recovered on an old leave", etcdv1alpha1.AnnotationRecoverFrom)
			}
			for _, m := range c.Status.Members {
				if slices.Contains(lost, m.Name) {
					t.Errorf("lost member %s is still listed", m.Name)
				}
			}
			for _, pod := range memberPods(t, c) {
				if pod.Annotations[resources.AnnotationForceNewCluster] != "" {
					t.Errorf("pod %s still runs with --force-new-cluster", pod.Name)
				}
			}
			if tc.loss == volumesNodeGone || tc.loss == nodeStopsAnswering {
				for _, name := range lost {
					pvc := &corev1.PersistentVolumeClaim{}
					if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.PVCName(name)}, pvc); err != nil {
						t.Errorf("the claim of %s, whose node is gone, was not kept: %v", name, err)
						continue
					}
					if pvc.Labels[resources.LabelCluster] != "" || pvc.Labels["etcd.database.dev/retained-from"] != c.Name {
						t.Errorf("claim %s labels %v: want it released from the cluster, retained-from=%s", pvc.Name, pvc.Labels, c.Name)
					}
				}
			}
			if tc.auth {
				events := &corev1.EventList{}
				if err := k8sClient.List(ctx, events, client.InNamespace(ns)); err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return e.Reason == "ReadLogs" }) {
					t.Errorf("no ReadLogs event: the survivors could not answer, so their logs had to be read from their data")
				}
			}
			w.verify(t)
			if load != nil {
				load.verifyUpTo(t, qr.PreservedData.Revision)
			}
		})
	}
	t.Run("3 members lose all 3, policy FromLatestBackup", func(t *testing.T) {
		// Extended too: the matrix's covering cells restore lost clusters of 1, 3 and 5 members
		// from their latest backups, with and without TLS and authentication, and so does the
		// failpoint walk, crossing every failpoint on the way.
		if os.Getenv("E2E_EXTENDED") == "" {
			t.Skip("an extended case, not in CI: run with make test-e2e-extended")
		}
		inParallel(t, 170*time.Second)
		recoveredFromTheLatestBackup(t)
	})
}

// recoveredFromTheLatestBackup: a cluster whose every member lost its data is restored in place
// by the operator from the newest snapshot of its EtcdBackups: every key the snapshot has, and
// none written after it.
func recoveredFromTheLatestBackup(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t, "e2e-quorum-")
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "qb", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
			QuorumLossRecovery: etcdv1alpha1.QuorumLossRecoverySpec{
				Policy: etcdv1alpha1.QuorumLossRecoveryFromLatestBackup,
				After:  &metav1.Duration{Duration: membership.MinRecoveryAfter},
			},
		},
	}
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, c, 3)
	w := startWriter(t, clientServiceEndpoint(t, c), "/e2e/quorum")
	waitFor(t, "writes acknowledged", func(context.Context) (bool, error) { return w.ackedCount() > 50, nil })
	w.stop()

	claim := createClaim(t, ns, "backups")
	b := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: ns},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: c.Name, Destination: etcdv1alpha1.StorageLocation{
			PVC: &etcdv1alpha1.PVCLocation{ClaimName: claim.Name, SubPath: "snapshots"}}},
	}
	if err := k8sClient.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitBackupPhase(t, b, recoveryTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
	if b.Status.Phase != etcdv1alpha1.BackupCompleted {
		t.Fatalf("backup failed: %+v", b.Status)
	}
	art := b.Status.LastBackup
	before := plainClient(c)
	if before == nil {
		t.Fatal("no client for the cluster")
	}
	defer before.Close()
	if _, err := before.Put(ctx, "/e2e/after-backup", "x"); err != nil {
		t.Fatal(err)
	}

	lost := loseMembers(t, c, 3, claimsGone)
	t.Logf("lost members %v", lost)
	waitForWithin(t, "the cluster restored from the backup at its spec size", recoveryTimeout, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
		return err == nil && isAvailable(c, 3) && c.Status.QuorumRecovery != nil && c.Status.QuorumRecovery.CompletionTime != nil, err
	})
	logPrinterColumns(t, ns)

	qr := c.Status.QuorumRecovery
	t.Logf("status.quorumRecovery: %+v, backup %+v", *qr, qr.Backup)
	if qr.Member != "" || qr.Backup == nil || qr.Backup.EtcdBackup != b.Name || qr.Backup.SnapshotURI != art.URI || qr.Backup.Revision != art.Revision {
		t.Fatalf("the record %+v: want a recovery from %s's snapshot %s at revision %d", *qr, b.Name, art.URI, art.Revision)
	}
	if got := slices.Sorted(slices.Values(qr.LostMembers)); !slices.Equal(got, lost) {
		t.Errorf("lostMembers %v, want %v", got, lost)
	}
	rs := &etcdv1alpha1.EtcdRestore{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: qr.Backup.EtcdRestore}, rs); err != nil {
		t.Fatalf("the recovery's EtcdRestore: %v", err)
	}
	if rs.Status.Phase != etcdv1alpha1.RestoreCompleted || deref(rs.Status.RestoredRevision) != art.Revision {
		t.Errorf("EtcdRestore %s: %s at revision %d, want Completed at %d", rs.Name, rs.Status.Phase, deref(rs.Status.RestoredRevision), art.Revision)
	}
	for _, m := range c.Status.Members {
		if slices.Contains(lost, m.Name) {
			t.Errorf("lost member %s is still listed", m.Name)
		}
	}
	// Read through clients made now. One made before the loss is still backing off its
	// reconnects, each wait longer than the last, from the two minutes no member answered
	// (stop 35's CI waited out its minute on one); a new one dials the restored members at once.
	w.verifyAt(t, clientServiceEndpoint(t, c))
	cl := plainClient(c)
	if cl == nil {
		t.Fatal("no client for the restored cluster")
	}
	defer cl.Close()
	after, err := cl.Get(ctx, "/e2e/after-backup")
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Kvs) != 0 || after.Header.Revision != art.Revision+rs.Status.RevisionBump || rs.Status.RevisionBump == 0 {
		t.Errorf("the restored keyspace is at revision %d and has %d keys written after the backup; want revision %d bumped (by %d) and none",
			after.Header.Revision, len(after.Kvs), art.Revision, rs.Status.RevisionBump)
	}
}

// loseMembers deletes the claims and pods of the n members first in name order, as nodes and
// their disks lost for good would, and returns their names, sorted. They go while the cluster
// is paused, all at once as a lost node's do: one at a time, under a running operator, each
// would be a member whose volume is lost, removed and replaced while a quorum remains.
// memberLoss is how loseMembers loses members.
type memberLoss int

const (
	// claimsGone: their pods and claims are deleted.
	claimsGone memberLoss = iota
	// claimsGoneInARestart: as claimsGone, then the survivors' pods are deleted too and come
	// back, as after a power cut that took the lost members' disks. A restarted member knows
	// none of the tokens etcd gave before, and with password authentication nobody can log in
	// without a quorum: no survivor answers the operator. (A survivor that kept running still
	// accepts the token the operator's client already holds, and answers: whether the
	// operator's last client was made before the lost members' etcd had stopped was a race,
	// and stop 22's CI lost it.)
	claimsGoneInARestart
	// volumesNodeGone: their claims are made again, bound to volumes on a node that does not
	// exist: their pods find no node.
	volumesNodeGone
	// nodeStopsAnswering: their claims are made again, bound to volumes on a Node object with
	// no kubelet behind it: their pods are placed on it, and evicted once it is found not to
	// answer, but never end.
	nodeStopsAnswering
)

func loseMembers(t testing.TB, c *etcdv1alpha1.EtcdCluster, n int, how memberLoss) []string {
	t.Helper()
	ctx := context.Background()
	names := memberNames(c)[:n]
	patchSpec(t, c, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Paused = true })
	defer patchSpec(t, c, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Paused = false })
	claims := map[string]*corev1.PersistentVolumeClaim{}
	for _, name := range names {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.PVCName(name)}, pvc); err != nil {
			t.Fatal(err)
		}
		claims[name] = pvc
	}
	podIPs := map[string]string{} // where each member's etcd listened, to see it stop
	if how == claimsGoneInARestart {
		for _, pod := range memberPods(t, c) {
			podIPs[pod.Name] = pod.Status.PodIP
		}
	}
	for _, name := range names {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: resources.PVCName(name)}}
		if err := k8sClient.Delete(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
		if err := k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the lost members' pods and claims gone", func(ctx context.Context) (bool, error) {
		for _, name := range names {
			for _, obj := range []client.Object{&corev1.Pod{}, &corev1.PersistentVolumeClaim{}} {
				key := client.ObjectKey{Namespace: c.Namespace, Name: name}
				if _, claim := obj.(*corev1.PersistentVolumeClaim); claim {
					key.Name = resources.PVCName(name)
				}
				if err := k8sClient.Get(ctx, key, obj); err == nil || ignoreNotFound(err) != nil {
					return false, ignoreNotFound(err)
				}
			}
		}
		return true, nil
	})
	if how == claimsGoneInARestart {
		// The lost members' etcd first, so that the survivors come back to no quorum.
		waitEtcdStopped(t, names, podIPs)
		survivors := slices.DeleteFunc(memberNames(c), func(n string) bool { return slices.Contains(names, n) })
		for _, name := range survivors {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
			if err := k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
		}
		waitEtcdStopped(t, survivors, podIPs)
	}
	node := "a-node-that-is-gone"
	if how == nodeStopsAnswering {
		node = nodeThatWillStopAnswering(t, c.Namespace)
	}
	if how != claimsGone {
		for _, name := range names {
			onNode(t, claims[name], node)
		}
	}
	return names
}

// waitEtcdStopped waits until the etcd of each member no longer listens at its pod's former IP.
// A pod deleted with no grace period is gone from the API at once, while the kubelet stops its
// containers only afterwards.
func waitEtcdStopped(t testing.TB, members []string, podIPs map[string]string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the etcd of %v stopped", members), func(ctx context.Context) (bool, error) {
		for _, name := range members {
			if podIPs[name] == "" {
				continue
			}
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(podIPs[name], strconv.Itoa(resources.ClientPort)), time.Second)
			if err == nil {
				_ = conn.Close()
				return false, nil
			}
		}
		return true, nil
	})
}

// deadNodeTaint keeps every pod off the Node objects nodeThatWillStopAnswering makes but those
// of the test that tolerate it.
const deadNodeTaint = "e2e.etcd.database.dev/no-kubelet"

var deadNodeTolerations = []corev1.Toleration{
	{Key: deadNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrTo(int64(10))},
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrTo(int64(10))},
}

// nodeThatWillStopAnswering registers a Node with no kubelet behind it, Ready for now: the
// scheduler places pods on it, and the node lifecycle controller, hearing nothing from it,
// finds it not answering within a minute and taints it unreachable. It is deleted when the test
// ends (and its pods with it).
func nodeThatWillStopAnswering(t testing.TB, namespace string) string {
	t.Helper()
	ctx := context.Background()
	// The labels a kubelet would give it: member pods and agent Jobs require a node of a
	// platform their images are built for; the cluster's nodes are this machine's.
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-no-kubelet-" + namespace, Labels: map[string]string{
			corev1.LabelHostname: "e2e-no-kubelet-" + namespace, corev1.LabelArchStable: runtime.GOARCH, corev1.LabelOSStable: runtime.GOOS,
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: deadNodeTaint, Effect: corev1.TaintEffectNoSchedule}}},
	}
	if err := k8sClient.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), node) })
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	// A patch, not an update: the controllers write to a new Node at once (the TTL
	// controller's annotation, the taints), and an update carrying the resourceVersion of the
	// create then fails with a conflict whenever one of them was first (stop 22's CI).
	before := node.DeepCopy()
	node.Status = corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	if err := k8sClient.Status().Patch(ctx, node, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node "+node.Name+" Ready and untainted but for the test's taint", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(node), node)
		return err == nil && len(node.Spec.Taints) == 1, err
	})
	return node.Name
}

// onNode makes the claim again, as the member had it, bound to a local volume on node: what a
// member whose node was lost with its local volume looks like once its pod is gone.
func onNode(t testing.TB, was *corev1.PersistentVolumeClaim, node string) {
	t.Helper()
	ctx := context.Background()
	size := was.Spec.Resources.Requests[corev1.ResourceStorage]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-gone-" + was.Namespace + "-" + was.Name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/nonexistent"}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
			ClaimRef: &corev1.ObjectReference{Namespace: was.Namespace, Name: was.Name},
		},
	}
	if err := k8sClient.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), pv) })
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: was.Namespace, Name: was.Name, Labels: was.Labels, Annotations: was.Annotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			StorageClassName: ptrTo(""),
			VolumeName:       pv.Name,
		},
	}
	for k := range pvc.Annotations {
		if strings.HasPrefix(k, "pv.kubernetes.io/") || strings.HasPrefix(k, "volume.") {
			delete(pvc.Annotations, k) // the old binding's, set by the controllers
		}
	}
	if err := k8sClient.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "claim "+pvc.Name+" bound to the volume on node "+node, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)
		return err == nil && pvc.Status.Phase == corev1.ClaimBound, err
	})
}

func memberNames(c *etcdv1alpha1.EtcdCluster) []string {
	var names []string
	for _, m := range c.Status.Members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}

// awaitManualRecoveryOffer waits for status and an event to name the survivor to recover from
// and the annotation that does it, checks that nothing was changed meanwhile, and returns the
// survivor it named.
func awaitManualRecoveryOffer(t *testing.T, c *etcdv1alpha1.EtcdCluster, survivors []string) string {
	t.Helper()
	pods := map[string]string{}
	for _, pod := range memberPods(t, c) {
		pods[pod.Name] = string(pod.UID)
	}
	var named string
	waitForWithin(t, "Degraded to name the survivor and the annotation", recoveryTimeout, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		for _, s := range survivors {
			if d != nil && d.Reason == etcdv1alpha1.ReasonQuorumLost && strings.Contains(d.Message, etcdv1alpha1.AnnotationRecoverFrom+"="+s) {
				named = s
			}
		}
		return named != "", nil
	})
	// The recorder writes events from a queue of its own, after or before the status patch that
	// says the same: the event may land a moment after the condition is read.
	waitForWithin(t, "a Warning event to name the annotation that recovers the cluster", 30*time.Second, func(ctx context.Context) (bool, error) {
		events := &corev1.EventList{}
		if err := k8sClient.List(ctx, events, client.InNamespace(c.Namespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, etcdv1alpha1.AnnotationRecoverFrom+"="+named)
		}), nil
	})
	// A few reconciles: Manual must not act on its own.
	holdsFor(t, 15*time.Second, "policy Manual, without the annotation", func(ctx context.Context) (string, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return "", err
		}
		if c.Status.QuorumRecovery != nil {
			return fmt.Sprintf("began a recovery: %+v", *c.Status.QuorumRecovery), nil
		}
		for _, pod := range memberPods(t, c) {
			if uid, ok := pods[pod.Name]; ok && uid != string(pod.UID) {
				return "restarted survivor " + pod.Name, nil
			}
		}
		return "", nil
	})
	return named
}

// awaitDeclarationOfLostMembers waits for status to say that the members whose node stopped
// answering may still serve, and to name the annotation that declares them lost; then checks
// that, past spec.quorumLossRecovery.after, nothing was forced: a node that stopped answering is
// not an etcd that stopped.
func awaitDeclarationOfLostMembers(t *testing.T, c *etcdv1alpha1.EtcdCluster, lost []string) {
	t.Helper()
	declare := etcdv1alpha1.AnnotationLostMembers + "=" + strings.Join(lost, ",")
	waitForWithin(t, "Degraded to name "+declare, recoveryTimeout, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		return d != nil && strings.Contains(d.Message, "may still be serving a majority") && strings.Contains(d.Message, declare), nil
	})
	if c.Status.QuorumLostTime == nil {
		t.Fatal("status.quorumLostTime is not set while the quorum is lost")
	}
	past := time.Until(c.Status.QuorumLostTime.Add(c.Spec.QuorumLossRecovery.After.Duration + 20*time.Second))
	t.Logf("watching for %s, past spec.quorumLossRecovery.after, for a force that must not come", past.Round(time.Second))
	holdsFor(t, past, fmt.Sprintf("members %v, whose node stopped answering, not declared lost", lost), func(ctx context.Context) (string, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return "", err
		}
		if qr := c.Status.QuorumRecovery; qr != nil {
			return fmt.Sprintf("a recovery began: %+v", *qr), nil
		}
		return "", nil
	})
}

func annotate(t *testing.T, obj client.Object, key, value string) {
	t.Helper()
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[key] = value
	obj.SetAnnotations(annotations)
	if err := k8sClient.Patch(context.Background(), obj, patch); err != nil {
		t.Fatal(err)
	}
}

func waitForWithin(t *testing.T, what string, timeout time.Duration, done wait.ConditionWithContextFunc) {
	t.Helper()
	if err := pollTolerant(t, what, 2*time.Second, timeout, done); err != nil {
		t.Fatalf("%s within %v: %v", what, timeout, err)
	}
}

// revisionWriter puts keys while the cluster loses quorum and is recovered, recording the
// revision etcd acknowledged each at. After a recovery from a survivor, every acknowledged
// write at or below the survivor's revision must be there: the loss is bounded to the writes
// only the lost members had.
type revisionWriter struct {
	client *clientv3.Client
	prefix string
	mu     sync.Mutex
	acked  map[string]int64
	cancel context.CancelFunc
	done   chan struct{}
}

func startRevisionWriter(t *testing.T, endpoint, prefix string) *revisionWriter {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &revisionWriter{client: cl, prefix: prefix, acked: map[string]int64{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("%s/%08d", prefix, i)
			putCtx, cancelPut := context.WithTimeout(ctx, 3*time.Second)
			resp, err := cl.Put(putCtx, key, key)
			cancelPut()
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			w.mu.Lock()
			w.acked[key] = resp.Header.Revision
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done; _ = cl.Close() })
	return w
}

func (w *revisionWriter) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// verifyUpTo stops the writer and checks that every write acknowledged at or below revision
// is present; it logs how many acknowledged above it were lost with the lost members.
func (w *revisionWriter) verifyUpTo(t *testing.T, revision int64) {
	t.Helper()
	w.cancel()
	<-w.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := w.client.Get(ctx, w.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	present := map[string]bool{}
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = true
	}
	var kept, lostAbove int
	var lost []string
	for key, rev := range w.acked {
		switch {
		case present[key]:
			kept++
		case rev <= revision:
			lost = append(lost, fmt.Sprintf("%s@%d", key, rev))
		default:
			lostAbove++
		}
	}
	t.Logf("under load: %d writes acknowledged, %d present, %d lost above the survivor's revision %d", len(w.acked), kept, lostAbove, revision)
	if len(lost) > 0 {
		slices.Sort(lost)
		t.Fatalf("%d writes acknowledged at or below the survivor's revision %d are lost, first %v", len(lost), revision, lost[:min(5, len(lost))])
	}
}

// waitMembersAtOneRevision waits until every member, asked at its pod, is at the same revision:
// with no write in flight, every acknowledged write is then applied on each of them, as a
// recovery that keeps one survivor's data must find it.
func waitMembersAtOneRevision(t *testing.T, c *etcdv1alpha1.EtcdCluster, user, password string) {
	t.Helper()
	waitFor(t, "every member at one revision", func(ctx context.Context) (bool, error) {
		pods := memberPods(t, c)
		revisions := map[int64]bool{}
		for _, pod := range pods {
			if pod.Status.PodIP == "" {
				return false, nil
			}
			url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(resources.ClientPort))
			cl, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, Username: user, Password: password, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				return false, nil //nolint:nilerr // a member not answering yet is asked again
			}
			st, err := cl.Status(ctx, url)
			_ = cl.Close()
			if err != nil {
				return false, nil //nolint:nilerr // a member not answering yet is asked again
			}
			revisions[st.Header.Revision] = true
		}
		return len(pods) == int(c.Spec.Size) && len(revisions) == 1, nil
	})
}
