//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Corruption caught and replaced. A member is stopped, one value in its database file is
// altered on disk (the same number of bytes, so the file stays a valid database: a flipped bit
// in a value, which nothing but a comparison of hashes can see), and it is started again. The
// operator finds it (etcd's start-up check, if it could compare; otherwise the operator's own
// comparison, made once a member's etcd has started again and caught up), reports it (Degraded
// CorruptMember and a Warning naming it), takes it out of the client Service, removes it, keeps
// its claim, and a fresh member takes its place. A reader of the value through the client
// Service never sees the altered one once the member is found, and no acknowledged write is lost.
func TestACorruptedMemberIsCaughtAndReplaced(t *testing.T) {
	inParallel(t, 200*time.Second)
	ctx := context.Background()
	ns := testNamespace(t, "e2e-corrupt-")
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "corrupt", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))}},
	}
	create(t, c)
	waitAvailable(t, c, 3)
	endpoint := clientServiceEndpoint(t, c)
	const key, value, altered = "/e2e/corrupt/precious", "the-value-as-written-0123456789", "THE-VALUE-AS-WRITTEN-0123456789"
	cl := etcdClient(t, endpoint)
	if _, err := cl.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
	acked := putMany(t, cl, "/e2e/corrupt/before/", 50)

	victim := followerName(t, c)
	alterValueOnDisk(t, c, victim, []byte(value), []byte(altered))
	reader := readContinuously(t, endpoint, key)

	restarted := time.Now()
	waitFor(t, "member "+victim+" found corrupt", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		return slices.ContainsFunc(c.Status.CorruptMembers, func(cm etcdv1alpha1.CorruptMember) bool { return cm.Name == victim }), nil
	})
	found := time.Now()
	t.Logf("found %v after its start: %+v", found.Sub(restarted).Round(time.Second), c.Status.CorruptMembers)
	if cond := degradedCondition(c); cond == nil || cond.Reason != etcdv1alpha1.ReasonCorruptMember || !strings.Contains(cond.Message, victim) {
		t.Errorf("Degraded %+v, want CorruptMember naming %s", cond, victim)
	}
	waitWarning(t, ns, etcdv1alpha1.ReasonCorruptMember, victim)
	waitFor(t, "member "+victim+" removed", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		return !slices.ContainsFunc(c.Status.Members, func(m etcdv1alpha1.MemberStatus) bool { return m.Name == victim }), nil
	})
	removed := time.Now()
	t.Logf("removed %v after it was found", removed.Sub(found).Round(time.Second))
	waitFor(t, "member "+victim+" replaced and the record done", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		return isAvailable(c, 3) && len(c.Status.CorruptMembers) == 0, nil
	})
	acked = append(acked, putMany(t, cl, "/e2e/corrupt/after/", 50)...)

	claim := &corev1.PersistentVolumeClaim{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.PVCName(victim)}, claim); err != nil {
		t.Fatalf("the corrupt member's claim, its data the evidence, is gone: %v", err)
	}
	if claim.Labels["etcd.database.dev/retained-from"] != c.Name || claim.Labels[resources.LabelCluster] != "" {
		t.Errorf("the corrupt member's claim is not released from the cluster: %v", claim.Labels)
	}
	seen := reader.stop()
	if seen.reads == 0 {
		t.Fatal("the reader never read the key through the client Service")
	}
	// Before it was found, a member whose start-up check could not compare served its data;
	// out of the client Service, it still answers the connections clients had made to it,
	// until its removal stops it.
	t.Logf("read %d times through the client Service; the altered value %d times, the last at %v (found at %v, removed at %v)",
		seen.reads, len(seen.altered), lastOf(seen.altered), found, removed)
	for _, at := range seen.altered {
		if at.After(removed) {
			t.Fatalf("read the altered value through the client Service at %v, after the member was removed (%v)", at, removed)
		}
	}
	checkAllPresent(t, cl, acked)
	resp, err := cl.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != value {
		t.Fatalf("after the replacement %s reads %v (%v), want %q", key, resp, err, value)
	}
}

