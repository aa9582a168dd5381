//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// pitrLong runs the long variant: more keys and more time under load, and more points.
var pitrLong = os.Getenv("E2E_PITR_LONG") != ""

// Point-in-time recovery, end to end. A workload of puts, deletes, multi-key transactions and
// leased keys runs against a 3-member cluster whose scheduled EtcdBackup archives continuously
// to the S3 server; then points are restored into new clusters and each is compared, key by
// key (value, create and mod revision, version, lease), with a read of the source at that
// revision taken before any compaction: one point inside a burst of transactions, one given as
// a time, and more in the long variant. Then the archiver is stopped, revisions are written and
// compacted away: the archive reports the gap and starts again from a new snapshot; a point
// in the gap is refused naming it, and a point after it restores exactly.
func TestPointInTimeRecovery(t *testing.T) {
	inParallel(t, 240*time.Second)
	f := newBackupFixture(t, "e2e-pitr-")
	ctx := context.Background()
	backup := f.createBackup(t, "archived", etcdv1alpha1.EtcdBackupSpec{
		Destination: f.s3Destination("pitr/", f.s3.CredentialsSecret),
		Schedule:    "@yearly",
		Continuous: &etcdv1alpha1.ContinuousArchive{
			SegmentDuration: &metav1.Duration{Duration: 5 * time.Second}, SegmentMaxBytes: 64 << 10,
		},
	})
	waitArchived(t, backup, 0)

	source := etcdClient(t, clientServiceEndpoint(t, f.cluster))
	w := &pitrWorkload{cl: source, rng: rand.New(rand.NewPCG(7, 11)), keys: 400}
	if pitrLong {
		w.keys = 3000
	}
	w.run(t, 20*time.Second)
	w.bulk(t, 300)
	burst := w.txnBurst(t, 20)
	middle := burst[len(burst)/2]
	w.run(t, 5*time.Second)
	// A quiet window around the target time: the archiver receives a revision a moment after
	// its commit (the times it records are its own), so the revisions written up to two
	// seconds before the time are the ones received by it, and none is written after it
	// until a second has passed.
	beforeTime := w.revision(t)
	time.Sleep(2 * time.Second)
	timeTarget := time.Now()
	time.Sleep(time.Second)
	afterTime := w.revision(t)
	w.run(t, 10*time.Second)
	points := map[string]int64{"burst": middle}
	if pitrLong {
		w.run(t, 3*time.Minute)
		points["early"], points["late"] = burst[0]-50, w.revision(t)
	}
	last := w.revision(t)
	want := map[int64]map[string]*mvccpb.KeyValue{}
	for _, rev := range append(slices.Collect(mapsValues(points)), beforeTime, afterTime) {
		want[rev] = readAt(t, source, rev)
	}
	waitArchived(t, backup, last)

	restores := map[string]*etcdv1alpha1.EtcdRestore{}
	for name, rev := range points {
		restores[name] = f.createRestore(t, "pitr-"+name, etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{PointInTime: &etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: &rev}},
			Target: f.newTarget("pitr-"+name, 1),
		})
	}
	restores["time"] = f.createRestore(t, "pitr-time", etcdv1alpha1.EtcdRestoreSpec{
		Source: etcdv1alpha1.RestoreSource{PointInTime: &etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Time: &metav1.Time{Time: timeTarget}}},
		Target: f.newTarget("pitr-time", 1),
	})
	var wg sync.WaitGroup
	for name, rs := range restores {
		wg.Go(func() {
			t.Run("restored "+name, func(t *testing.T) {
				waitRestorePhase(t, rs, restoreTimeout)
				if rs.Status.Phase != etcdv1alpha1.RestoreCompleted || rs.Status.PointInTime == nil {
					t.Fatalf("restore %s: %+v", rs.Name, rs.Status)
				}
				rev := rs.Status.PointInTime.Revision
				wantRev := want[rev]
				if name == "time" {
					// The archiver received every revision written up to two seconds before
					// the target time by then, and no other was written until after it.
					if rev < beforeTime || rev > afterTime {
						t.Fatalf("time %s restored revision %d; want one from %d to %d", timeTarget.Format(time.RFC3339Nano), rev, beforeTime, afterTime)
					}
					if wantRev == nil {
						wantRev = readAt(t, source, rev)
					}
				} else if rev != points[name] {
					t.Fatalf("restored revision %d, want %d", rev, points[name])
				}
				restored := &etcdv1alpha1.EtcdCluster{}
				if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: rs.Spec.Target.ClusterName}, restored); err != nil {
					t.Fatal(err)
				}
				got := readAt(t, etcdClient(t, clientServiceEndpoint(t, restored)), 0)
				if diff := keyspaceDiff(wantRev, got); diff != "" {
					t.Fatalf("revision %d restored (base %s at %d, %d revisions replayed) differs from the source read at it: %s",
						rev, rs.Status.PointInTime.BaseURI, rs.Status.PointInTime.BaseRevision, rs.Status.PointInTime.ReplayedRevisions, diff)
				}
			})
		})
	}
	wg.Wait()

	if pitrLong {
		t.Run("restored in place, the archive goes on in a lineage of its own", func(t *testing.T) {
			rev := points["burst"]
			rs := f.createRestore(t, "pitr-in-place", etcdv1alpha1.EtcdRestoreSpec{
				Source: etcdv1alpha1.RestoreSource{PointInTime: &etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: &rev}},
				Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: f.cluster.Name},
			})
			waitRestorePhase(t, rs, restoreTimeout)
			if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
				t.Fatalf("in-place restore: %+v", rs.Status)
			}
			// The same Service, the same client: it reconnects to the restored members.
			if diff := keyspaceDiff(want[rev], readAt(t, source, 0)); diff != "" {
				t.Fatalf("the cluster restored in place to revision %d differs from the source read at it: %s", rev, diff)
			}
			before := len(backup.Status.Archive.Gaps)
			w.leases = nil // those granted after the point are gone with the rest
			w.run(t, 5*time.Second)
			after := w.revision(t)
			waitArchived(t, backup, after)
			a := backup.Status.Archive
			if len(a.Gaps) <= before || a.RecoverableRange.First.Revision <= rev+rs.Status.RevisionBump-1 {
				t.Errorf("after the in-place restore, gaps %+v and range %+v: want a new lineage from a snapshot of the restored data", a.Gaps, a.RecoverableRange)
			}
		})
	}

	t.Run("a gap is reported, refused, and closed by a new snapshot", func(t *testing.T) {
		setSuspend(t, backup, true)
		waitFor(t, "the archiver stopped", func(ctx context.Context) (bool, error) {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(backup), backup); err != nil {
				return false, err
			}
			cond := meta.FindStatusCondition(backup.Status.Conditions, etcdv1alpha1.ConditionArchiving)
			return cond != nil && cond.Reason == etcdv1alpha1.ReasonSuspended, nil
		})
		archived := backup.Status.Archive.RecoverableRange.Last.Revision
		w.run(t, 3*time.Second)
		inGap := w.revision(t)
		w.run(t, 2*time.Second)
		if _, err := source.Compact(ctx, w.revision(t)); err != nil {
			t.Fatal(err)
		}
		setSuspend(t, backup, false)
		waitFor(t, "the gap reported", func(ctx context.Context) (bool, error) {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(backup), backup); err != nil {
				return false, err
			}
			a := backup.Status.Archive
			return a != nil && len(a.Gaps) > 0 && a.Gaps[len(a.Gaps)-1].AfterRevision >= archived && a.RecoverableRange != nil && a.RecoverableRange.First.Revision > inGap, nil
		})
		gap := backup.Status.Archive.Gaps[len(backup.Status.Archive.Gaps)-1]
		expectWarningEvent(t, f.ns, backup.Name, etcdv1alpha1.ReasonArchiveGap, fmt.Sprintf("broke after revision %d", gap.AfterRevision))

		refused := f.createRestore(t, "pitr-gap", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{PointInTime: &etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: &inGap}},
			Target: f.newTarget("pitr-gap", 1),
		})
		expectRestoreFailed(t, refused, fmt.Sprintf("revision %d", inGap))
		if cond := meta.FindStatusCondition(refused.Status.Conditions, etcdv1alpha1.ConditionSucceeded); cond.Reason != etcdv1alpha1.ReasonPointNotRecoverable {
			t.Errorf("reason %s, want %s", cond.Reason, etcdv1alpha1.ReasonPointNotRecoverable)
		}

		w.run(t, 5*time.Second)
		after := w.revision(t)
		wantAfter := readAt(t, source, after)
		waitArchived(t, backup, after)
		rs := f.createRestore(t, "pitr-after-gap", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{PointInTime: &etcdv1alpha1.PointInTimeSource{Backup: backup.Name, Revision: &after}},
			Target: f.newTarget("pitr-after-gap", 1),
		})
		waitRestorePhase(t, rs, restoreTimeout)
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
			t.Fatalf("restore after the gap: %+v", rs.Status)
		}
		restored := &etcdv1alpha1.EtcdCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "pitr-after-gap"}, restored); err != nil {
			t.Fatal(err)
		}
		if diff := keyspaceDiff(wantAfter, readAt(t, etcdClient(t, clientServiceEndpoint(t, restored)), 0)); diff != "" {
			t.Fatalf("revision %d restored after the gap differs from the source: %s", after, diff)
		}
	})
}

