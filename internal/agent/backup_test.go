package agent_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// nightly is an EtcdBackup "nightly" of cluster "main" in namespace "db".
var nightly = backupplan.Series{Namespace: "db", Cluster: "main", Backup: "nightly", UID: "3f9a1c20-7b4e-4d6a-9e15-c2b8d0f4a761"}

func destination(t *testing.T, srv *s3test.Server, bucket string) *storage.Destination {
	t.Helper()
	d, err := storage.OpenS3(t.Context(), storage.S3{
		Bucket: bucket, Prefix: "etcd/", Endpoint: srv.Endpoint, Region: "us-east-1", ForcePathStyle: true,
		AccessKeyID: s3test.AccessKey, SecretKey: s3test.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// backUpCluster backs up a real cluster of members holding keys keys to a real S3 server.
func backUpCluster(t *testing.T, members, keys int) (*s3test.Server, *storage.Destination, agent.BackupResult) {
	t.Helper()
	servers := etcdtest.StartCluster(t, members)
	raw := servers[0].Client(t)
	for i := range keys {
		if _, err := raw.Put(t.Context(), fmt.Sprintf("k%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	srv := s3test.Start(t)
	dest := destination(t, srv, srv.Bucket(t, "backups"))
	res, err := agent.Backup(t.Context(), agent.BackupConfig{
		Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest,
		Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv, dest, res
}

// A backup of a real three-member cluster lands in a real S3 server as a valid etcd snapshot
// at the revision and with the digest it reports.
func TestBackupToS3IsAVerifiedSnapshot(t *testing.T) {
	srv, _, res := backUpCluster(t, 3, 200)
	key := "etcd/db/main/nightly_3f9a1c20-7b4e-4d6a-9e15-c2b8d0f4a761/20260301T120000Z-r201.db"
	if res.URI != "s3://backups/"+key || res.Revision != 201 || res.EtcdVersion != "3.6.16" {
		t.Fatalf("result %+v", res)
	}

	file := filepath.Join(srv.Root, "backups", filepath.FromSlash(key))
	out, err := exec.Command(filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl"), "snapshot", "status", file, "-w", "json").Output()
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v", err)
	}
	var status struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(out, &status); err != nil || status.Revision != res.Revision {
		t.Fatalf("etcdutl sees revision %d (%v), backup reported %d", status.Revision, err, res.Revision)
	}
	if fi, _ := os.Stat(file); fi.Size() != res.SizeBytes {
		t.Fatalf("object is %d bytes, backup reported %d", fi.Size(), res.SizeBytes)
	}
}

// bothDestinations is a bucket on a real S3 server, under the prefix etcd/, and a directory,
// as a PersistentVolumeClaim is mounted.
func bothDestinations(t *testing.T) map[string]*storage.Destination {
	t.Helper()
	srv := s3test.Start(t)
	dir, err := storage.OpenDir(t.TempDir(), "pvc://backups/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dir.Close() })
	return map[string]*storage.Destination{"s3": destination(t, srv, srv.Bucket(t, "backups")), "pvc": dir}
}

// Several EtcdBackups share one destination: an hourly, a daily and a "daily-2" backup of one
// cluster, and a same-named backup of a same-named cluster in another namespace. Each run is
// told, as the operator tells it, the snapshot status.lastBackup names: the previous run's.
// Each keeps exactly its own maxCount snapshots, and with maxCount 1 the previous one too;
// nothing of another, nothing written under the earlier key format and nothing that is not a
// snapshot is ever deleted.
func TestRetentionPrunesOnlyItsOwnSnapshots(t *testing.T) {
	clusterA, clusterB := etcdtest.StartCluster(t, 1), etcdtest.StartCluster(t, 1)
	type schedule struct {
		series   backupplan.Series
		servers  []*etcdtest.Server
		maxCount int
		offset   time.Duration // of its runs within each hour, so that they interleave
	}
	schedules := []schedule{
		{backupplan.Series{Namespace: "team-a", Cluster: "main", Backup: "hourly", UID: "6f1c2a3b-0000-4000-8000-00000000000a"}, clusterA, 2, 0},
		{backupplan.Series{Namespace: "team-a", Cluster: "main", Backup: "daily", UID: "6f1c2a3b-0000-4000-8000-00000000000b"}, clusterA, 3, 10 * time.Minute},
		{backupplan.Series{Namespace: "team-a", Cluster: "main", Backup: "daily-2", UID: "6f1c2a3b-0000-4000-8000-00000000000c"}, clusterA, 1, 20 * time.Minute},
		{backupplan.Series{Namespace: "team-b", Cluster: "main", Backup: "hourly", UID: "6f1c2a3b-0000-4000-8000-00000000000d"}, clusterB, 2, 30 * time.Minute},
	}
	const runs = 5
	for name, dest := range bothDestinations(t) {
		t.Run(name, func(t *testing.T) {
			// What must survive: snapshots of the earlier key format (older than every new one,
			// more of them than any maxCount) and objects that are not snapshots.
			untouchable := []string{
				"main-20260228T090000Z-r1.db", "main-20260228T100000Z-r1.db", "main-20260228T110000Z-r1.db", "main-20260228T120000Z-r1.db",
				"main-notes.txt", "team-a/main/hourly_" + schedules[0].series.UID + "/notes.txt",
			}
			for i, key := range untouchable {
				untouchable[i] = dest.Prefix() + key
				if err := dest.Upload(t.Context(), untouchable[i], strings.NewReader("not this run's")); err != nil {
					t.Fatal(err)
				}
			}
			written := map[string][]string{} // URIs per EtcdBackup, oldest first
			lastPruned := map[string][]string{}
			for run := range runs {
				for _, s := range schedules {
					now := t0.Add(time.Duration(run)*time.Hour + s.offset)
					var lastBackup string
					if own := written[s.series.UID]; len(own) > 0 {
						lastBackup = own[len(own)-1]
					}
					res, err := agent.Backup(t.Context(), agent.BackupConfig{
						Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(s.servers)}, Series: s.series, Destination: dest,
						MaxCount: s.maxCount, LastBackup: lastBackup, Now: func() time.Time { return now },
					})
					if err != nil {
						t.Fatal(err)
					}
					if res.PruneError != "" {
						t.Fatalf("%s: prune: %s", s.series.Backup, res.PruneError)
					}
					written[s.series.UID] = append(written[s.series.UID], res.URI)
					lastPruned[s.series.UID] = res.Pruned
				}
			}

			var want []string
			for _, key := range untouchable {
				want = append(want, dest.URI(key))
			}
			for _, s := range schedules {
				own := written[s.series.UID]
				keeps := max(s.maxCount, 2) // maxCount 1: and the one status named during the run
				want = append(want, own[len(own)-keeps:]...)
				// The last run pruned exactly one snapshot: its own that fell out of what it keeps.
				if pruned := lastPruned[s.series.UID]; len(pruned) != 1 || pruned[0] != own[len(own)-keeps-1] {
					t.Errorf("%s/%s's last run pruned %v, want only its own %s", s.series.Namespace, s.series.Backup, pruned, own[len(own)-keeps-1])
				}
			}
			objects, err := dest.List(t.Context(), "")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objects {
				if path.Base(o.Key) == "watermark.json" {
					continue // each series' watermark: TestABackupRaisesItsSeriesWatermark
				}
				got = append(got, dest.URI(o.Key))
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("destination holds\n  %s\nwant each EtcdBackup's own maxCount and everything else untouched:\n  %s",
					strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

func TestBackupFailuresLeaveNoObject(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	srv := s3test.Start(t)
	dest := destination(t, srv, srv.Bucket(t, "backups"))
	cfg := agent.BackupConfig{Series: nightly, Destination: dest, Now: func() time.Time { return t0 }}

	cfg.Etcd = etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}
	// Without the EtcdBackup's UID its snapshots could not be told from another's.
	incomplete := cfg
	incomplete.Series.UID = ""
	if _, err := agent.Backup(t.Context(), incomplete); err == nil {
		t.Fatal("a backup whose snapshots cannot be named its own succeeded")
	}
	servers[0].Stop()
	if _, err := agent.Backup(t.Context(), cfg); err == nil {
		t.Fatal("a backup of a stopped cluster succeeded")
	}
	if objects, _ := dest.List(t.Context(), "etcd/"); len(objects) != 0 {
		t.Fatalf("a failed backup left %+v", objects)
	}
}

// olderSnapshots writes three snapshots of the series an hour apart before t0, as earlier runs
// would have, and returns their URIs, oldest first.
func olderSnapshots(t *testing.T, dest *storage.Destination, series backupplan.Series) []string {
	t.Helper()
	var uris []string
	for h := 3; h > 0; h-- {
		key := backupplan.ObjectName(dest.Prefix(), series, t0.Add(-time.Duration(h)*time.Hour), int64(10-h))
		if err := dest.Upload(t.Context(), key, strings.NewReader("an earlier snapshot")); err != nil {
			t.Fatal(err)
		}
		uris = append(uris, dest.URI(key))
	}
	return uris
}

// snapshotURIs are the URIs of the series' objects in the destination but its watermark, in
// name (and so time) order.
func snapshotURIs(t *testing.T, dest *storage.Destination, series backupplan.Series) []string {
	t.Helper()
	objects, err := dest.List(t.Context(), series.Dir(dest.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, o := range objects {
		if path.Base(o.Key) == "watermark.json" {
			continue
		}
		uris = append(uris, dest.URI(o.Key))
	}
	slices.Sort(uris)
	return uris
}

// A run never deletes the snapshot status.lastBackup named when its Job was made, however far
// past maxCount and maxAge: status names it until the run is recorded, and for good if the
// run's report is lost. Here it is not even the newest before the run's own (a run whose
// report was lost wrote a newer one), and maxCount 1 and maxAge 1ns would leave only the new
// snapshot. Before, a run deleted it and status named a snapshot that did not exist.
func TestRetentionNeverDeletesTheSnapshotStatusNames(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	for name, dest := range bothDestinations(t) {
		t.Run(name, func(t *testing.T) {
			older := olderSnapshots(t, dest, nightly)
			named := older[1]
			res, err := agent.Backup(t.Context(), agent.BackupConfig{
				Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest,
				MaxCount: 1, MaxAge: time.Nanosecond, LastBackup: named, Now: func() time.Time { return t0 },
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{older[2], older[0]}; res.PruneError != "" || !slices.Equal(res.Pruned, want) {
				t.Fatalf("pruned %v (error %q), want the others, newest first: %v", res.Pruned, res.PruneError, want)
			}
			if got, want := snapshotURIs(t, dest, nightly), []string{named, res.URI}; !slices.Equal(got, want) {
				t.Fatalf("destination holds\n  %s\nwant the snapshot status names and the new one:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

// A run never deletes the snapshot it wrote, even where an earlier run's name sorts after it
// (its clock was ahead): status is about to name it.
func TestRetentionKeepsTheRunsOwnSnapshot(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	dest, err := storage.OpenDir(t.TempDir(), "pvc://backups/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dest.Close() })
	ahead := backupplan.ObjectName(dest.Prefix(), nightly, t0.Add(time.Hour), 1)
	if err := dest.Upload(t.Context(), ahead, strings.NewReader("a snapshot from a clock an hour ahead")); err != nil {
		t.Fatal(err)
	}
	res, err := agent.Backup(t.Context(), agent.BackupConfig{
		Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest,
		MaxCount: 1, LastBackup: dest.URI(ahead), Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshotURIs(t, dest, nightly); !slices.Contains(got, res.URI) {
		t.Fatalf("the run deleted its own snapshot %s (pruned %v); the destination holds %v", res.URI, res.Pruned, got)
	}
}

// A run that fails — its snapshot not taken, or not stored — deletes nothing, however much
// retention (maxCount 1, maxAge 1ns) would: the older snapshots are all there is, and status
// names one of them.
func TestFailedRunPrunesNothing(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	if _, err := servers[0].Client(t).Put(t.Context(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dest, err := storage.OpenDir(dir, "pvc://backups/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dest.Close() })
	older := olderSnapshots(t, dest, nightly)
	cfg := agent.BackupConfig{
		Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest,
		MaxCount: 1, MaxAge: time.Nanosecond, Now: func() time.Time { return t0 },
	}

	// The upload fails: a directory stands where the snapshot (revision 2) would be stored.
	blocked := backupplan.ObjectName(dest.Prefix(), nightly, t0, 2)
	if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(blocked), "blocker"), 0o700); err != nil {
		t.Fatal(err)
	}
	if res, err := agent.Backup(t.Context(), cfg); err == nil {
		t.Fatalf("a backup whose upload could not complete succeeded: %+v", res)
	}
	if got := snapshotURIs(t, dest, nightly); !slices.Equal(got, older) {
		t.Fatalf("after a failed upload the destination holds %v, want the older snapshots untouched: %v", got, older)
	}

	// No snapshot is taken: the cluster is down.
	servers[0].Stop()
	if _, err := agent.Backup(t.Context(), cfg); err == nil {
		t.Fatal("a backup of a stopped cluster succeeded")
	}
	if got := snapshotURIs(t, dest, nightly); !slices.Equal(got, older) {
		t.Fatalf("after a failed snapshot the destination holds %v, want the older snapshots untouched: %v", got, older)
	}
}

// A backup says how the destination was found to hold the snapshot: the S3 store's sha256
// checksums, or the file's size after the sync; and, when asked to read the snapshot back,
// that it did. Either way what is stored is the snapshot it reports. (Each check failing is
// internal/storage's TestStoreFailsAndDeletesWhatTheDestinationDoesNotHold.)
func TestABackupSaysHowItsSnapshotWasChecked(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	for name, dest := range bothDestinations(t) {
		for _, readBack := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/readBack=%t", name, readBack), func(t *testing.T) {
				res, err := agent.Backup(t.Context(), agent.BackupConfig{
					Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly,
					Destination: dest, Now: func() time.Time { return t0 }, ReadBack: readBack,
				})
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]storage.Check{"s3": storage.CheckStoreChecksum, "pvc": storage.CheckSizeAfterSync}[name]
				if readBack {
					want = storage.CheckReadBack
				}
				if res.Check != string(want) {
					t.Errorf("checked by %q, want %q", res.Check, want)
				}
				read, err := dest.Verify(t.Context(), strings.TrimPrefix(res.URI, dest.URI("")))
				if err != nil || read.SizeBytes != res.SizeBytes || read.SHA256 != res.SHA256 {
					t.Errorf("the destination holds %+v (%v); the backup reported %d bytes sha256 %s", read, err, res.SizeBytes, res.SHA256)
				}
			})
		}
	}
}

// A backup records whether etcd had authentication on when the snapshot was taken, as etcd
// answered: a restore of the snapshot brings it back on, and a restore into a new cluster
// without auth is refused for it. Asked of etcd, not of the spec, which can say otherwise (auth
// turned on with etcdctl, or not on yet while the operator waits for the cluster to be whole).
func TestABackupRecordsWhetherAuthenticationWasOn(t *testing.T) {
	_, _, plain := backUpCluster(t, 1, 3)
	if plain.AuthEnabled == nil || *plain.AuthEnabled {
		t.Errorf("a snapshot of a cluster without authentication: authEnabled %v, want false", plain.AuthEnabled)
	}
	_, authenticated := backUpAnAuthenticatedCluster(t)
	if authenticated.AuthEnabled == nil || !*authenticated.AuthEnabled {
		t.Errorf("a snapshot of a cluster with authentication on: authEnabled %v, want true", authenticated.AuthEnabled)
	}
}
