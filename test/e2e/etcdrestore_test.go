//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
	"github.com/etcd-database/etcd-operator/internal/restoreplan"
)

// A restore takes a Job per member and the members' start together (from a snapshot on a
// claim: one member's Job and start, and the others joining as learners).
const restoreTimeout = 5 * time.Minute

// Back up a dataset, write more, and restore into new clusters: exactly the backed-up keys at
// the backed-up revision; bad sources fail without touching anything.
func TestEtcdRestore(t *testing.T) {
	inParallel(t, 140*time.Second) // with the backup tests, after the cluster lifecycle tests
	f := newBackupFixture(t, "e2e-restore-")
	ctx := context.Background()

	backup := f.createBackup(t, "before", etcdv1alpha1.EtcdBackupSpec{Destination: f.s3Destination("restore/", f.s3.CredentialsSecret)})
	waitBackupPhase(t, backup, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
	if backup.Status.Phase != etcdv1alpha1.BackupCompleted {
		t.Fatalf("backup failed: %+v", backup.Status)
	}
	art := backup.Status.LastBackup
	putDataset(t, clientServiceEndpoint(t, f.cluster), "later/", 50, 16)

	t.Run("into a new cluster from an EtcdBackup", func(t *testing.T) {
		rs := f.createRestore(t, "from-backup", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name}},
			Target: f.newTarget("restored", 3),
		})
		waitRestorePhase(t, rs, restoreTimeout)
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
			t.Fatalf("restore %s: %+v", rs.Status.Phase, rs.Status)
		}
		if deref(rs.Status.RestoredRevision) != art.Revision || rs.Status.SnapshotURI != art.URI || rs.Status.SnapshotSHA256 != art.SHA256 {
			t.Errorf("status %+v; want revision %d of %s (sha256 %s)", rs.Status, art.Revision, art.URI, art.SHA256)
		}
		restored := &etcdv1alpha1.EtcdCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "restored"}, restored); err != nil {
			t.Fatal(err)
		}
		if restored.Status.ReadyMembers != 3 {
			t.Errorf("restored cluster has %d ready members, want 3", restored.Status.ReadyMembers)
		}
		// Every member restored at once from the snapshot: the members are those the restore
		// prepared, none joined as a learner; and each reported the same keyspace.
		var members []string
		for _, m := range restored.Status.Members {
			members = append(members, m.Name)
		}
		slices.Sort(members)
		prepared := resources.RestoreMemberNames(restored.Name, string(rs.UID), 3)
		slices.Sort(prepared)
		if !slices.Equal(members, prepared) {
			t.Errorf("restored cluster's members %v, want the three the restore prepared %v", members, prepared)
		}
		if says := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); says == nil || !strings.Contains(says.Message, "every member with HashKV") {
			t.Errorf("the completion %v does not say every member reported the same keyspace", says)
		}
		if rs.Status.RevisionBump < restoreplan.MinAutoBump {
			t.Errorf("bumped by %d, want at least %d (spec.revisionBump Auto)", rs.Status.RevisionBump, restoreplan.MinAutoBump)
		}
		expectData(t, clientServiceEndpoint(t, restored), art.Revision+rs.Status.RevisionBump, map[string]int{"dataset/": datasetKeys, "later/": 0})
		logRestorePrinterColumns(t, f.ns)
	})

	t.Run("from a PVC backup", func(t *testing.T) {
		claim := createClaim(t, f.ns, "restore-source")
		b := f.createBackup(t, "to-claim", etcdv1alpha1.EtcdBackupSpec{Destination: etcdv1alpha1.StorageLocation{
			PVC: &etcdv1alpha1.PVCLocation{ClaimName: claim.Name, SubPath: "snapshots"},
		}})
		waitBackupPhase(t, b, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
		if b.Status.Phase != etcdv1alpha1.BackupCompleted {
			t.Fatalf("backup failed: %+v", b.Status)
		}
		rs := f.createRestore(t, "from-claim", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: b.Name}},
			Target: f.newTarget("from-claim", 1),
		})
		waitRestorePhase(t, rs, restoreTimeout)
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
			t.Fatalf("restore %s: %+v", rs.Status.Phase, rs.Status)
		}
		restored := &etcdv1alpha1.EtcdCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "from-claim"}, restored); err != nil {
			t.Fatal(err)
		}
		expectData(t, clientServiceEndpoint(t, restored), b.Status.LastBackup.Revision+rs.Status.RevisionBump, map[string]int{"dataset/": datasetKeys, "later/": 50})
	})

	key := strings.TrimPrefix(art.URI, "s3://"+backupBucket+"/restore/")
	// Last of the successful ones: it replaces the fixture cluster's data.
	t.Run("in place: same name and endpoint, the backed-up data only", func(t *testing.T) {
		before := &etcdv1alpha1.EtcdCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f.cluster), before); err != nil {
			t.Fatal(err)
		}
		endpoint := clientServiceEndpoint(t, f.cluster)
		oldMembers := map[string]bool{}
		for _, m := range before.Status.Members {
			oldMembers[m.Name] = true
		}
		// A client that has read the keyspace at seen watches on from there, as an informer does.
		seen, watch := watchFromNow(t, endpoint, "dataset/")
		rs := f.createRestore(t, "in-place", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name, URI: art.URI}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: f.cluster.Name},
		})
		// A fresh linearizability workload from the cut-over on (the restored cluster's ID in
		// status), through the regrowth that follows.
		waitForWithin(t, "the restored cluster serving", restoreTimeout, func(ctx context.Context) (bool, error) {
			cur := &etcdv1alpha1.EtcdCluster{}
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f.cluster), cur)
			return err == nil && cur.Status.ClusterID != "" && cur.Status.ClusterID != before.Status.ClusterID, err
		})
		workload := startWorkload(t, endpoint)
		waitRestorePhase(t, rs, restoreTimeout)
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
			t.Fatalf("restore %s: %+v", rs.Status.Phase, rs.Status)
		}
		waitAvailable(t, f.cluster, 3)
		t.Logf("linearizable from the cut-over on: %+v", checkLinearizable(t, workload))
		if rs.Status.Replaced == nil || rs.Status.Replaced.ClusterID != before.Status.ClusterID || len(rs.Status.Replaced.Members) != 3 {
			t.Errorf("replaced %+v, want cluster %s and its 3 members", rs.Status.Replaced, before.Status.ClusterID)
		}
		after := &etcdv1alpha1.EtcdCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f.cluster), after); err != nil {
			t.Fatal(err)
		}
		if after.UID != before.UID || clientServiceEndpoint(t, after) != endpoint || after.Status.ClusterID == before.Status.ClusterID {
			t.Errorf("after: uid %s endpoint %s cluster %s; before: uid %s endpoint %s cluster %s; want the same object and endpoint serving a new etcd cluster",
				after.UID, clientServiceEndpoint(t, after), after.Status.ClusterID, before.UID, endpoint, before.Status.ClusterID)
		}
		var members []string
		for _, m := range after.Status.Members {
			if oldMembers[m.Name] {
				t.Errorf("old member %s still in the restored cluster", m.Name)
			}
			members = append(members, m.Name)
		}
		// Every member staged from the snapshot and started together: the members are the
		// three the restore prepared, none joined as a learner; each reported the same keyspace.
		slices.Sort(members)
		prepared := resources.RestoreMemberNames(f.cluster.Name, string(rs.UID), 3)
		slices.Sort(prepared)
		if !slices.Equal(members, prepared) {
			t.Errorf("restored cluster's members %v, want the three the restore prepared %v", members, prepared)
		}
		if says := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); says == nil || !strings.Contains(says.Message, "every member with HashKV") {
			t.Errorf("the completion %v does not say every member reported the same keyspace", says)
		}
		// The restore lets go of the cluster once its outcome is in its status, a step later.
		logged := ""
		waitFor(t, "the restore's annotations gone from the cluster", func(ctx context.Context) (bool, error) {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f.cluster), after)
			if now := fmt.Sprint(after.Annotations); err == nil && len(after.Annotations) != 0 && now != logged {
				t.Logf("annotations on the cluster: %s", now)
				logged = now
			}
			return err == nil && len(after.Annotations) == 0, err
		})
		// The workload has written since: the restored keyspace is read at its first revision.
		expectData(t, endpoint, 0, map[string]int{"dataset/": datasetKeys, "later/": 0})
		expectFirstRevision(t, endpoint, art.Revision+rs.Status.RevisionBump)
		if art.Revision+rs.Status.RevisionBump <= seen {
			t.Errorf("the restored keyspace starts at revision %d (%d bumped by %d), not past %d, which a client read before the restore",
				art.Revision+rs.Status.RevisionBump, art.Revision, rs.Status.RevisionBump, seen)
		}
		// Without the bump the watch, reconnected to the restored cluster at a revision it
		// has again, would wait on with its data out of date, and see no compaction.
		watch.expectCompacted(t)
		waitFor(t, "the old members' claims deleted", func(ctx context.Context) (bool, error) {
			claims := &corev1.PersistentVolumeClaimList{}
			if err := k8sClient.List(ctx, claims, client.InNamespace(f.ns)); err != nil {
				return false, err
			}
			for _, c := range claims.Items {
				if oldMembers[strings.TrimPrefix(c.Name, "data-")] {
					return false, nil
				}
			}
			return true, nil
		})
	})

	t.Run("checksum mismatch fails and leaves no cluster", func(t *testing.T) {
		rs := f.createRestore(t, "corrupt", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Location: &etcdv1alpha1.SnapshotLocation{
				StorageLocation: f.s3Destination("restore/", f.s3.CredentialsSecret),
				Key:             key,
				SHA256:          strings.Repeat("0", 64),
			}},
			Target: f.newTarget("corrupt", 1),
		})
		expectRestoreFailed(t, rs, "not the recorded")
		expectNoCluster(t, f.ns, "corrupt")
	})

	t.Run("truncated snapshot fails and leaves no cluster", func(t *testing.T) {
		whole := f.s3.getObject(t, backupBucket, "restore/"+key)
		f.s3.putObject(t, backupBucket, "truncated/"+key, whole[:len(whole)/2])
		rs := f.createRestore(t, "truncated", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Location: &etcdv1alpha1.SnapshotLocation{
				StorageLocation: f.s3Destination("truncated/", f.s3.CredentialsSecret),
				Key:             key,
			}},
			Target: f.newTarget("truncated", 1),
		})
		expectRestoreFailed(t, rs, "")
		expectNoCluster(t, f.ns, "truncated")
	})

	t.Run("an existing cluster is never restored over in mode New", func(t *testing.T) {
		rs := f.createRestore(t, "taken", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name}},
			Target: f.newTarget(f.cluster.Name, 3),
		})
		expectRestoreFailed(t, rs, "already exists")
		expectData(t, clientServiceEndpoint(t, f.cluster), 0, map[string]int{"dataset/": datasetKeys})
	})

	t.Run("an unknown backup is waited for, and nothing made meanwhile", func(t *testing.T) {
		rs := f.createRestore(t, "unknown", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "no-such-backup"}},
			Target: f.newTarget("unknown", 1),
		})
		// It may yet be made (objects created together): the restore waits, bounded, and says so.
		waitFor(t, "the restore waiting for EtcdBackup no-such-backup", func(ctx context.Context) (bool, error) {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(rs), rs); err != nil {
				return false, err
			}
			cond := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
			return rs.Status.Phase == etcdv1alpha1.RestorePending && cond != nil && cond.Reason == etcdv1alpha1.ReasonWaitingForSource &&
				strings.Contains(cond.Message, "does not exist"), nil
		})
		expectNoCluster(t, f.ns, "unknown")
		if err := k8sClient.Delete(context.Background(), rs); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a version older than the snapshot's fails", func(t *testing.T) {
		target := f.newTarget("too-old", 1)
		target.Cluster.Version = "3.5.0"
		rs := f.createRestore(t, "too-old", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name}},
			Target: target,
		})
		expectRestoreFailed(t, rs, "older")
		expectNoCluster(t, f.ns, "too-old")
	})
}

