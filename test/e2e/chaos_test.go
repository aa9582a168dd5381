//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/test/linearizability"
)

// chaosSettleTimeout bounds how long a cluster may take to be whole again after one fault: a
// member restarted or replaced, a scale step, a rolling upgrade of five members.
const chaosSettleTimeout = 6 * time.Minute

// TestChaos is the soak: two clusters, each under a writer and linearizability clients and with
// a backup scheduled every minute, while faults are injected at random for E2E_CHAOS_DURATION —
// a member pod killed, a member's volume lost, the operator killed (alone, or in the middle of
// the operator's own work), a scale between 3 and 5 members, one rolling upgrade per cluster.
// One fault at a time: before each, both clusters must be whole again (Available at their size
// and version), and how long that took is the fault's availability window. At the end no
// acknowledged write may be lost, each cluster's clients' history must be linearizable, and
// each backup must have completed runs whose last snapshot is in the bucket as recorded.
//
// Unset E2E_CHAOS_DURATION skips it (make chaos DURATION=30m; CI runs make chaos-ci).
// E2E_CHAOS_SEED replays a run's choice of faults.
func TestChaos(t *testing.T) {
	duration, err := time.ParseDuration(os.Getenv("E2E_CHAOS_DURATION"))
	if err != nil {
		t.Skip("E2E_CHAOS_DURATION is not a duration: run with make chaos DURATION=30m")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("E2E_CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("E2E_CHAOS_SEED: %v", err)
		}
	}
	t.Logf("chaos for %v, seed %d (E2E_CHAOS_SEED=%d replays the choice of faults)", duration, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	ns := testNamespace(t, "e2e-chaos-")
	s3 := startS3Server(t, ns)
	s3.createBucket(t, backupBucket)
	clusters := []*chaosCluster{startChaosCluster(t, ns, "alpha", s3), startChaosCluster(t, ns, "beta", s3)}

	soak := &chaosSoak{t: t, rng: rng, clusters: clusters}
	start := time.Now()
	for time.Since(start) < duration {
		soak.injectOne()
		soak.settle()
	}
	soak.faultsDone = time.Since(start)
	t.Run("every kind of fault was injected", func(t *testing.T) {
		if missing := soak.kindsMissing(); len(missing) > 0 {
			t.Errorf("never injected: %v in %d faults over %v (the first %d faults are one of each kind: the run was too short)",
				missing, len(soak.faults), soak.faultsDone.Round(time.Second), len(chaosFaultWeights))
		}
	})

	for _, cc := range clusters {
		t.Run(cc.c.Name+": no acknowledged write lost", func(t *testing.T) { cc.writer.verify(t) })
		t.Run(cc.c.Name+": the clients' history is linearizable", func(t *testing.T) { cc.history = checkLinearizable(t, cc.clients) })
		t.Run(cc.c.Name+": the scheduled backups ran and status is true", func(t *testing.T) { cc.checkBackups(t, s3) })
	}
	t.Logf("chaos summary:\n%s", soak.summary())
}

// chaosCluster is one cluster of the soak and what watches it.
type chaosCluster struct {
	c       *etcdv1alpha1.EtcdCluster
	writer  *writer
	clients *linearizability.Workload
	backup  *etcdv1alpha1.EtcdBackup
	history linearizability.Counts
}

func startChaosCluster(t *testing.T, ns, name string, s3 *s3Server) *chaosCluster {
	t.Helper()
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
		},
	}
	create(t, c)
	waitAvailable(t, c, 3)
	b := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: etcdv1alpha1.EtcdBackupSpec{
			ClusterName: name, Schedule: "* * * * *",
			Retention: &etcdv1alpha1.BackupRetention{MaxCount: ptrTo(int32(3))},
			Destination: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
				Bucket: backupBucket, Prefix: name + "/", Endpoint: s3.Endpoint, ForcePathStyle: true, AllowPlainHTTP: true,
				CredentialsSecretName: s3.CredentialsSecret,
			}},
		},
	}
	create(t, b)
	endpoint := clientServiceEndpoint(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A longer pause than the e2e default keeps a 30-minute history small enough to check.
	clients, err := linearizability.Start(ctx, linearizability.Config{Endpoints: []string{endpoint}, Prefix: "/chaos/linearizability", Pause: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(clients.Close)
	return &chaosCluster{c: c, writer: startWriter(t, endpoint, "/chaos/writer"), clients: clients, backup: b}
}

// whole: Available with every member a healthy voter, at the spec's size and version, and every
// member status lists has a Ready pod, none other. The pods are looked at too: right after a
// member's pod is killed, status still says what the operator last saw.
func (cc *chaosCluster) whole(ctx context.Context) (bool, error) {
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cc.c), cc.c); err != nil {
		return false, err
	}
	if !isAvailable(cc.c, int(cc.c.Spec.Size)) || cc.c.Status.CurrentVersion != cc.c.Spec.Version {
		return false, nil
	}
	pods := &corev1.PodList{}
	if err := k8sClient.List(ctx, pods, client.InNamespace(cc.c.Namespace), client.MatchingLabels{resources.LabelCluster: cc.c.Name}); err != nil {
		return false, err
	}
	ready := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels[resources.LabelMember] != "" && p.DeletionTimestamp.IsZero() && podReady(p) {
			ready[p.Name] = true
		}
	}
	if len(ready) != int(cc.c.Spec.Size) {
		return false, nil
	}
	for _, m := range cc.c.Status.Members {
		if !ready[m.Name] {
			return false, nil
		}
	}
	return true, nil
}

