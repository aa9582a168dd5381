//go:build e2e

package e2e

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Benchmarks of the operator against the plainest alternative — a 3-replica StatefulSet of the
// same etcd image; for a restore, etcdutl and one bare member — measured side by side on the
// same cluster (`make bench-e2e`). They report seconds and the ratio as custom metrics;
// docs/performance.md records the figures.

// The operator's own etcd image (its RELATED_IMAGE_ETCD), so that both sides run the same etcd.
var benchImage = envOr("E2E_ETCD_REPOSITORY", "ghcr.io/etcd-database/etcd") + ":v" + etcdVersion

// BenchmarkTimeToAvailable: from the create call until the first linearizable read through a
// client Service succeeds, for an EtcdCluster of 3 (its own client Service) and for a
// StatefulSet of 3 (a ClusterIP Service of its own). Reported beside them, from the same start:
// until the operator's status says Available with 3 healthy voters, and until the StatefulSet
// has 3 Ready pods.
func BenchmarkTimeToAvailable(b *testing.B) {
	var op, sts, opAvailable, stsReady time.Duration
	for i := 0; i < b.N; i++ {
		ns := benchNamespace(b)
		start := time.Now()
		c := benchCluster(b, ns, fmt.Sprintf("bench%d", i))
		read := firstLinearizableRead(b, start, ns, resources.ClientServiceName(c.Name))
		waitAvailableB(b, c, 3)
		available := time.Since(start)
		opRead := read()

		start = time.Now()
		s := benchStatefulSet(b, ns, fmt.Sprintf("sts%d", i))
		read = firstLinearizableRead(b, start, ns, benchClientServiceName(s.Name))
		waitStatefulSetReady(b, s, 3)
		ready := time.Since(start)
		stsRead := read()

		b.Logf("N=%d #%d: operator: first read %.2f s, status Available %.2f s; StatefulSet: first read %.2f s, 3 pods Ready %.2f s",
			b.N, i, opRead.Seconds(), available.Seconds(), stsRead.Seconds(), ready.Seconds())
		op, opAvailable, sts, stsReady = op+opRead, opAvailable+available, sts+stsRead, stsReady+ready
	}
	report(b, "operator-s", op, "statefulset-s", sts)
	b.ReportMetric(opAvailable.Seconds()/float64(b.N), "operator-available-s")
	b.ReportMetric(stsReady.Seconds()/float64(b.N), "statefulset-ready-s")
}

// firstLinearizableRead tries, in the background, a linearizable Get through the Service ns/name
// (which may not exist yet) until one succeeds; the function it returns waits for that and gives
// the time from start. The Service is reached at its cluster IP, which the node routes (the host
// cannot resolve cluster DNS). The client reconnects quickly (quickReconnect), a Get waiting for
// a connection goes out as soon as there is one, and each Get has half a second, so the polling
// itself adds little to the figure.
func firstLinearizableRead(b *testing.B, start time.Time, ns, name string) func() time.Duration {
	done, failed := make(chan time.Duration, 1), make(chan error, 1)
	go func() {
		var err error
		var cl *clientv3.Client
		defer func() {
			if cl != nil {
				cl.Close()
			}
		}()
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if cl == nil {
				svc := &corev1.Service{}
				if err = k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
					continue
				}
				cl, err = clientv3.New(clientv3.Config{
					Endpoints: []string{fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, resources.ClientPort)}, Logger: zap.NewNop(),
					DialOptions: quickReconnect,
				})
				if err != nil {
					continue
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_, err = cl.Get(ctx, "bench")
			cancel()
			if err == nil {
				done <- time.Since(start)
				return
			}
		}
		failed <- err
	}()
	return func() time.Duration {
		b.Helper()
		select {
		case elapsed := <-done:
			return elapsed
		case err := <-failed:
			b.Fatalf("no linearizable read through Service %s/%s within 5 minutes; last error: %v", ns, name, err)
			return 0
		}
	}
}

// quickReconnect has gRPC reconnect every 50 ms rather than with its default backoff of 1 s and
// growing: a benchmark polling a member that is starting sees it serve within 50 ms.
var quickReconnect = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
	Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1, MaxDelay: 50 * time.Millisecond}})}

// BenchmarkMemberPodKilled: a member pod deleted until the cluster is fully healthy again,
// against a StatefulSet pod deleted until the StatefulSet has 3 Ready pods again. Where the time
// goes is reported too, as the mean time from the deletion until the new pod exists, until its
// container runs and until it is Ready.
func BenchmarkMemberPodKilled(b *testing.B) {
	ns := benchNamespace(b)
	c := benchCluster(b, ns, "killed")
	waitAvailableB(b, c, 3)
	s := benchStatefulSet(b, ns, "stskilled")
	waitStatefulSetReady(b, s, 3)
	ctx := context.Background()

	var op, sts time.Duration
	var opPhases, stsPhases recreation
	for i := 0; i < b.N; i++ {
		pods := &corev1.PodList{}
		if err := k8sClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"etcd.database.dev/cluster": c.Name}); err != nil {
			b.Fatal(err)
		}
		victim := pods.Items[i%len(pods.Items)]
		start := time.Now()
		if err := k8sClient.Delete(ctx, &victim, client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
		opPhases.add(waitRecreatedReady(b, &victim, start))
		waitAvailableB(b, c, 3)
		op += time.Since(start)

		stsPod := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("%s-%d", s.Name, i%3)}, stsPod); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := k8sClient.Delete(ctx, stsPod, client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
		stsPhases.add(waitRecreatedReady(b, stsPod, start))
		waitStatefulSetReady(b, s, 3)
		sts += time.Since(start)
	}
	report(b, "operator-s", op, "statefulset-s", sts)
	opPhases.report(b, "operator")
	stsPhases.report(b, "statefulset")
}

// recreation sums, over iterations, the time from a pod's deletion until its replacement
// exists, until its container runs, and until it is Ready.
type recreation struct{ created, running, ready time.Duration }

