package agent_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/s3test"
)

// A snapshot of a real cluster, fetched back from a real S3 server, restores with etcdutl
// into a data directory that Install puts in place, and holds the revision Fetch reports.
func TestFetchRestoreInstall(t *testing.T) {
	_, dest, backup := backUpCluster(t, 1, 50)
	key := strings.TrimPrefix(backup.URI, "s3://backups/etcd/")

	member := t.TempDir()
	staging := filepath.Join(member, "restore")
	// What a failed earlier attempt may have left is cleared first.
	if err := os.MkdirAll(filepath.Join(staging, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	res, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: key, SHA256: backup.SHA256, Dir: staging})
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision != 51 || res.SHA256 != backup.SHA256 || res.SizeBytes != backup.SizeBytes || res.URI != backup.URI {
		t.Fatalf("fetched %+v, backed up %+v", res, backup)
	}

	etcdutl := filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl")
	out, err := exec.Command(etcdutl, "snapshot", "restore", filepath.Join(staging, "snapshot.db"),
		"--data-dir", filepath.Join(staging, "data"), "--name", "m", "--initial-cluster", "m=http://127.0.0.1:1",
		"--initial-advertise-peer-urls", "http://127.0.0.1:1").CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl: %v\n%s", err, out)
	}
	dataDir := filepath.Join(member, "data")
	if err := agent.Install(filepath.Join(staging, "data"), dataDir, staging); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "member", "snap", "db")); err != nil {
		t.Errorf("restored data not in place: %v", err)
	}
	if _, err := os.Stat(staging); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("staging directory left behind: %v", err)
	}

	// Run again over live data, Install refuses and leaves it alone.
	if err := os.MkdirAll(filepath.Join(staging, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := agent.Install(filepath.Join(staging, "data"), dataDir, staging); err == nil || !strings.Contains(err.Error(), "never replaces") {
		t.Errorf("Install over existing data: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "member", "snap", "db")); err != nil {
		t.Errorf("live data touched: %v", err)
	}
}

// A volume with too little room for what etcdutl writes beside the staged snapshot fails the
// fetch for good, naming the size needed, and leaves nothing staged: etcdutl would otherwise run
// out of space part-way, and every retry would meet the same volume. Seen failing before the
// check (the fetch succeeded).
func TestFetchRefusesAVolumeWithoutRoomToRestore(t *testing.T) {
	_, dest, backup := backUpCluster(t, 1, 50)
	key := strings.TrimPrefix(backup.URI, "s3://backups/etcd/")
	needs := jobspec.RestoreNeedsBytes(backup.SizeBytes)

	agent.UseFreeBytes(t, needs-backup.SizeBytes-1)
	staging := filepath.Join(t.TempDir(), "restore")
	_, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: key, SHA256: backup.SHA256, Dir: staging})
	if err == nil || !agent.IsPermanent(err) || !strings.Contains(err.Error(), fmt.Sprintf("%d in all", needs)) {
		t.Fatalf("fetch onto a volume without room: %v; want a permanent error naming %d bytes", err, needs)
	}
	if entries, _ := os.ReadDir(staging); len(entries) != 0 {
		t.Errorf("left staged: %v", entries)
	}

	agent.UseFreeBytes(t, needs-backup.SizeBytes)
	if _, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: key, SHA256: backup.SHA256, Dir: staging}); err != nil {
		t.Fatalf("fetch onto a volume with just enough room: %v", err)
	}
}

// Restores find snapshots by the key after the destination's prefix, whatever its format: those
// of the current format (in subdirectories, for a claim) and those written under the earlier
// one, in both destinations.
func TestFetchFindsSnapshotsOfBothKeyFormats(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	if _, err := servers[0].Client(t).Put(t.Context(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	for name, dest := range bothDestinations(t) {
		t.Run(name, func(t *testing.T) {
			res, err := agent.Backup(t.Context(), agent.BackupConfig{
				Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest,
				Now: func() time.Time { return t0 },
			})
			if err != nil {
				t.Fatal(err)
			}
			current := strings.TrimPrefix(res.URI, dest.URI(dest.Prefix()))
			earlier := "main-20260228T120000Z-r1.db"
			r, err := dest.Open(t.Context(), dest.Prefix()+current)
			if err != nil {
				t.Fatal(err)
			}
			err = dest.Upload(t.Context(), dest.Prefix()+earlier, r)
			_ = r.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{current, earlier} {
				got, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: key, SHA256: res.SHA256, Dir: filepath.Join(t.TempDir(), "restore")})
				if err != nil {
					t.Fatalf("fetch %s: %v", key, err)
				}
				if got.URI != dest.URI(dest.Prefix()+key) || got.Revision != res.Revision {
					t.Errorf("fetched %+v from %s, backed up %+v", got, key, res)
				}
			}
		})
	}
}

// A snapshot whose digest is not the recorded one, or that is not a snapshot at all, is
// refused and not left on disk.
func TestFetchRefusesCorruptSnapshots(t *testing.T) {
	srv := s3test.Start(t)
	dest := destination(t, srv, srv.Bucket(t, "backups"))
	if err := dest.Upload(t.Context(), "etcd/junk.db", strings.NewReader("not a bolt database")); err != nil {
		t.Fatal(err)
	}
	for name, sha := range map[string]string{"checksum": strings.Repeat("0", 64), "format": ""} {
		t.Run(name, func(t *testing.T) {
			staging := filepath.Join(t.TempDir(), "restore")
			_, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: "junk.db", SHA256: sha, Dir: staging})
			if err == nil {
				t.Fatal("a corrupt snapshot was accepted")
			}
			if _, statErr := os.Stat(filepath.Join(staging, "snapshot.db")); !errors.Is(statErr, fs.ErrNotExist) {
				t.Errorf("corrupt snapshot left in staging: %v", statErr)
			}
		})
	}
}