// Two members of five whose data diverged from the other three's while they were stopped, and
// whose revision the others compacted past (so that etcd's start-up check cannot compare them
// and they start, serving their data), are named: by etcd's compaction hash check (a CORRUPT
// alarm) or by the operator's comparison of hashes, whichever comes first; each is replaced, the
// alarm cleared afterwards, and writes go through again.
func TestDivergedMembersAreNamedAndReplaced(t *testing.T) {
	if os.Getenv("E2E_EXTENDED") == "" {
		t.Skip("an extended case, not in CI: run with make test-e2e-extended")
	}
	inParallel(t, 420*time.Second)
	ctx := context.Background()
	ns := testNamespace(t, "e2e-diverged-")
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "diverged", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 5, Version: etcdVersion,
			Storage:         etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
			CorruptionCheck: etcdv1alpha1.CorruptionCheckSpec{Interval: &metav1.Duration{Duration: time.Minute}}},
	}
	create(t, c)
	waitAvailable(t, c, 5)
	endpoint := clientServiceEndpoint(t, c)
	const key, value, altered = "/e2e/diverged/precious", "the-value-as-written-0123456789", "THE-VALUE-AS-WRITTEN-0123456789"
	cl := etcdClient(t, endpoint)
	if _, err := cl.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
	acked := putMany(t, cl, "/e2e/diverged/before/", 20)
	var victims []string
	for _, p := range memberPods(t, c) {
		if p.Name != c.Status.Leader && len(victims) < 2 {
			victims = append(victims, p.Name)
		}
	}
	stopMembers(t, c, victims)
	for _, v := range victims {
		alterStoppedMember(t, c, v, []byte(value), []byte(altered))
	}
	// The others move on and compact past the stopped members' revision.
	acked = append(acked, putMany(t, cl, "/e2e/diverged/while-stopped/", 20)...)
	resp, err := cl.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	resume(t, c)

	waitFor(t, "members "+strings.Join(victims, ", ")+" named", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		var named []string
		for _, cm := range c.Status.CorruptMembers {
			named = append(named, cm.Name)
		}
		if last := c.Status.LastConsistencyCheck; last != nil && last.Result == etcdv1alpha1.ConsistencyDiverged {
			named = append(named, last.Diverged...)
		}
		return !slices.ContainsFunc(victims, func(v string) bool { return !slices.Contains(named, v) }), nil
	})
	for _, cm := range c.Status.CorruptMembers {
		if !slices.Contains(victims, cm.Name) {
			t.Errorf("member %s named corrupt, though its data is the majority's: %s", cm.Name, cm.Evidence)
		}
	}
	t.Logf("named: %+v; last comparison: %+v", c.Status.CorruptMembers, c.Status.LastConsistencyCheck)
	waitFor(t, "both replaced, the alarm cleared", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		left := slices.ContainsFunc(c.Status.Members, func(m etcdv1alpha1.MemberStatus) bool { return slices.Contains(victims, m.Name) })
		return !left && isAvailable(c, 5) && len(c.Status.CorruptMembers) == 0, nil
	})
	acked = append(acked, putMany(t, cl, "/e2e/diverged/after/", 20)...)
	checkAllPresent(t, cl, acked)
}

// etcdClient is a plain client of endpoint, closed with the test.
func etcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// putMany writes n keys under prefix, retrying each until acknowledged, and returns them.
func putMany(t *testing.T, cl *clientv3.Client, prefix string, n int) []string {
	t.Helper()
	var keys []string
	for i := range n {
		k := fmt.Sprintf("%s%04d", prefix, i)
		waitFor(t, "put "+k, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := cl.Put(ctx, k, k)
			return err == nil, nil
		})
		keys = append(keys, k)
	}
	return keys
}

func checkAllPresent(t *testing.T, cl *clientv3.Client, keys []string) {
	t.Helper()
	for _, k := range keys {
		resp, err := cl.Get(context.Background(), k)
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != k {
			t.Fatalf("acknowledged write %s: %v (%v)", k, resp, err)
		}
	}
}

func followerName(t *testing.T, c *etcdv1alpha1.EtcdCluster) string {
	t.Helper()
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Status.Members {
		if !m.IsLeader && !m.IsLearner {
			return m.Name
		}
	}
	t.Fatalf("no follower in %+v", c.Status.Members)
	return ""
}

// alterValueOnDisk stops member (the cluster paused, so that the operator does not make its
// pod again meanwhile), replaces from with to in its database file, and lets the operator
// start it again.
func alterValueOnDisk(t *testing.T, c *etcdv1alpha1.EtcdCluster, member string, from, to []byte) {
	t.Helper()
	stopMembers(t, c, []string{member})
	alterStoppedMember(t, c, member, from, to)
	resume(t, c)
}

// stopMembers pauses the cluster and deletes the members' pods, waiting until they are gone.
func stopMembers(t *testing.T, c *etcdv1alpha1.EtcdCluster, members []string) {
	t.Helper()
	patchSpec(t, c, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Paused = true })
	for _, m := range members {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: m}}
		if err := k8sClient.Delete(context.Background(), pod); ignoreNotFound(err) != nil {
			t.Fatal(err)
		}
		waitFor(t, "pod "+m+" gone", func(ctx context.Context) (bool, error) {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)
			return ignoreNotFound(err) == nil && err != nil, ignoreNotFound(err)
		})
	}
}

func resume(t *testing.T, c *etcdv1alpha1.EtcdCluster) {
	t.Helper()
	patchSpec(t, c, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Paused = false })
}