func (r *recreation) add(o recreation) {
	r.created += o.created
	r.running += o.running
	r.ready += o.ready
}

func (r recreation) report(b *testing.B, prefix string) {
	n := float64(b.N)
	b.ReportMetric(r.created.Seconds()/n, prefix+"-created-s")
	b.ReportMetric(r.running.Seconds()/n, prefix+"-running-s")
	b.ReportMetric(r.ready.Seconds()/n, prefix+"-ready-s")
}

// BenchmarkQuorumLossRecovery: two of three members lose their pods and claims for good, as
// nodes and their disks lost would; timed from the loss (pods and claims gone) until the
// cluster serves at size 3 again with every member a voter. The operator, told which member to
// recover from (the recover-from annotation, as soon as its status shows the loss; the automatic
// policies first wait spec.quorumLossRecovery.after, at least 2 minutes), until its status says
// Available at size 3 with the recovery complete. The floor is etcd's disaster recovery as a person runs it (etcd.io/docs/v3.6,
// op-guide/recovery and runtime-configuration), scripted on the pods of a plain StatefulSet:
// manualQuorumRecovery. Both sides begin with the same keys on every member and must have them
// all at the end. The operator also copies the survivor's data before rewriting it, which the
// floor does not; its phases, from status.quorumRecovery (times to the second), show what each
// step costs.
func BenchmarkQuorumLossRecovery(b *testing.B) {
	var op, manual time.Duration
	var opPhases operatorRecoveryPhases
	var manualPhases manualRecoveryPhases
	for i := 0; i < b.N; i++ {
		ns := benchNamespace(b)
		c := &etcdv1alpha1.EtcdCluster{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("quorum%d", i), Namespace: ns},
			Spec: etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: etcdVersion,
				Storage:            etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
				QuorumLossRecovery: etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryManual}},
		}
		if err := k8sClient.Create(context.Background(), c); err != nil {
			b.Fatal(err)
		}
		s := benchStatefulSet(b, ns, fmt.Sprintf("stsquorum%d", i))
		waitAvailableB(b, c, 3)
		waitStatefulSetReady(b, s, 3)
		clusterPods := client.MatchingLabels{resources.LabelCluster: c.Name}
		writeQuorumBenchKeys(b, podClientURLs(listPods(b, ns, clusterPods)))
		writeQuorumBenchKeys(b, podClientURLs(listPods(b, ns, s.Spec.Selector.MatchLabels)))

		lost := loseMembers(b, c, 2, claimsGone)
		start := time.Now()
		survivor := slices.DeleteFunc(memberNames(c), func(n string) bool { return slices.Contains(lost, n) })[0]
		pollFor(b, "cluster "+c.Name+"'s loss on record", recoveryTimeout, func(ctx context.Context) (bool, error) {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
			return err == nil && c.Status.QuorumLostTime != nil, err
		})
		patch := client.MergeFrom(c.DeepCopy())
		c.Annotations = map[string]string{etcdv1alpha1.AnnotationRecoverFrom: survivor}
		if err := k8sClient.Patch(context.Background(), c, patch); err != nil {
			b.Fatal(err)
		}
		pollFor(b, "cluster "+c.Name+" recovered at size 3", recoveryTimeout, func(ctx context.Context) (bool, error) {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c)
			return err == nil && isAvailable(c, 3) && c.Status.QuorumRecovery != nil && c.Status.QuorumRecovery.CompletionTime != nil, err
		})
		elapsed := time.Since(start)
		phases := operatorPhases(b, c.Status.QuorumRecovery, start)
		b.Logf("N=%d #%d: operator: lost %v, recovered from %s in %.2f s: %+v", b.N, i, lost, c.Status.QuorumRecovery.Member, elapsed.Seconds(), phases)
		logTimeline(b, "operator", start, listPods(b, ns, clusterPods))
		checkQuorumBenchKeys(b, podClientURLs(listPods(b, ns, clusterPods)))
		op += elapsed
		opPhases.add(phases)

		survivor, lostPods := s.Name+"-2", []string{s.Name + "-0", s.Name + "-1"}
		loseStatefulSetMembers(b, s, lostPods)
		start = time.Now()
		steps := manualQuorumRecovery(b, s, survivor, lostPods, start)
		elapsed = time.Since(start)
		b.Logf("N=%d #%d: by hand: lost %v, recovered from %s in %.2f s: %+v", b.N, i, lostPods, survivor, elapsed.Seconds(), steps)
		logTimeline(b, "by hand", start, listPods(b, ns, s.Spec.Selector.MatchLabels))
		checkQuorumBenchKeys(b, podClientURLs(listPods(b, ns, s.Spec.Selector.MatchLabels)))
		manual += elapsed
		manualPhases.add(steps)
	}
	report(b, "operator-s", op, "by-hand-s", manual)
	opPhases.report(b)
	manualPhases.report(b)
}

// operatorRecoveryPhases is where the operator's recovery time goes, from its record: from the
// loss until it begins, until the survivor's data is copied, until the survivor runs with
// --force-new-cluster, until it serves alone, and until the cluster is complete again (the
// restart without the flag and the lost members added back, one at a time).
type operatorRecoveryPhases struct{ begin, preserve, force, serve, rejoin time.Duration }

func operatorPhases(b *testing.B, qr *etcdv1alpha1.QuorumRecoveryStatus, loss time.Time) operatorRecoveryPhases {
	if qr.PreservedData == nil || qr.ForcedTime == nil || qr.ServedTime == nil {
		b.Fatalf("status.quorumRecovery misses a step: %+v", *qr)
	}
	return operatorRecoveryPhases{
		begin:    qr.StartTime.Sub(loss),
		preserve: qr.PreservedData.Time.Sub(qr.StartTime.Time),
		force:    qr.ForcedTime.Sub(qr.PreservedData.Time.Time),
		serve:    qr.ServedTime.Sub(qr.ForcedTime.Time),
		rejoin:   qr.CompletionTime.Sub(qr.ServedTime.Time),
	}
}