// checkBackups: runs completed while faults were injected, and the last one's snapshot is in
// the bucket with the size status records. Runs that failed are counted, not failures of the
// soak: a run whose member was killed under it fails, and the next one is due a minute later.
func (cc *chaosCluster) checkBackups(t *testing.T, s3 *s3Server) {
	b := cc.backup
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
		t.Fatal(err)
	}
	completed, failed := cc.backupRuns()
	if completed == 0 {
		t.Fatalf("no scheduled backup of %s completed (%d failed): status %+v", cc.c.Name, failed, b.Status)
	}
	art := b.Status.LastBackup
	if art == nil {
		t.Fatalf("backup %s has completed runs but no status.lastBackup", b.Name)
	}
	key := strings.TrimPrefix(art.URI, "s3://"+backupBucket+"/")
	if keys := s3.listObjects(t, backupBucket, cc.c.Name+"/"); !slices.Contains(keys, key) {
		t.Fatalf("status.lastBackup %s is not in the bucket, which holds %v", art.URI, keys)
	}
	if got := int64(len(s3.getObject(t, backupBucket, key))); got != art.SizeBytes {
		t.Errorf("the last snapshot has %d bytes, status says %d", got, art.SizeBytes)
	}
}

func (cc *chaosCluster) backupRuns() (completed, failed int) {
	for _, run := range cc.backup.Status.History {
		switch run.Phase {
		case etcdv1alpha1.BackupCompleted:
			completed++
		case etcdv1alpha1.BackupFailed:
			failed++
		}
	}
	return completed, failed
}

// chaosSoak injects the faults, one at a time, and records what each cost.
type chaosSoak struct {
	t          *testing.T
	rng        *rand.Rand
	clusters   []*chaosCluster
	faults     []chaosFault
	faultsDone time.Duration
	// firsts are the kinds not drawn yet: the first faults are one of each kind, in a random
	// order, so that even CI's short run has every kind.
	firsts []string
}

type chaosFault struct {
	kind, target string
	// window: from the fault until both clusters were whole again.
	window time.Duration
}

// The kinds of fault, with how often each is drawn.
const (
	faultKillMember     = "kill a member pod"
	faultLoseVolume     = "lose a member's volume"
	faultKillOperator   = "kill the operator"
	faultScale          = "scale 3<->5"
	faultScaleAndCrash  = "scale, operator killed during it"
	faultUpgradeAndKill = "upgrade, operator killed during it"
)

var chaosFaultWeights = []struct {
	kind   string
	weight int
}{
	{faultKillMember, 4}, {faultLoseVolume, 2}, {faultKillOperator, 2}, {faultScale, 2}, {faultScaleAndCrash, 2}, {faultUpgradeAndKill, 1},
}

func (s *chaosSoak) draw() string {
	if s.firsts == nil {
		for _, f := range chaosFaultWeights {
			s.firsts = append(s.firsts, f.kind)
		}
		s.rng.Shuffle(len(s.firsts), func(i, j int) { s.firsts[i], s.firsts[j] = s.firsts[j], s.firsts[i] })
	}
	if len(s.firsts) > 0 {
		kind := s.firsts[0]
		s.firsts = s.firsts[1:len(s.firsts):len(s.firsts)]
		return kind
	}
	total := 0
	for _, f := range chaosFaultWeights {
		total += f.weight
	}
	n := s.rng.IntN(total)
	for _, f := range chaosFaultWeights {
		if n -= f.weight; n < 0 {
			return f.kind
		}
	}
	panic("unreachable")
}

func (s *chaosSoak) injectOne() {
	t, ctx := s.t, context.Background()
	cc := s.clusters[s.rng.IntN(len(s.clusters))]
	kind := s.draw()
	if kind == faultUpgradeAndKill && cc.c.Spec.Version == etcdNextVersion {
		kind = faultKillMember // upgraded already: etcd does not go back
	}
	target := cc.c.Name
	switch kind {
	case faultKillMember:
		target = s.killMember(cc)
	case faultLoseVolume:
		victim := s.randomMember(cc)
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: victim.Namespace, Name: resources.PVCName(victim.Name)}}
		if err := k8sClient.Delete(ctx, pvc); ignoreNotFound(err) != nil {
			t.Fatal(err)
		}
		if err := k8sClient.Delete(ctx, &victim, client.GracePeriodSeconds(0)); ignoreNotFound(err) != nil {
			t.Fatal(err)
		}
		target = victim.Name
	case faultKillOperator:
		target = s.killOperator()
	case faultScale, faultScaleAndCrash:
		size := int32(5)
		if cc.c.Spec.Size == 5 {
			size = 3
		}
		patchSpec(t, cc.c, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = size })
		target = fmt.Sprintf("%s to %d", cc.c.Name, size)
		if kind == faultScaleAndCrash {
			s.killOperatorSoon()
		}
	case faultUpgradeAndKill:
		patchSpec(t, cc.c, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Version = etcdNextVersion })
		target = cc.c.Name + " to " + etcdNextVersion
		s.killOperatorSoon()
	}
	s.faults = append(s.faults, chaosFault{kind: kind, target: target})
}