// alterStoppedMember edits a stopped member's database file: copied out through a pod that
// mounts its claim, changed with bbolt (every value holding from gets to in its place, as a bit
// flipped on disk would leave it), and written back.
func alterStoppedMember(t *testing.T, c *etcdv1alpha1.EtcdCluster, member string, from, to []byte) {
	t.Helper()
	ctx := context.Background()
	editor := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "edit-" + member, Namespace: c.Namespace},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptrTo(false),
			TerminationGracePeriodSeconds: ptrTo(int64(0)),
			SecurityContext:               restrictedPodSecurityContext(),
			Containers: []corev1.Container{{
				Name: "edit", Image: busyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sleep", "3600"}, SecurityContext: restrictedContainerSecurityContext(),
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: jobspec.MemberDataMount}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: resources.PVCName(member)}}}},
		},
	}
	create(t, editor)
	waitFor(t, "the editor of "+member+" running", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(editor), editor)
		return err == nil && podReady(editor), err
	})
	db := jobspec.MemberDataDir + "/member/snap/db"
	local := filepath.Join(t.TempDir(), "db")
	out, err := kubectlExec(editor, nil, "cat", db)
	if err != nil {
		t.Fatalf("copy %s out: %v", db, err)
	}
	if err := os.WriteFile(local, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if n := replaceValues(t, local, from, to); n == 0 {
		t.Fatalf("no value of %s's database holds %q", member, from)
	}
	edited, err := os.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	// Streamed through the API server, which has reset the stream once on the loaded node.
	waitFor(t, "copy "+db+" back", func(context.Context) (bool, error) {
		back, err := kubectlExec(editor, edited, "sh", "-c", "cat > "+db+" && wc -c < "+db)
		if err != nil {
			t.Logf("copy %s back: %v; again", db, err)
			return false, nil
		}
		return strings.TrimSpace(string(back)) == fmt.Sprint(len(edited)), nil
	})
	if err := k8sClient.Delete(ctx, editor, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the editor of "+member+" gone", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(editor), editor)
		return ignoreNotFound(err) == nil && err != nil, ignoreNotFound(err)
	})
}

// replaceValues puts to in place of from in every value of etcd's key bucket, and says how many
// it changed.
func replaceValues(t *testing.T, path string, from, to []byte) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	changed := 0
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return errors.New("no key bucket")
		}
		edits := map[string][]byte{}
		if err := b.ForEach(func(k, v []byte) error {
			if bytes.Contains(v, from) {
				edits[string(k)] = bytes.ReplaceAll(v, from, to)
			}
			return nil
		}); err != nil {
			return err
		}
		for k, v := range edits {
			if err := b.Put([]byte(k), v); err != nil {
				return err
			}
		}
		changed = len(edits)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

func kubectlExec(pod *corev1.Pod, stdin []byte, command ...string) ([]byte, error) {
	args := append([]string{"exec", "-i", "-n", pod.Namespace, pod.Name, "--"}, command...)
	cmd := exec.Command(envOr("E2E_KUBECTL", "../../bin/k8s/kubectl"), args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	return out, nil
}

// continuousReader reads a key through the client Service until stopped, recording when it
// read anything but the value written.
type continuousReader struct {
	stopOnce sync.Once
	done     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	seen     readsSeen
}

type readsSeen struct {
	reads   int
	altered []time.Time
}

func readContinuously(t *testing.T, endpoint, key string) *continuousReader {
	t.Helper()
	r := &continuousReader{done: make(chan struct{})}
	cl := etcdClient(t, endpoint)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			select {
			case <-r.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := cl.Get(ctx, key)
			cancel()
			if err != nil || len(resp.Kvs) != 1 {
				continue
			}
			r.mu.Lock()
			r.seen.reads++
			if !strings.HasPrefix(string(resp.Kvs[0].Value), "the-value") {
				r.seen.altered = append(r.seen.altered, time.Now())
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *continuousReader) stop() readsSeen {
	r.stopOnce.Do(func() { close(r.done) })
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

func degradedCondition(c *etcdv1alpha1.EtcdCluster) *metav1.Condition {
	for i := range c.Status.Conditions {
		if cond := c.Status.Conditions[i]; cond.Type == etcdv1alpha1.ConditionDegraded && cond.Status == metav1.ConditionTrue {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// waitWarning waits for a Warning event with reason whose note names what.
func waitWarning(t *testing.T, namespace, reason, what string) {
	t.Helper()
	waitFor(t, "a Warning "+reason+" naming "+what, func(ctx context.Context) (bool, error) {
		list := &corev1.EventList{}
		if err := k8sClient.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Message, what)
		}), nil
	})
}

func lastOf(times []time.Time) time.Time {
	if len(times) == 0 {
		return time.Time{}
	}
	return times[len(times)-1]
}