func (p *operatorRecoveryPhases) add(o operatorRecoveryPhases) {
	p.begin += o.begin
	p.preserve += o.preserve
	p.force += o.force
	p.serve += o.serve
	p.rejoin += o.rejoin
}

func (p operatorRecoveryPhases) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(p.begin.Seconds()/n, "operator-begin-s")
	b.ReportMetric(p.preserve.Seconds()/n, "operator-preserve-s")
	b.ReportMetric(p.force.Seconds()/n, "operator-force-s")
	b.ReportMetric(p.serve.Seconds()/n, "operator-serve-s")
	b.ReportMetric(p.rejoin.Seconds()/n, "operator-rejoin-s")
}

// manualRecoveryPhases is where the time goes by hand, each from the end of the one before:
// until the survivor serves alone with --force-new-cluster, until it serves again without the
// flag, and until every lost member is back as a voter and all three serve.
type manualRecoveryPhases struct{ force, restart, rejoin time.Duration }

func (p *manualRecoveryPhases) add(o manualRecoveryPhases) {
	p.force += o.force
	p.restart += o.restart
	p.rejoin += o.rejoin
}

func (p manualRecoveryPhases) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(p.force.Seconds()/n, "by-hand-force-s")
	b.ReportMetric(p.restart.Seconds()/n, "by-hand-restart-s")
	b.ReportMetric(p.rejoin.Seconds()/n, "by-hand-rejoin-s")
}

// loseStatefulSetMembers loses the pods and claims of members of s as loseMembers does for an
// EtcdCluster. The StatefulSet is first deleted, its pods and claims orphaned and left running,
// so that nothing recreates what is lost, as the paused operator does not: from here on a
// person recovers the members by hand.
func loseStatefulSetMembers(b *testing.B, s *appsv1.StatefulSet, members []string) {
	ctx := context.Background()
	if err := k8sClient.Delete(ctx, s, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		b.Fatal(err)
	}
	poll(b, "StatefulSet "+s.Name+" gone, its pods orphaned", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(s), &appsv1.StatefulSet{})), nil
	})
	var lost []client.Object
	for _, name := range members {
		lost = append(lost,
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: statefulSetClaimName(name)}},
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}})
	}
	for _, obj := range lost {
		if err := k8sClient.Delete(ctx, obj, client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
	}
	poll(b, "the lost members' pods and claims gone", func(ctx context.Context) (bool, error) {
		for _, obj := range lost {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); err == nil || ignoreNotFound(err) != nil {
				return false, ignoreNotFound(err)
			}
		}
		return true, nil
	})
}

// manualQuorumRecovery is etcd's answer to a majority lost for good, done by hand on the pods
// of the StatefulSet s, with each step begun as soon as the one before is seen done — what a
// person with kubectl and etcdctl does at best: stop the survivor and start it alone with
// --force-new-cluster on its data; once it serves, restart it without the flag (a later restart
// with it would drop members again); then for each lost member `etcdctl member add
// --learner`, start it on a fresh claim with the initial cluster member add printed and
// --initial-cluster-state=existing, and `etcdctl member promote` it once it has caught up;
// done when every member is a voter and all three serve linearizable reads. The pods are the
// StatefulSet's template, its peer names kept by hostname and subdomain.
func manualQuorumRecovery(b *testing.B, s *appsv1.StatefulSet, survivor string, lost []string, start time.Time) manualRecoveryPhases {
	var phases manualRecoveryPhases
	since := start
	step := func() time.Duration {
		d := time.Since(since)
		since = time.Now()
		return d
	}

	replacePod(b, s, survivor, "--force-new-cluster")
	awaitServing(b, s.Namespace, survivor)
	phases.force = step()

	endpoint := replacePod(b, s, survivor)
	awaitServing(b, s.Namespace, survivor)
	phases.restart = step()

	cl := benchEtcdClient(b, endpoint)
	defer cl.Close()
	ctx := context.Background()
	for _, name := range lost {
		// etcd refuses to add a member until every voter has been connected for 5 s
		// (--strict-reconfig-check, on by default), which the member just promoted has not:
		// retried, as a person would.
		var added *clientv3.MemberAddResponse
		pollFor(b, "member add "+name+" --learner", recoveryTimeout, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var err error
			added, err = cl.MemberAddAsLearner(ctx, []string{statefulSetPeerURL(s, name)})
			if errors.Is(err, rpctypes.ErrUnhealthy) {
				return false, nil
			}
			return err == nil, err
		})
		var initial []string
		for _, m := range added.Members {
			memberName := m.Name
			if m.ID == added.Member.ID {
				memberName = name
			}
			initial = append(initial, memberName+"="+m.PeerURLs[0])
		}
		claim := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: statefulSetClaimName(name), Namespace: s.Namespace},
			Spec:       *s.Spec.VolumeClaimTemplates[0].Spec.DeepCopy(),
		}
		if err := k8sClient.Create(ctx, claim); err != nil {
			b.Fatal(err)
		}
		if err := k8sClient.Create(ctx, statefulSetPod(s, name,
			"--initial-cluster="+strings.Join(initial, ","), "--initial-cluster-state=existing")); err != nil {
			b.Fatal(err)
		}
		// etcd refuses to promote a learner not yet in sync with the leader: retried, as a
		// person would.
		pollFor(b, "member promote "+name, recoveryTimeout, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := cl.MemberPromote(ctx, added.Member.ID)
			return err == nil, nil
		})
	}
	members, err := cl.MemberList(ctx)
	if err != nil {
		b.Fatal(err)
	}
	voters := 0
	for _, m := range members.Members {
		if !m.IsLearner {
			voters++
		}
	}
	if len(members.Members) != 3 || voters != 3 {
		b.Fatalf("after the recovery by hand: %d members, %d voters, want 3 voters", len(members.Members), voters)
	}
	for _, name := range append([]string{survivor}, lost...) {
		awaitServing(b, s.Namespace, name)
	}
	phases.rejoin = step()
	return phases
}