// pitrWorkload writes puts, deletes, multi-key transactions and leased keys over a fixed set
// of keys, and revokes leases that hold keys.
type pitrWorkload struct {
	cl     *clientv3.Client
	rng    *rand.Rand
	keys   int
	leases []clientv3.LeaseID
}

func (w *pitrWorkload) key() string { return fmt.Sprintf("pitr/%05d", w.rng.IntN(w.keys)) }

func (w *pitrWorkload) run(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	for end := time.Now().Add(d); time.Now().Before(end); {
		var err error
		switch n := w.rng.IntN(100); {
		case n < 55:
			_, err = w.cl.Put(ctx, w.key(), fmt.Sprintf("v%d", w.rng.Int64()))
		case n < 70:
			_, err = w.cl.Delete(ctx, w.key())
		case n < 85:
			_, err = w.txn(ctx)
		case n < 95:
			err = w.leasedPut(ctx)
		default:
			err = w.revokeOne(ctx)
		}
		if err != nil {
			t.Fatalf("workload: %v", err)
		}
	}
}

// txn puts and deletes several distinct keys in one revision.
func (w *pitrWorkload) txn(ctx context.Context) (int64, error) {
	seen := map[string]bool{}
	var ops []clientv3.Op
	for len(ops) < 2+w.rng.IntN(5) {
		k := w.key()
		if seen[k] {
			continue
		}
		seen[k] = true
		if w.rng.IntN(4) == 0 {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, fmt.Sprintf("t%d", w.rng.Int64())))
		}
	}
	resp, err := w.cl.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (w *pitrWorkload) leasedPut(ctx context.Context) error {
	if len(w.leases) == 0 || w.rng.IntN(5) == 0 {
		lease, err := w.cl.Grant(ctx, int64(600+w.rng.IntN(600)))
		if err != nil {
			return err
		}
		w.leases = append(w.leases, lease.ID)
	}
	_, err := w.cl.Put(ctx, w.key(), "leased", clientv3.WithLease(w.leases[w.rng.IntN(len(w.leases))]))
	return err
}