// Whatever the result, the report fits in a termination message.
func TestReportFitsATerminationMessage(t *testing.T) {
	var pruned []string
	for i := range 200 {
		pruned = append(pruned, fmt.Sprintf("s3://bucket/a/long/prefix/cluster-20260101T0000%02dZ-r%d.db", i%60, i))
	}
	r := agent.Report{Backup: &agent.BackupResult{URI: "s3://b/k", Pruned: pruned}}
	msg := r.Encode()
	if len(msg) > 4096 {
		t.Fatalf("report of %d bytes", len(msg))
	}
	back, err := agent.DecodeReport(string(msg))
	if err != nil || back.Backup.URI != "s3://b/k" {
		t.Fatalf("decoded %+v, %v", back.Backup, err)
	}
	// The newest pruned are listed, as many as fit: those the EtcdBackup's status may name.
	if listed := back.Backup.Pruned; len(listed) == 0 || !slices.Equal(listed, pruned[:len(listed)]) || len(listed)+back.Backup.PrunedCount != 200 {
		t.Errorf("the report lists %d pruned snapshots and counts %d more, want the newest that fit and the rest counted, 200 in all", len(listed), back.Backup.PrunedCount)
	}
	if len(msg) < 4096-200 {
		t.Errorf("a report of %d bytes lists fewer pruned snapshots than fit", len(msg))
	}
	long := agent.Report{Error: strings.Repeat("x", 10000)}
	if len(long.Encode()) > 4096 {
		t.Errorf("a long error is not cut")
	}
}

// Fetch falls back, should the snapshot asked for no longer exist, to the first of the older
// ones given that does, and says which it fetched and which was missing; one that exists but
// does not match its record is not passed over; with none left it fails for good, naming them
// all. Before, a snapshot deleted since its record failed the restore.
func TestFetchFallsBackToTheNewestOlderSnapshotThatExists(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	for name, dest := range bothDestinations(t) {
		t.Run(name, func(t *testing.T) {
			var taken []agent.BackupResult // oldest first
			for h := range 2 {
				if _, err := servers[0].Client(t).Put(t.Context(), "k", fmt.Sprint(h)); err != nil {
					t.Fatal(err)
				}
				now := t0.Add(time.Duration(h) * time.Hour)
				res, err := agent.Backup(t.Context(), agent.BackupConfig{
					Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(servers)}, Series: nightly, Destination: dest,
					Now: func() time.Time { return now },
				})
				if err != nil {
					t.Fatal(err)
				}
				taken = append(taken, res)
			}
			key := func(uri string) string { return strings.TrimPrefix(uri, dest.URI(dest.Prefix())) }
			gone := jobspec.Snapshot{Key: key(dest.URI(backupplan.ObjectName(dest.Prefix(), nightly, t0.Add(2*time.Hour), 99))), SHA256: strings.Repeat("9", 64)}
			fallbacks := []jobspec.Snapshot{{Key: key(taken[1].URI), SHA256: taken[1].SHA256}, {Key: key(taken[0].URI), SHA256: taken[0].SHA256}}

			got, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: gone.Key, SHA256: gone.SHA256, Fallbacks: fallbacks, Dir: filepath.Join(t.TempDir(), "restore")})
			if err != nil {
				t.Fatalf("fetch with fallbacks: %v", err)
			}
			if got.URI != taken[1].URI || got.Revision != taken[1].Revision || got.SHA256 != taken[1].SHA256 || got.Missing != dest.URI(dest.Prefix()+gone.Key) {
				t.Fatalf("fetched %+v, want the newest snapshot that exists, %+v, and the missing one named", got, taken[1])
			}

			// One that is there but does not match its record fails the fetch: it is not passed
			// over for older data.
			_, err = agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: key(taken[1].URI), SHA256: strings.Repeat("0", 64), Fallbacks: fallbacks[1:], Dir: filepath.Join(t.TempDir(), "restore")})
			if err == nil || !strings.Contains(err.Error(), "not the recorded") {
				t.Fatalf("fetch of a snapshot that does not match its record: %v, want that error, not a fallback", err)
			}

			_, err = agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: gone.Key, SHA256: gone.SHA256, Fallbacks: []jobspec.Snapshot{gone}, Dir: filepath.Join(t.TempDir(), "restore")})
			if err == nil || !agent.IsPermanent(err) || !strings.Contains(err.Error(), gone.Key) {
				t.Fatalf("fetch of snapshots none of which exists: %v, want a permanent error naming them", err)
			}
		})
	}
}

// Only a snapshot that is not there is passed over for an older one. A source that does not
// answer (the store down, the network cut) fails the fetch, which is tried again: a restore
// never settles for older data, nor fails for good, because the store did not answer.
func TestFetchDoesNotTakeAStoreThatDoesNotAnswerForASnapshotThatIsGone(t *testing.T) {
	srv, dest, backup := backUpCluster(t, 1, 5)
	key := strings.TrimPrefix(backup.URI, "s3://backups/etcd/")
	srv.Stop()

	_, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: key, SHA256: backup.SHA256,
		Fallbacks: []jobspec.Snapshot{{Key: key, SHA256: backup.SHA256}}, Dir: filepath.Join(t.TempDir(), "restore")})
	if err == nil || agent.IsPermanent(err) || strings.Contains(err.Error(), "exist") {
		t.Fatalf("fetch from a store that does not answer: %v; want an error to try again on, not one that the snapshots are gone", err)
	}
	t.Logf("fetch from a store that does not answer: %v", err)
}