// replacePod stops member name's pod, waits until it is gone and starts it again from the
// StatefulSet's template with flags; it returns the new pod's client URL.
func replacePod(b *testing.B, s *appsv1.StatefulSet, name string, flags ...string) string {
	ctx := context.Background()
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}}
	if err := k8sClient.Delete(ctx, old); err != nil {
		b.Fatal(err)
	}
	poll(b, "pod "+name+" stopped", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(old), old)), nil
	})
	pod := statefulSetPod(s, name, flags...)
	if err := k8sClient.Create(ctx, pod); err != nil {
		b.Fatal(err)
	}
	return awaitPodURL(b, pod)
}

// awaitServing waits until the member in pod ns/name answers a linearizable read at its pod IP.
func awaitServing(b *testing.B, ns, name string) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	cl := benchEtcdClient(b, awaitPodURL(b, pod))
	defer cl.Close()
	pollFor(b, "member "+name+" serving", recoveryTimeout, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := cl.Get(ctx, "bench")
		return err == nil, nil
	})
}

// awaitPodURL waits until pod has an IP and returns its client URL.
func awaitPodURL(b *testing.B, pod *corev1.Pod) string {
	poll(b, "pod "+pod.Name+" has an IP", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)
		return err == nil && pod.Status.PodIP != "", ignoreNotFound(err)
	})
	return podClientURLs([]corev1.Pod{*pod})[0]
}

// statefulSetPod is the pod the StatefulSet s would make for member name, its etcd flags
// replaced or added by flags, and with nothing to own it.
func statefulSetPod(s *appsv1.StatefulSet, name string, flags ...string) *corev1.Pod {
	spec := s.Spec.Template.Spec.DeepCopy()
	spec.Hostname, spec.Subdomain = name, s.Spec.ServiceName
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: s.Spec.VolumeClaimTemplates[0].Name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: statefulSetClaimName(name)},
	}})
	etcd := &spec.Containers[0]
	for _, flag := range flags {
		key, _, _ := strings.Cut(flag, "=")
		etcd.Args = append(slices.DeleteFunc(etcd.Args, func(arg string) bool {
			k, _, _ := strings.Cut(arg, "=")
			return k == key
		}), flag)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: maps.Clone(s.Spec.Template.Labels)},
		Spec:       *spec,
	}
}

// statefulSetClaimName is the claim a StatefulSet's volume claim template makes for a pod.
func statefulSetClaimName(pod string) string { return "data-" + pod }

// statefulSetPeerURL is member pod's peer URL, as benchStatefulSet advertises it.
func statefulSetPeerURL(s *appsv1.StatefulSet, pod string) string {
	return fmt.Sprintf("http://%s.%s.%s.svc:2380", pod, s.Spec.ServiceName, s.Namespace)
}

const (
	quorumBenchKeys   = 100
	quorumBenchPrefix = "bench/quorum/"
)

// writeQuorumBenchKeys puts quorumBenchKeys keys through the members at urls, then waits until
// every member has applied the last: whichever member survives the loss has them all.
func writeQuorumBenchKeys(b *testing.B, urls []string) {
	cl := benchEtcdClient(b, urls...)
	defer cl.Close()
	last := ""
	for i := range quorumBenchKeys {
		last = fmt.Sprintf("%s%03d", quorumBenchPrefix, i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cl.Put(ctx, last, last)
		cancel()
		if err != nil {
			b.Fatalf("put %s: %v", last, err)
		}
	}
	for _, url := range urls {
		member := benchEtcdClient(b, url)
		poll(b, last+" on "+url, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			resp, err := member.Get(ctx, last, clientv3.WithSerializable())
			return err == nil && len(resp.Kvs) == 1, nil
		})
		member.Close()
	}
}