func (s *chaosSoak) randomMember(cc *chaosCluster) corev1.Pod {
	pods := memberPods(s.t, cc.c)
	if len(pods) == 0 {
		s.t.Fatalf("cluster %s has no member pod", cc.c.Name)
	}
	return pods[s.rng.IntN(len(pods))]
}

func (s *chaosSoak) killMember(cc *chaosCluster) string {
	victim := s.randomMember(cc)
	if err := k8sClient.Delete(context.Background(), &victim, client.GracePeriodSeconds(0)); ignoreNotFound(err) != nil {
		s.t.Fatal(err)
	}
	return victim.Name
}

// killOperatorSoon kills the operator within a few seconds, while it works on the change just
// made.
func (s *chaosSoak) killOperatorSoon() {
	time.Sleep(time.Duration(s.rng.IntN(5000)) * time.Millisecond)
	s.killOperator()
}

func (s *chaosSoak) killOperator() string {
	ctx := context.Background()
	deployment := &appsv1.Deployment{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, deployment); err != nil {
		s.t.Fatal(err)
	}
	selector, err := metav1.LabelSelectorAsSelector(deployment.Spec.Selector)
	if err != nil {
		s.t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := k8sClient.List(ctx, pods, client.InNamespace(operatorNamespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		s.t.Fatal(err)
	}
	var killed []string
	for i := range pods.Items {
		if err := k8sClient.Delete(ctx, &pods.Items[i], client.GracePeriodSeconds(0)); ignoreNotFound(err) != nil {
			s.t.Fatal(err)
		}
		killed = append(killed, pods.Items[i].Name)
	}
	return strings.Join(killed, ",")
}

// settle waits until both clusters are whole again and records how long it took.
func (s *chaosSoak) settle() {
	began := time.Now()
	for _, cc := range s.clusters {
		err := pollUntil(context.Background(), chaosSettleTimeout, cc.whole)
		if err != nil {
			last := s.faults[len(s.faults)-1]
			logEvents(s.t, cc.c.Namespace)
			s.t.Fatalf("after %q (%s), cluster %s was not whole again within %v: %v; status %+v", last.kind, last.target, cc.c.Name, chaosSettleTimeout, err, cc.c.Status)
		}
	}
	last := &s.faults[len(s.faults)-1]
	last.window = time.Since(began)
	s.t.Logf("fault %d: %s (%s); both clusters whole again in %v", len(s.faults), last.kind, last.target, last.window.Round(100*time.Millisecond))
}

// kindsMissing are the kinds of fault the soak has not injected.
func (s *chaosSoak) kindsMissing() []string {
	var missing []string
	for _, f := range chaosFaultWeights {
		if !slices.ContainsFunc(s.faults, func(fault chaosFault) bool { return fault.kind == f.kind }) {
			missing = append(missing, f.kind)
		}
	}
	return missing
}

// summary: the faults by kind with their availability windows, what the clients did, the
// backups, and the verdict.
func (s *chaosSoak) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %d faults in %v\n", len(s.faults), s.faultsDone.Round(time.Second))
	for _, f := range chaosFaultWeights {
		var windows []time.Duration
		for _, fault := range s.faults {
			if fault.kind == f.kind {
				windows = append(windows, fault.window)
			}
		}
		if len(windows) == 0 {
			continue
		}
		slices.Sort(windows)
		fmt.Fprintf(&b, "  %-36s %3d  whole again in: min %v, median %v, max %v\n", f.kind, len(windows),
			windows[0].Round(100*time.Millisecond), windows[len(windows)/2].Round(100*time.Millisecond), windows[len(windows)-1].Round(100*time.Millisecond))
	}
	for _, cc := range s.clusters {
		completed, failed := cc.backupRuns()
		fmt.Fprintf(&b, "  %s: %d writes acknowledged, %d not; clients: %v; backup runs in status (its bounded history): %d completed, %d failed\n",
			cc.c.Name, cc.writer.ackedCount(), cc.writer.failedCount(), cc.history, completed, failed)
	}
	verdict := "PASS: no acknowledged write lost, every history linearizable, every backup's status true"
	if s.t.Failed() {
		verdict = "FAIL: see the errors above"
	}
	fmt.Fprintf(&b, "  verdict: %s", verdict)
	return b.String()
}