func (f *backupFixture) newTarget(name string, size int32) etcdv1alpha1.RestoreTarget {
	return etcdv1alpha1.RestoreTarget{
		Mode: etcdv1alpha1.RestoreNew, ClusterName: name,
		Cluster: &etcdv1alpha1.EtcdClusterSpec{
			Size: size, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("512Mi"))},
		},
	}
}

func (f *backupFixture) createRestore(t *testing.T, name string, spec etcdv1alpha1.EtcdRestoreSpec) *etcdv1alpha1.EtcdRestore {
	t.Helper()
	rs := &etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: spec}
	if err := k8sClient.Create(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			_ = k8sClient.Get(context.Background(), client.ObjectKeyFromObject(rs), rs)
			t.Logf("EtcdRestore %s status: %+v", rs.Name, rs.Status)
		}
	})
	return rs
}

func expectRestoreFailed(t *testing.T, rs *etcdv1alpha1.EtcdRestore, messagePart string) {
	t.Helper()
	waitRestorePhase(t, rs, restoreTimeout)
	cond := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
	if rs.Status.Phase != etcdv1alpha1.RestoreFailed || cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, messagePart) {
		t.Fatalf("phase %s, Succeeded %+v; want Failed saying %q", rs.Status.Phase, cond, messagePart)
	}
	if rs.Status.CompletionTime == nil {
		t.Errorf("a failed restore records when it ended")
	}
}