// checkQuorumBenchKeys fails unless every member at urls serves all the keys written before the
// loss.
func checkQuorumBenchKeys(b *testing.B, urls []string) {
	for _, url := range urls {
		cl := benchEtcdClient(b, url)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := cl.Get(ctx, quorumBenchPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		cl.Close()
		if err != nil {
			b.Fatalf("count the keys on %s: %v", url, err)
		}
		if resp.Count != quorumBenchKeys {
			b.Fatalf("%s has %d of the %d keys written before the loss", url, resp.Count, quorumBenchKeys)
		}
	}
}

// podClientURLs are the members' client URLs at their pod IPs, which this machine routes to.
func podClientURLs(pods []corev1.Pod) []string {
	var urls []string
	for _, p := range pods {
		urls = append(urls, fmt.Sprintf("http://%s:%d", p.Status.PodIP, resources.ClientPort))
	}
	return urls
}

func benchEtcdClient(b *testing.B, urls ...string) *clientv3.Client {
	cl, err := clientv3.New(clientv3.Config{Endpoints: urls, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: quickReconnect})
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// BenchmarkIdleClusterWrites: a healthy cluster and a scheduled backup not due, left alone.
// Every change of the cluster's resourceVersion is a write (nothing else touches it), and the
// API server's audit log shows every write the operator makes, to any kind of object.
func BenchmarkIdleClusterWrites(b *testing.B) {
	ns := benchNamespace(b)
	c := benchCluster(b, ns, "idle")
	waitAvailableB(b, c, 3)
	// A backup schedule that does not come due in the window is idle too.
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "yearly", Namespace: ns},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: c.Name, Schedule: "@yearly",
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "unused"}}},
	}
	if err := k8sClient.Create(context.Background(), backup); err != nil {
		b.Fatal(err)
	}
	user := operatorServiceAccount(b)
	window := envDuration("BENCH_IDLE_WINDOW", 5*time.Minute)
	time.Sleep(10 * time.Second) // the backup's first status, and the cluster's settling
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(c), c); err != nil {
		b.Fatal(err)
	}
	b.Logf("EtcdCluster status as the window opens: %s", statusJSON(b, c))
	writes, operatorWrites, etcdCalls := 0, map[auditedWrite]int{}, map[string]float64{}
	for i := 0; i < b.N; i++ {
		callsBefore := etcdCallsServed(b, c)
		start := time.Now()
		last := c.ResourceVersion
		deadline := time.Now().Add(window)
		for time.Now().Before(deadline) {
			time.Sleep(time.Second)
			if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(c), c); err != nil {
				b.Fatal(err)
			}
			if c.ResourceVersion != last {
				writes++
				last = c.ResourceVersion
				b.Logf("EtcdCluster written %s into the window: status now %s", time.Since(start).Round(time.Second), statusJSON(b, c))
			}
		}
		for write, n := range auditedWrites(b, user, start, time.Now()) {
			operatorWrites[write] += n
		}
		for method, n := range etcdCallsServed(b, c) {
			etcdCalls[method] += n - callsBefore[method]
		}
	}
	// Writes for the idle cluster and its backup are those in its namespace. Renewing its
	// leader-election Lease is the one write a running manager makes whatever the clusters do,
	// and writes in other namespaces (a deleted namespace's last events, say) are not about the
	// idle cluster: both are counted apart.
	total, lease, elsewhere := 0, 0, 0
	for write, n := range operatorWrites {
		switch {
		case write.namespace == ns:
			total += n
		case write.resource == "leases" && write.namespace == operatorNamespace:
			lease += n
		default:
			elsewhere += n
		}
	}
	b.Logf("writes by %s in the idle windows: %v", user, operatorWrites)
	b.ReportMetric(float64(writes)/float64(b.N), "writes/idle-window")
	b.ReportMetric(float64(total)/float64(b.N), "operator-writes/idle-window")
	b.ReportMetric(float64(lease)/float64(b.N), "leader-lease-writes/idle-window")
	b.ReportMetric(float64(elsewhere)/float64(b.N), "other-namespace-writes/idle-window")
	// Nothing but the operator calls these etcd members.
	calls := 0.0
	for _, n := range etcdCalls {
		calls += n
	}
	maps.DeleteFunc(etcdCalls, func(_ string, n float64) bool { return n == 0 })
	b.Logf("etcd calls served by the members in the idle windows, by method: %v", etcdCalls)
	b.ReportMetric(calls/float64(b.N), "etcd-calls/idle-window")
	b.ReportMetric(window.Seconds(), "window-s")
}

// etcdCallsServed sums, by gRPC method, the calls the cluster's members have handled, from
// their metrics endpoints (pod IPs are routed to from this machine).
func etcdCallsServed(b *testing.B, c *etcdv1alpha1.EtcdCluster) map[string]float64 {
	pods := &corev1.PodList{}
	if err := k8sClient.List(context.Background(), pods, client.InNamespace(c.Namespace), client.MatchingLabels{resources.LabelCluster: c.Name}); err != nil {
		b.Fatal(err)
	}
	calls := map[string]float64{}
	for _, pod := range pods.Items {
		resp, err := http.Get(fmt.Sprintf("http://%s:%d/metrics", pod.Status.PodIP, resources.MetricsPort))
		if err != nil {
			b.Fatalf("metrics of member %s: %v", pod.Name, err)
		}
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			// grpc_server_handled_total{grpc_code="OK",grpc_method="Status",grpc_service="etcdserverpb.Maintenance",grpc_type="unary"} 12
			line := lines.Text()
			if !strings.HasPrefix(line, "grpc_server_handled_total{") {
				continue
			}
			_, rest, _ := strings.Cut(line, `grpc_method="`)
			method, _, _ := strings.Cut(rest, `"`)
			fields := strings.Fields(line)
			n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err != nil {
				b.Fatalf("metrics of member %s: %q: %v", pod.Name, line, err)
			}
			calls[method] += n
		}
		resp.Body.Close()
		if err := lines.Err(); err != nil {
			b.Fatal(err)
		}
	}
	return calls
}

func statusJSON(b *testing.B, c *etcdv1alpha1.EtcdCluster) string {
	out, err := json.Marshal(c.Status)
	if err != nil {
		b.Fatal(err)
	}
	return string(out)
}

// operatorServiceAccount is the user the deployed operator writes as.
func operatorServiceAccount(b *testing.B) string {
	d := &appsv1.Deployment{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, d); err != nil {
		b.Fatal(err)
	}
	return "system:serviceaccount:" + operatorNamespace + ":" + d.Spec.Template.Spec.ServiceAccountName
}

// auditedWrite is one kind of write: a verb on a resource (with its subresource) in a namespace
// ("" for cluster-scoped objects).
type auditedWrite struct{ verb, resource, namespace string }

func (w auditedWrite) String() string {
	return w.verb + " " + w.resource + " in " + cmp.Or(w.namespace, "(cluster)")
}

// auditedWrites counts the writes user made between from and to, from the API server's audit
// log (hack/cluster/up.sh audits every service account's writes).
func auditedWrites(b *testing.B, user string, from, to time.Time) map[auditedWrite]int {
	file, err := os.Open(envOr("E2E_AUDIT_LOG", "/var/lib/etcd-operator-cluster/audit.log"))
	if err != nil {
		b.Fatalf("the API server's audit log: %v (a cluster started before auditing was added: make cluster-down cluster-up)", err)
	}
	defer file.Close()
	counts := map[auditedWrite]int{}
	lines := bufio.NewScanner(file)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		var event struct {
			User                     struct{ Username string }
			Verb                     string
			ObjectRef                struct{ Resource, Subresource, Namespace string }
			RequestReceivedTimestamp time.Time
		}
		if json.Unmarshal(lines.Bytes(), &event) != nil || event.User.Username != user ||
			event.RequestReceivedTimestamp.Before(from) || event.RequestReceivedTimestamp.After(to) {
			continue
		}
		resource := event.ObjectRef.Resource
		if event.ObjectRef.Subresource != "" {
			resource += "/" + event.ObjectRef.Subresource
		}
		counts[auditedWrite{verb: event.Verb, resource: resource, namespace: event.ObjectRef.Namespace}]++
	}
	return counts
}

