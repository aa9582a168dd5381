package agent_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// archivedCluster is a cluster backed up once into the series nightly, then written to (puts,
// multi-key txns, leased keys, deletes), every revision after the backup archived beside it
// in one lineage, as an archiver leaves them: a segment of three revisions at a time, a
// revision seen every second from t0.
type archivedCluster struct {
	raw   *clientv3.Client
	dest  *storage.Destination
	cfg   jobspec.JobConfig
	paths agent.PodPaths
	keys  *encryption.Keyring
	// base is the backup the lineage starts from, later one taken after the burst.
	base, later agent.BackupResult
	// burst are revisions of a run of multi-key txns; last the last revision archived.
	burst []int64
	last  int64
}

func seenAt(rev int64) time.Time { return t0.Add(time.Hour + time.Duration(rev)*time.Second) }

func newArchivedCluster(t *testing.T, dest *storage.Destination, loc etcdv1alpha1.StorageLocation, claim string, keys *encryption.Keyring, keysDir string) *archivedCluster {
	t.Helper()
	servers := clusterHoldingASecret(t)
	a := &archivedCluster{raw: servers[0].Client(t), dest: dest, keys: keys}
	ctx := t.Context()
	for i := range 10 {
		a.put(t, clientv3.OpPut(fmt.Sprintf("before/%d", i), "v"))
	}
	base, err := agent.Backup(ctx, agent.BackupConfig{
		Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest, Keys: keys, Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	a.base = base
	lease, err := a.raw.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	a.put(t, clientv3.OpPut("leased/a", "v", clientv3.WithLease(lease.ID)), clientv3.OpPut("leased/b", "v", clientv3.WithLease(lease.ID)))
	for i := range 6 {
		a.burst = append(a.burst, a.put(t, clientv3.OpPut(fmt.Sprintf("txn/%d/a", i), "v"), clientv3.OpPut(fmt.Sprintf("txn/%d/b", i), "v"),
			clientv3.OpDelete(fmt.Sprintf("before/%d", i)), clientv3.OpPut("counter", strconv.Itoa(i))))
	}
	a.later, err = agent.Backup(ctx, agent.BackupConfig{
		Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest, Keys: keys,
		// Begun two revisions before the one it read: as a backup whose name understated its
		// revision would have been (TestPointInTimeFetchPlansAgainFromTheRevisionTheBaseHolds).
		Now: func() time.Time { return seenAt(a.burst[len(a.burst)-1] - 2) },
	})
	if err != nil {
		t.Fatal(err)
	}
	a.put(t, clientv3.OpDelete("txn/", clientv3.WithPrefix()))
	a.last = a.put(t, clientv3.OpPut("/registry/secrets/db/password", secretValue+"-2"))

	a.writeArchive(t, etcdtest.Revisions(t, a.raw, base.Revision, a.last), map[int64]int64{int64(lease.ID): 600})
	a.cfg = jobspec.JobConfig{
		Cluster: nightly.Cluster, Namespace: nightly.Namespace, Backup: nightly.Backup, BackupUID: nightly.UID,
		Storage: loc, RestoreUID: "0d5e7c3a-restore",
		Recorded: []jobspec.Snapshot{{Key: strings.TrimPrefix(base.URI, dest.URI(dest.Prefix())), SHA256: base.SHA256, Revision: base.Revision}},
	}
	if keys != nil {
		a.cfg.Encryption = &etcdv1alpha1.SnapshotEncryption{SecretName: keys.Secret()}
	}
	a.paths = agent.PodPaths{Claim: claim, VerifyScratch: t.TempDir(), EncryptionKeys: keysDir}
	return a
}

func (a *archivedCluster) put(t *testing.T, ops ...clientv3.Op) int64 {
	t.Helper()
	resp, err := a.raw.Txn(t.Context()).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// writeArchive stores revs as segments of one lineage started from the backup, with the
// metadata an archiver gives them, its lineage.json and its watermark.
func (a *archivedCluster) writeArchive(t *testing.T, revs []etcd.Revision, leaseTTL map[int64]int64) {
	t.Helper()
	ctx := t.Context()
	dir := nightly.Dir(a.dest.Prefix())
	clusterID, err := strconv.ParseUint(a.base.ClusterID, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	lineage := archive.LineageName(clusterID, a.base.Revision)
	if err := archive.WriteLineage(ctx, a.dest, dir, lineage, archive.Lineage{
		ClusterID: a.base.ClusterID, Base: a.base.Revision, BaseKey: strings.TrimPrefix(a.base.URI, a.dest.URI("")), Started: t0.Add(time.Minute),
	}); err != nil {
		t.Fatal(err)
	}
	for chunk := range slices.Chunk(revs, 3) {
		seg := archive.Segment{LeaseTTL: map[int64]int64{}}
		for _, r := range chunk {
			seg.Records = append(seg.Records, archive.Record{Revision: r, Seen: seenAt(r.Revision)})
			for _, e := range r.Events {
				if e.Lease != 0 {
					seg.LeaseTTL[e.Lease] = leaseTTL[e.Lease]
				}
			}
		}
		a.storeSegment(t, archive.SegmentKey(dir, lineage, seg.First(), seg.Last()), seg)
	}
	if err := archive.WriteWatermark(ctx, a.dest, dir, lineage, archive.Watermark{HighestRevision: a.last, Time: seenAt(a.last).Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// storeSegment encodes seg, encrypted to the newest key when the series is encrypted, to key,
// with the metadata an archiver gives it.
func (a *archivedCluster) storeSegment(t *testing.T, key string, seg archive.Segment) {
	t.Helper()
	var buf bytes.Buffer
	keyID := ""
	if a.keys == nil {
		if err := archive.Encode(&buf, seg); err != nil {
			t.Fatal(err)
		}
	} else {
		w, k, err := a.keys.Encrypt(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := archive.Encode(w, seg); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		keyID = k.ID
	}
	if err := a.dest.UploadWithMetadata(t.Context(), key, &buf, archive.Metadata(seg, keyID)); err != nil {
		t.Fatal(err)
	}
}

// serveScratch restores the fetched base with etcdutl and serves it over TLS from the fetch's
// material, as the Job's etcdutl and etcd containers do.
func serveScratch(t *testing.T, scratch string) *etcdtest.Server {
	t.Helper()
	member := etcdtest.NewServer(t, "verify")
	member.ClientURL = strings.Replace(member.ClientURL, "http://", "https://", 1)
	member.ExtraArgs = jobspec.VerifyEtcdTLSArgs(filepath.Join(scratch, jobspec.VerifyTLSSubdir))
	restoreInto(t, filepath.Join(scratch, "snapshot.db"), member)
	member.Start(t, "new", etcdtest.InitialCluster(member))
	return member
}

func restoreInto(t *testing.T, snapshot string, member *etcdtest.Server) {
	t.Helper()
	restore := exec.Command(filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl"), "snapshot", "restore", snapshot,
		"--data-dir", member.DataDir, "--name", member.Name,
		"--initial-cluster", etcdtest.InitialCluster(member), "--initial-advertise-peer-urls", member.PeerURL)
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
}

// keyspaceOf is every key with its value, revisions, version and lease, at rev (0: the latest).
func keyspaceOf(t *testing.T, cl *clientv3.Client, rev int64) []string {
	t.Helper()
	resp, err := cl.Get(t.Context(), "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = fmt.Sprintf("%s=%s c%d m%d v%d l%x", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return out
}

// The point-in-time Job's two agent containers, run whole as the Job runs them, to a claim and
// to a bucket, plain and encrypted: the fetch plans from the listing (the backup, the lineage
// after it) and stages the base; restored and served as the Job's etcd does, the replay brings
// it to the target, one inside a run of multi-key txns, and saves it beside the series. That
// snapshot, fetched back and restored, holds what the source held at the target, encrypted
// when the series is.
func TestPointInTimeJobMaterializesTheTarget(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "backups")
	bucket := fetchFromBucket(t, srv, agent.BackupResult{}, "").Storage
	key := newIdentity(t)
	for name, encrypted := range map[string]bool{"claim": false, "bucket, encrypted": true} {
		t.Run(name, func(t *testing.T) {
			var keys *encryption.Keyring
			keysDir := ""
			if encrypted {
				keys = keyring(t, "backup-keys", map[string]*age.X25519Identity{"2026-11": key})
				keysDir = mountedKeys(t, map[string]*age.X25519Identity{"2026-11": key})
			}
			loc, claim := bucket, ""
			dest := destination(t, srv, "backups")
			if !encrypted {
				claim = t.TempDir()
				pvc := &etcdv1alpha1.PVCLocation{ClaimName: "backups"}
				loc = etcdv1alpha1.StorageLocation{PVC: pvc}
				var err error
				if dest, err = storage.OpenDir(claim, agent.ClaimURIBase(pvc)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = dest.Close() })
			}
			a := newArchivedCluster(t, dest, loc, claim, keys, keysDir)
			target := a.burst[3]
			a.cfg.TargetRevision = target

			code, fetched := runInPod(t, agent.RunPointInTimeFetch, a.cfg, a.paths)
			if code != 0 || fetched.PointInTime == nil || fetched.Restore == nil {
				t.Fatalf("fetch: exit %d, %+v", code, fetched)
			}
			if p := fetched.PointInTime; p.Revision != target || p.BaseRevision != a.base.Revision || p.ReplayedRevisions != target-a.base.Revision ||
				!strings.HasSuffix(a.base.URI, p.BaseKey) || fetched.Restore.SHA256 != a.base.SHA256 {
				t.Fatalf("fetch planned %+v, fetched %+v; want %d from the backup %+v", p, fetched.Restore, target, a.base)
			}

			member := serveScratch(t, a.paths.VerifyScratch)
			a.cfg.Endpoints = []string{member.ClientURL}
			code, replayed := runInPod(t, agent.RunPointInTimeReplay, a.cfg, a.paths)
			if code != 0 || replayed.PointInTime == nil {
				t.Fatalf("replay: exit %d, %+v", code, replayed)
			}
			got := replayed.PointInTime
			wantKey := agent.MaterializedKey("", nightly, a.cfg.RestoreUID, target)
			if got.Key != wantKey || got.URI != dest.URI(dest.Prefix()+wantKey) || got.Revision != target || got.SHA256 == "" ||
				got.EtcdVersion == "" || got.Keyspace == nil || got.Keyspace.Revision != target || (got.EncryptionKeyID != "") != encrypted {
				t.Fatalf("replay reported %+v, want %s at %d", got, wantKey, target)
			}

			stored := storedBytes(t, dest, got.URI)
			if bytes.Contains(stored, []byte(secretValue)) == encrypted {
				t.Errorf("the materialized snapshot holds the secret in plain: %v, encrypted: %v", bytes.Contains(stored, []byte(secretValue)), encrypted)
			}
			staging := t.TempDir()
			back, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: got.Key, SHA256: got.SHA256, Dir: staging, KeepDir: true, Keys: keys})
			if err != nil || back.Revision != target {
				t.Fatalf("fetch of the materialized snapshot: %+v, %v", back, err)
			}
			restored := etcdtest.NewServer(t, "restored")
			restoreInto(t, filepath.Join(staging, "snapshot.db"), restored)
			restored.Start(t, "new", etcdtest.InitialCluster(restored))
			restored.WaitReady(t)
			if have, want := keyspaceOf(t, restored.Client(t), 0), keyspaceOf(t, a.raw, target); !slices.Equal(have, want) {
				t.Errorf("the materialized snapshot holds\n%s\nthe source at %d held\n%s", strings.Join(have, "\n"), target, strings.Join(want, "\n"))
			}
		})
	}
}

// A full snapshot whose name gives a revision below the one it holds (its backup read the
// revision before streaming, and writes came between) is planned from, fetched, and planned
// again from the revision it holds: the replay starts where the snapshot is.
func TestPointInTimeFetchPlansAgainFromTheRevisionTheBaseHolds(t *testing.T) {
	a, dest := archivedOnAClaim(t)
	named := strings.TrimPrefix(a.later.URI, dest.URI(""))
	understated := strings.Replace(named, fmt.Sprintf("-r%d.db", a.later.Revision), fmt.Sprintf("-r%d.db", a.later.Revision-2), 1)
	if err := dest.Upload(t.Context(), understated, bytes.NewReader(storedBytes(t, dest, a.later.URI))); err != nil {
		t.Fatal(err)
	}
	if err := dest.Delete(t.Context(), named); err != nil {
		t.Fatal(err)
	}

	a.cfg.TargetRevision = a.last
	code, report := runInPod(t, agent.RunPointInTimeFetch, a.cfg, a.paths)
	if code != 0 || report.PointInTime == nil {
		t.Fatalf("fetch: exit %d, %+v", code, report)
	}
	if p := report.PointInTime; p.BaseKey != understated || p.BaseRevision != a.later.Revision || p.ReplayedRevisions != a.last-a.later.Revision {
		t.Fatalf("planned %+v; want from %s at the %d it holds", p, understated, a.later.Revision)
	}
}

// A point in time by time resolves to the last revision the archive saw by then; one past what
// it has seen, or past its revisions, fails the fetch for good, saying so, with nothing staged.
func TestPointInTimeFetchResolvesTimesAndRefusesWhatTheArchiveLacks(t *testing.T) {
	a, _ := archivedOnAClaim(t)

	at := seenAt(a.burst[1]).Add(500 * time.Millisecond)
	a.cfg.TargetTime = &at
	code, report := runInPod(t, agent.RunPointInTimeFetch, a.cfg, a.paths)
	if code != 0 || report.PointInTime == nil || report.PointInTime.Revision != a.burst[1] || !report.PointInTime.TargetTime.Equal(at) {
		t.Fatalf("fetch of %s: exit %d, %+v; want revision %d", at, code, report, a.burst[1])
	}

	for name, target := range map[string]func(*jobspec.JobConfig){
		"a revision past the archive": func(cfg *jobspec.JobConfig) { cfg.TargetTime, cfg.TargetRevision = nil, a.last+5 },
		"a time past the watermark": func(cfg *jobspec.JobConfig) {
			late := seenAt(a.last).Add(2 * time.Hour)
			cfg.TargetTime = &late
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := a.cfg
			target(&cfg)
			scratch := t.TempDir()
			code, report := runInPod(t, agent.RunPointInTimeFetch, cfg, agent.PodPaths{Claim: a.paths.Claim, VerifyScratch: scratch})
			if code != jobspec.ExitPermanent || !report.Permanent || !strings.Contains(report.Error, "past") || !strings.Contains(report.Error, strconv.FormatInt(a.last, 10)) {
				t.Fatalf("exit %d, %+v; want it refused for good, naming the archive's last revision %d", code, report, a.last)
			}
			if entries, _ := os.ReadDir(scratch); len(entries) != 0 {
				t.Errorf("a refused point in time left %v in the scratch directory", entries)
			}
		})
	}
}

// A lineage with no segment (just started, or on a cluster no one has written to since) is
// recoverable at its base's revision, from the base alone: the fetch plans it, replaying
// nothing. Before, only lineages with a segment were read, and the point was refused while the
// archiver reported it recoverable.
func TestPointInTimeFetchOfALineageWithoutSegmentsIsItsBase(t *testing.T) {
	a, dest := archivedOnAClaim(t)
	segs, err := archive.ListSegments(t.Context(), dest, nightly.Dir(dest.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if err := dest.Delete(t.Context(), s.Key); err != nil {
			t.Fatal(err)
		}
	}

	a.cfg.TargetRevision = a.base.Revision
	code, report := runInPod(t, agent.RunPointInTimeFetch, a.cfg, a.paths)
	if code != 0 || report.PointInTime == nil {
		t.Fatalf("fetch: exit %d, %+v", code, report)
	}
	if p := report.PointInTime; p.BaseRevision != a.base.Revision || p.Revision != a.base.Revision || p.ReplayedRevisions != 0 {
		t.Fatalf("planned %+v; want the base at %d alone", p, a.base.Revision)
	}
}

// archivedOnAClaim is an archivedCluster whose series is on a claim's directory, in plain.
func archivedOnAClaim(t *testing.T) (*archivedCluster, *storage.Destination) {
	t.Helper()
	claim := t.TempDir()
	pvc := &etcdv1alpha1.PVCLocation{ClaimName: "backups"}
	dest, err := storage.OpenDir(claim, agent.ClaimURIBase(pvc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dest.Close() })
	return newArchivedCluster(t, dest, etcdv1alpha1.StorageLocation{PVC: pvc}, claim, nil, ""), dest
}