func expectNoCluster(t *testing.T, namespace, name string) {
	t.Helper()
	waitFor(t, "no EtcdCluster "+name, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &etcdv1alpha1.EtcdCluster{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// expectData checks the keys under each prefix, how many and that each holds the value
// putDataset wrote at it, and, unless revision is 0, that the keyspace is at that revision.
func expectData(t *testing.T, endpoint string, revision int64, counts map[string]int) {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for prefix, want := range counts {
		// Generous: the cluster may have just been made, its endpoints not yet everywhere.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := cl.Get(ctx, prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			t.Fatalf("read %s: %v", prefix, err)
		}
		if len(resp.Kvs) != want {
			t.Errorf("%d keys under %s, want %d", len(resp.Kvs), prefix, want)
		}
		// Each value, not only the count: the one putDataset wrote at that key.
		for _, kv := range resp.Kvs {
			if key := string(kv.Key); string(kv.Value) != datasetValue(key, len(kv.Value)) {
				t.Errorf("%s holds %.40q…, not the value written at it", key, kv.Value)
				break
			}
		}
		if revision != 0 && resp.Header.Revision != revision {
			t.Errorf("keyspace at revision %d, want %d (the snapshot's, bumped)", resp.Header.Revision, revision)
		}
	}
}

// expectFirstRevision: the restored cluster's history starts at revision, the snapshot's
// bumped and marked compacted: the keyspace reads at revision as restored, and not before.
func expectFirstRevision(t *testing.T, endpoint string, revision int64) {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cl.Get(ctx, "dataset/", clientv3.WithPrefix(), clientv3.WithRev(revision), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("read the restored keyspace at revision %d: %v", revision, err)
	}
	if resp.Count != datasetKeys {
		t.Errorf("%d keys under dataset/ at revision %d, want %d", resp.Count, revision, datasetKeys)
	}
	if _, err := cl.Get(ctx, "dataset/", clientv3.WithPrefix(), clientv3.WithRev(revision-1), clientv3.WithCountOnly()); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("read at revision %d, before the restored one: %v, want %v", revision-1, err, rpctypes.ErrCompacted)
	}
}

func logRestorePrinterColumns(t *testing.T, namespace string) {
	t.Logf("kubectl get etcdrestores -o wide:\n%s", kubectlGet(t, namespace, "etcdrestores"))
}

// watchFromNow reads prefix at endpoint and watches it from the revision after the one read,
// as a Kubernetes informer lists and then watches. The watch follows the cluster through
// whatever happens to it: the client reconnects, and resumes from the last revision it got.
func watchFromNow(t *testing.T, endpoint, prefix string) (int64, *revisionWatch) {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); _ = cl.Close() })
	resp, err := cl.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	w := &revisionWatch{ended: make(chan struct{})}
	ch := cl.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		defer close(w.ended)
		for r := range ch {
			w.mu.Lock()
			w.events += len(r.Events)
			if r.CompactRevision != 0 {
				w.compactedAt = r.CompactRevision
			}
			if err := r.Err(); err != nil {
				w.err = err
			}
			w.mu.Unlock()
		}
	}()
	return resp.Header.Revision, w
}

type revisionWatch struct {
	ended       chan struct{}
	mu          sync.Mutex
	events      int
	compactedAt int64
	err         error
}

// expectCompacted: the watch ended with etcd's compaction error, with no event before it (the
// prefix is written no more after the watch began), within two minutes of the restore (the
// client's reconnection backs off while the cluster is down).
func (w *revisionWatch) expectCompacted(t *testing.T) {
	t.Helper()
	select {
	case <-w.ended:
	case <-time.After(2 * time.Minute):
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.compactedAt == 0 || w.events != 0 {
		t.Errorf("the watch from before the restore: %d events, compacted at %d, error %v; want no event and a compaction error", w.events, w.compactedAt, w.err)
	} else {
		t.Logf("the watch from before the restore ended: %v (compacted at %d)", w.err, w.compactedAt)
	}
}