// BenchmarkRestoreToAvailable: an EtcdRestore (mode New) of a snapshot of at least 256 MiB into
// a 3-member cluster, until Completed, against restoring the same snapshot by hand into one
// bare member: a pod whose init containers download it (busybox wget of a presigned URL) and
// run `etcdutl snapshot restore`, then etcd, until Ready. Both make their claims and pods
// first, and both read the snapshot from the same S3 server in the namespace.
func BenchmarkRestoreToAvailable(b *testing.B) {
	ctx := context.Background()
	ns := benchNamespace(b)
	s3srv := startS3Server(b, ns)
	s3srv.createBucket(b, backupBucket)
	source := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "source", Namespace: ns}, Spec: *restoreBenchClusterSpec(1)}
	if err := k8sClient.Create(ctx, source); err != nil {
		b.Fatal(err)
	}
	waitAvailableB(b, source, 1)
	fillCluster(b, source, restoreBenchMiB)
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "source", Namespace: ns},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: source.Name, Destination: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
			Bucket: backupBucket, Prefix: "bench/", Endpoint: s3srv.Endpoint, ForcePathStyle: true, AllowPlainHTTP: true, CredentialsSecretName: s3srv.CredentialsSecret,
		}}},
	}
	if err := k8sClient.Create(ctx, backup); err != nil {
		b.Fatal(err)
	}
	poll(b, "backup "+backup.Name+" finished", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(backup), backup)
		return backup.Status.Phase == etcdv1alpha1.BackupCompleted || backup.Status.Phase == etcdv1alpha1.BackupFailed, err
	})
	if backup.Status.Phase != etcdv1alpha1.BackupCompleted {
		b.Fatalf("backup failed: %+v", backup.Status)
	}
	snapshot := backup.Status.LastBackup
	// The source has done its part; it would only take CPU from what is measured.
	deleteClusterAndWait(b, source)

	var op, bare, bareThree time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		rs := &etcdv1alpha1.EtcdRestore{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("restore%d", i), Namespace: ns},
			Spec: etcdv1alpha1.EtcdRestoreSpec{
				Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name}},
				Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: fmt.Sprintf("restored%d", i), Cluster: restoreBenchClusterSpec(3)},
			},
		}
		if err := k8sClient.Create(ctx, rs); err != nil {
			b.Fatal(err)
		}
		// The restore Job's pod is gone soon after the restore completes: kept as last seen.
		jobPods := map[string]corev1.Pod{}
		var servedAt time.Duration // when the cluster's status first said it serves at its size
		pollFor(b, "restore "+rs.Name+" finished", restoreBenchTimeout, func(ctx context.Context) (bool, error) {
			if target := (&etcdv1alpha1.EtcdCluster{}); servedAt == 0 && k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: rs.Spec.Target.ClusterName}, target) == nil &&
				meta.IsStatusConditionTrue(target.Status.Conditions, etcdv1alpha1.ConditionAvailable) && target.Status.ReadyMembers == 3 {
				servedAt = time.Since(start)
			}
			pods := &corev1.PodList{}
			if err := k8sClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{resources.LabelRestore: rs.Name}); err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				if p.Labels[resources.LabelCluster] == "" { // the members' pods are listed below
					jobPods[p.Name] = p
				}
			}
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(rs), rs)
			return rs.Status.Phase == etcdv1alpha1.RestoreCompleted || rs.Status.Phase == etcdv1alpha1.RestoreFailed, err
		})
		elapsed := time.Since(start)
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
			b.Fatalf("restore failed: %+v", rs.Status)
		}
		op += elapsed
		b.Logf("operator: the cluster's status said it serves at its size at %.1f s, the restore Completed at %.1f s", servedAt.Seconds(), elapsed.Seconds())
		restored := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: rs.Spec.Target.ClusterName, Namespace: ns}}
		logTimeline(b, "operator", start, slices.Collect(maps.Values(jobPods)))
		members := listPods(b, ns, client.MatchingLabels{resources.LabelCluster: restored.Name})
		logTimeline(b, "operator", start, members)
		saveContainerLogs(b, start, members...)
		deleteClusterAndWait(b, restored)

		presigned, err := s3.NewPresignClient(newS3Client(s3srv.Endpoint)).PresignGetObject(ctx, &s3.GetObjectInput{
			Bucket: aws.String(backupBucket), Key: aws.String(strings.TrimPrefix(snapshot.URI, "s3://"+backupBucket+"/")),
		}, s3.WithPresignExpires(restoreBenchTimeout))
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		pod := bareRestore(b, ns, fmt.Sprintf("bare%d", i), presigned.URL)
		pollFor(b, "pod "+pod.Name+" Ready", restoreBenchTimeout, func(ctx context.Context) (bool, error) {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)
			return podReady(pod), err
		})
		bare += time.Since(start)
		logTimeline(b, "bare member", start, []corev1.Pod{*pod})
		saveContainerLogs(b, start, *pod)
		deletePodsAndWait(b, *pod)

		// The floor of three members' work on this cluster: three bare members at once, each
		// restored and started on its own claim as the one above (no peers, so less than a
		// cluster of three does). What no way of restoring three members can go below here.
		start = time.Now()
		var three []corev1.Pod
		for m := range 3 {
			three = append(three, *bareRestore(b, ns, fmt.Sprintf("bare%d-%d", i, m), presigned.URL))
		}
		pollFor(b, "three bare members Ready", restoreBenchTimeout, func(ctx context.Context) (bool, error) {
			for m := range three {
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(&three[m]), &three[m]); err != nil || !podReady(&three[m]) {
					return false, err
				}
			}
			return true, nil
		})
		bareThree += time.Since(start)
		logTimeline(b, "three bare members", start, three)
		saveContainerLogs(b, start, three...)
		deletePodsAndWait(b, three...)
	}
	report(b, "operator-s", op, "bare-member-s", bare)
	b.ReportMetric(bareThree.Seconds()/float64(b.N), "three-bare-members-s")
	b.ReportMetric(bareThree.Seconds()/bare.Seconds(), "three-bare-ratio")
	// What the operator adds to the floor: the one ratio the operator's own work decides.
	b.ReportMetric(op.Seconds()/bareThree.Seconds(), "floor-ratio")
	b.ReportMetric(float64(snapshot.SizeBytes)/(1<<20), "snapshot-MiB")
}