// revokeOne revokes a lease, deleting the keys it holds in one revision.
func (w *pitrWorkload) revokeOne(ctx context.Context) error {
	if len(w.leases) < 3 {
		return w.leasedPut(ctx)
	}
	i := w.rng.IntN(len(w.leases))
	_, err := w.cl.Revoke(ctx, w.leases[i])
	w.leases = slices.Delete(w.leases, i, i+1)
	return err
}

// bulk writes n keys on one lease and n more without, then revokes the lease and deletes the
// others by prefix: two revisions of n deletes each, past the 128 operations etcd takes in one
// transaction by default, which a replay writes as one.
func (w *pitrWorkload) bulk(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	lease, err := w.cl.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := w.cl.Put(ctx, fmt.Sprintf("pitr-bulk/leased/%04d", i), "x", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		if _, err := w.cl.Put(ctx, fmt.Sprintf("pitr-bulk/plain/%04d", i), "y"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.cl.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.cl.Delete(ctx, "pitr-bulk/plain/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// txnBurst writes n transactions back to back and returns their revisions.
func (w *pitrWorkload) txnBurst(t *testing.T, n int) []int64 {
	t.Helper()
	var revs []int64
	for range n {
		rev, err := w.txn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, rev)
	}
	return revs
}

func (w *pitrWorkload) revision(t *testing.T) int64 {
	t.Helper()
	resp, err := w.cl.Get(context.Background(), "pitr/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// readAt is every key at rev (0: the current revision), by key: the whole keyspace.
func readAt(t *testing.T, cl *clientv3.Client, rev int64) map[string]*mvccpb.KeyValue {
	t.Helper()
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	var resp *clientv3.GetResponse
	err := retryFor(30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		resp, err = cl.Get(ctx, "", opts...)
		return err
	})
	if err != nil {
		t.Fatalf("read at revision %d: %v", rev, err)
	}
	out := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv
	}
	return out
}

// keyspaceDiff says how got differs from want, key by key, or "".
func keyspaceDiff(want, got map[string]*mvccpb.KeyValue) string {
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, k+" missing")
		case string(g.Value) != string(w.Value) || g.CreateRevision != w.CreateRevision || g.ModRevision != w.ModRevision || g.Version != w.Version || g.Lease != w.Lease:
			diffs = append(diffs, fmt.Sprintf("%s: %q c%d m%d v%d l%x, want %q c%d m%d v%d l%x", k,
				g.Value, g.CreateRevision, g.ModRevision, g.Version, g.Lease, w.Value, w.CreateRevision, w.ModRevision, w.Version, w.Lease))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, k+" should not be there")
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("and %d more", len(diffs)-10))
	}
	return strings.Join(diffs, "; ")
}

func retryFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

func mapsValues(m map[string]int64) func(func(int64) bool) {
	return func(yield func(int64) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// waitArchived waits until the backup's recoverable range reaches rev.
func waitArchived(t *testing.T, b *etcdv1alpha1.EtcdBackup, rev int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("revision %d archived", rev), func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return false, err
		}
		a := b.Status.Archive
		return a != nil && a.RecoverableRange != nil && a.RecoverableRange.Last.Revision >= rev, nil
	})
}

func setSuspend(t *testing.T, b *etcdv1alpha1.EtcdBackup, suspend bool) {
	t.Helper()
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(b.DeepCopy())
	b.Spec.Suspend = suspend
	if err := k8sClient.Patch(context.Background(), b, patch); err != nil {
		t.Fatal(err)
	}
}