const (
	// restoreBenchMiB of 1 MiB values: etcd takes requests of up to 1.5 MiB by default.
	restoreBenchMiB     = 256
	restoreBenchTimeout = 15 * time.Minute
)

// restoreBenchClusterSpec leaves room for the data: a quota above it and claims above that.
func restoreBenchClusterSpec(size int32) *etcdv1alpha1.EtcdClusterSpec {
	return &etcdv1alpha1.EtcdClusterSpec{
		Size: size, Version: etcdVersion,
		Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("2Gi"))},
		Tuning:  etcdv1alpha1.EtcdTuning{QuotaBackendBytes: ptrTo(resource.MustParse("1Gi"))},
	}
}

// fillCluster writes sizeMiB keys of 1 MiB of random bytes through the client Service, several
// at a time.
func fillCluster(b *testing.B, c *etcdv1alpha1.EtcdCluster, sizeMiB int) {
	svc := &corev1.Service{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: resources.ClientServiceName(c.Name)}, svc); err != nil {
		b.Fatal(err)
	}
	cl, err := clientv3.New(clientv3.Config{
		Endpoints: []string{fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, resources.ClientPort)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	value := make([]byte, 1<<20)
	_, _ = rand.Read(value)
	const workers = 8
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(sizeMiB); i = next.Add(1) - 1 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := cl.Put(ctx, fmt.Sprintf("fill/%06d", i), string(value))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("put fill/%06d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// bareRestore is the restore by hand, in one pod on a claim of its own like a member's. The
// member is Ready as the operator's are: etcd's /readyz, probed every second.
func bareRestore(b *testing.B, ns, name, snapshotURL string) *corev1.Pod {
	ctx := context.Background()
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}}},
	}
	if err := k8sClient.Create(ctx, claim); err != nil {
		b.Fatal(err)
	}
	const (
		dir     = "/var/lib/etcd"
		file    = dir + "/snapshot.db"
		dataDir = "--data-dir=" + dir + "/data"
		peerURL = "http://localhost:2380"
		initial = "--initial-cluster=bare=" + peerURL
	)
	container := func(name, image string, command ...string) corev1.Container {
		return corev1.Container{
			Name: name, Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Command: command,
			VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: dir}},
			SecurityContext: restrictedContainerSecurityContext(),
		}
	}
	etcd := container("etcd", benchImage, "/usr/local/bin/etcd", "--name=bare", dataDir,
		"--listen-peer-urls=http://0.0.0.0:2380", "--listen-client-urls=http://0.0.0.0:2379", "--listen-metrics-urls=http://0.0.0.0:2381",
		"--advertise-client-urls=http://localhost:2379", "--initial-advertise-peer-urls="+peerURL, initial,
		"--quota-backend-bytes=1073741824")
	etcd.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(2381)}},
		PeriodSeconds: 1,
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptrTo(false),
			SecurityContext:              restrictedPodSecurityContext(),
			InitContainers: []corev1.Container{
				// Not wget's -T: busybox 1.35's wget crashes with it.
				container("fetch", busyboxImage, "wget", "-q", "-O", file, snapshotURL),
				container("restore", benchImage, "/usr/local/bin/etcdutl", "snapshot", "restore", file, dataDir,
					"--name=bare", initial, "--initial-advertise-peer-urls="+peerURL),
			},
			Containers: []corev1.Container{etcd},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name},
			}}},
		},
	}
	if err := k8sClient.Create(ctx, pod); err != nil {
		b.Fatal(err)
	}
	return pod
}

// deletePodsAndWait deletes pods at once and waits until they are gone.
func deletePodsAndWait(b *testing.B, pods ...corev1.Pod) {
	for i := range pods {
		if err := k8sClient.Delete(context.Background(), &pods[i], client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
	}
	for i := range pods {
		poll(b, "pod "+pods[i].Name+" gone", func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(&pods[i]), &pods[i])), nil
		})
	}
}

// deleteClusterAndWait deletes a cluster and waits until its pods are gone.
func deleteClusterAndWait(b *testing.B, c *etcdv1alpha1.EtcdCluster) {
	ctx := context.Background()
	if err := k8sClient.Delete(ctx, c); err != nil {
		b.Fatal(err)
	}
	poll(b, "pods of "+c.Name+" gone", func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		err := k8sClient.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels{resources.LabelCluster: c.Name})
		return err == nil && len(pods.Items) == 0, err
	})
}

func listPods(b *testing.B, ns string, selector client.MatchingLabels) []corev1.Pod {
	pods := &corev1.PodList{}
	if err := k8sClient.List(context.Background(), pods, client.InNamespace(ns), selector); err != nil {
		b.Fatal(err)
	}
	return pods.Items
}

// logTimeline says when each pod was created, each of its containers ran and it became Ready,
// counted from start (to the second, the API's resolution): where the time went.
func logTimeline(b *testing.B, what string, start time.Time, pods []corev1.Pod) {
	since := func(t metav1.Time) string { return t.Sub(start).Round(time.Second).String() }
	for _, p := range pods {
		steps := []string{"created " + since(p.CreationTimestamp)}
		for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if t := c.State.Terminated; t != nil {
				steps = append(steps, fmt.Sprintf("%s %s-%s", c.Name, since(t.StartedAt), since(t.FinishedAt)))
			} else if r := c.State.Running; r != nil {
				steps = append(steps, fmt.Sprintf("%s from %s", c.Name, since(r.StartedAt)))
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				steps = append(steps, "Ready "+since(c.LastTransitionTime))
			}
		}
		b.Logf("%s: pod %s: %s", what, p.Name, strings.Join(steps, ", "))
	}
}

// saveContainerLogs writes, when BENCH_LOGS names a directory, the log of each container of
// pods, its lines time-stamped by the kubelet, to <pod>.<container>.log, with the time the
// iteration started in the first line: the pods' timelines to the millisecond.
func saveContainerLogs(b *testing.B, start time.Time, pods ...corev1.Pod) {
	dir := os.Getenv("BENCH_LOGS")
	if dir == "" {
		return
	}
	clientset := newClientset(b)
	for _, p := range pods {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			log, err := clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Timestamps: true}).DoRaw(context.Background())
			if err != nil {
				b.Logf("logs of %s/%s: %v", p.Name, c.Name, err)
				continue
			}
			header := "iteration started " + start.UTC().Format(time.RFC3339Nano) + "\n"
			if err := os.WriteFile(filepath.Join(dir, p.Name+"."+c.Name+".log"), append([]byte(header), log...), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func report(b *testing.B, opName string, op time.Duration, baseName string, base time.Duration) {
	n := float64(b.N)
	b.ReportMetric(op.Seconds()/n, opName)
	b.ReportMetric(base.Seconds()/n, baseName)
	b.ReportMetric(op.Seconds()/base.Seconds(), "ratio")
}

func benchNamespace(b *testing.B) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
	return ns.Name
}

func benchCluster(b *testing.B, ns, name string) *etcdv1alpha1.EtcdCluster {
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))}},
	}
	if err := k8sClient.Create(context.Background(), c); err != nil {
		b.Fatal(err)
	}
	return c
}

// benchStatefulSet is the textbook etcd StatefulSet: static bootstrap of all three members in
// parallel, a claim each, the same image, probes and restricted security context. Its headless
// Service names the peers; clients use a ClusterIP Service of Ready pods, as the operator's do.
func benchStatefulSet(b *testing.B, ns, name string) *appsv1.StatefulSet {
	ctx := context.Background()
	labels := map[string]string{"bench": name}
	peers := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "peer", Port: 2380}, {Name: "client", Port: 2379}}},
	}
	clientSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: benchClientServiceName(name), Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "client", Port: 2379}}},
	}
	for _, svc := range []*corev1.Service{peers, clientSvc} {
		if err := k8sClient.Create(ctx, svc); err != nil {
			b.Fatal(err)
		}
	}
	var initial []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("%s-%d=http://%s-%d.%s.%s.svc:2380", name, i, name, i, name, ns))
	}
	peer := fmt.Sprintf("http://$(POD_NAME).%s.%s.svc", name, ns)
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(2381)}}, PeriodSeconds: 2}
	}
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptrTo[int32](3), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true), RunAsUser: ptrTo[int64](65532), FSGroup: ptrTo[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "etcd", Image: benchImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"/usr/local/bin/etcd"},
						Args: []string{"--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data",
							"--listen-peer-urls=http://0.0.0.0:2380", "--listen-client-urls=http://0.0.0.0:2379",
							"--listen-metrics-urls=http://0.0.0.0:2381",
							"--advertise-client-urls=" + peer + ":2379", "--initial-advertise-peer-urls=" + peer + ":2380",
							"--initial-cluster=" + strings.Join(initial, ","), "--initial-cluster-state=new",
							"--initial-cluster-token=" + name},
						Env:            []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						ReadinessProbe: probe("/readyz"),
						VolumeMounts:   []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("256Mi")}}},
			}},
		},
	}
	if err := k8sClient.Create(ctx, s); err != nil {
		b.Fatal(err)
	}
	return s
}

func benchClientServiceName(statefulSet string) string { return statefulSet + "-client" }

func waitAvailableB(b *testing.B, c *etcdv1alpha1.EtcdCluster, size int) {
	poll(b, "cluster "+c.Name+" Available", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		return isAvailable(c, size), nil
	})
}

func waitStatefulSetReady(b *testing.B, s *appsv1.StatefulSet, n int32) {
	poll(b, "StatefulSet "+s.Name+" ready", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return false, err
		}
		return s.Status.ReadyReplicas == n && s.Status.ObservedGeneration == s.Generation, nil
	})
}

// waitRecreatedReady waits until old's replacement is Ready, noting since start when it was
// first seen to exist, to run its container and to be Ready.
func waitRecreatedReady(b *testing.B, old *corev1.Pod, start time.Time) recreation {
	var r recreation
	poll(b, "pod "+old.Name+" recreated and Ready", func(ctx context.Context) (bool, error) {
		p := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(old), p); err != nil || p.UID == old.UID {
			return false, ignoreNotFound(err)
		}
		now := time.Since(start)
		if r.created == 0 {
			r.created = now
		}
		if r.running == 0 && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
			r.running = now
		}
		if podReady(p) {
			r.ready = now
			r.running = cmp.Or(r.running, now)
			return true, nil
		}
		return false, nil
	})
	return r
}

// poll checks every 100 ms — fine enough for figures of seconds — for at most 5 minutes.
func poll(b *testing.B, what string, done func(context.Context) (bool, error)) {
	b.Helper()
	pollFor(b, what, 5*time.Minute, done)
}

func pollFor(b *testing.B, what string, timeout time.Duration, done func(context.Context) (bool, error)) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ok, err := done(context.Background())
		if err != nil {
			b.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("%s: not within %v", what, timeout)
}

func envDuration(name string, fallback time.Duration) time.Duration {
	if d, err := time.ParseDuration(envOr(name, "")); err == nil {
		return d
	}
	return fallback
}
