package agent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// verifyAsTheJobDoes goes through a verify Job's steps: fetch the object (checking its
// sha256), restore it with etcdutl into a scratch directory, start etcd on it alone on
// localhost and compare it with the record. It returns the fetch's error, or the comparison.
func verifyAsTheJobDoes(t *testing.T, dest *storage.Destination, res agent.BackupResult, keyspace *etcdv1alpha1.SnapshotKeyspace) (agent.VerifyResult, error) {
	t.Helper()
	restored, err := serveRestored(t, dest, res)
	if err != nil {
		return agent.VerifyResult{}, err
	}
	return agent.VerifyRestored(t.Context(), agent.VerifyConfig{
		Etcd: etcd.Config{Endpoints: []string{restored.ClientURL}}, Revision: res.Revision, Keyspace: keyspace, Ready: 20 * time.Second,
	})
}

// serveRestored fetches the backup's snapshot (checking its sha256), restores it with etcdutl
// into a scratch directory and starts etcd on it alone on localhost, as a verify Job does. It
// returns the fetch's error, or the member serving the restored snapshot.
func serveRestored(t *testing.T, dest *storage.Destination, res agent.BackupResult) (*etcdtest.Server, error) {
	t.Helper()
	key := strings.TrimPrefix(res.URI, dest.URI(dest.Prefix()))
	staging := filepath.Join(t.TempDir(), "verify")
	if _, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: key, SHA256: res.SHA256, Dir: staging}); err != nil {
		return nil, err
	}
	scratch := etcdtest.NewServer(t, "verify")
	restore := exec.Command(filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl"), "snapshot", "restore", filepath.Join(staging, "snapshot.db"),
		"--data-dir", scratch.DataDir, "--name", scratch.Name,
		"--initial-cluster", etcdtest.InitialCluster(scratch), "--initial-advertise-peer-urls", scratch.PeerURL)
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	scratch.Start(t, "new", etcdtest.InitialCluster(scratch))
	return scratch, nil
}

// A backup records the source's keyspace (HashKV, compact revision, key count) at the
// snapshot's revision, in its result and in the object's metadata; the snapshot restored and
// served alone shows exactly that keyspace.
func TestAGoodSnapshotVerifies(t *testing.T) {
	_, dest, res := backUpCluster(t, 1, 50)
	want := etcdv1alpha1.SnapshotKeyspace{Revision: 51, CompactRevision: -1, KeyCount: 50}
	if res.Keyspace == nil || res.Keyspace.HashKV == 0 {
		t.Fatalf("backup recorded keyspace %+v, want one with a hash", res.Keyspace)
	}
	if got := *res.Keyspace; got.Revision != want.Revision || got.KeyCount != want.KeyCount || got.CompactRevision > 1 {
		t.Fatalf("backup recorded keyspace %+v, want revision 51 with 50 keys and no compaction", got)
	}
	meta, err := dest.Metadata(t.Context(), strings.TrimPrefix(res.URI, dest.URI("")))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range agent.KeyspaceMetadata(res.Keyspace) {
		if meta[k] != v {
			t.Errorf("object metadata %s=%q, want %q (all: %v)", k, meta[k], v, meta)
		}
	}

	got, err := verifyAsTheJobDoes(t, dest, res, res.Keyspace)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mismatch != "" || !got.HashCompared || got.Revision != 51 || got.KeyCount != 50 {
		t.Fatalf("verification of a good snapshot: %+v", got)
	}
}

// An object changed in the bucket after upload fails the fetch's sha256 check, as a snapshot
// that cannot be restored; nothing is restored from it.
func TestASnapshotCorruptedAfterUploadFailsVerification(t *testing.T) {
	srv, dest, res := backUpCluster(t, 1, 50)
	file := filepath.Join(srv.Root, strings.TrimPrefix(res.URI, "s3://"))
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = verifyAsTheJobDoes(t, dest, res, res.Keyspace)
	if !agent.IsUnrestorable(err) || !strings.Contains(err.Error(), "not the recorded") {
		t.Fatalf("verification of a snapshot corrupted in the bucket: %v; want it unrestorable", err)
	}
}

// A snapshot that restores but does not hold what was recorded fails: a key count or a hash
// other than the record's is a mismatch.
func TestASnapshotOtherThanRecordedFailsVerification(t *testing.T) {
	_, dest, res := backUpCluster(t, 1, 20)
	for name, change := range map[string]func(*etcdv1alpha1.SnapshotKeyspace){
		"key count": func(k *etcdv1alpha1.SnapshotKeyspace) { k.KeyCount++ },
		"hash":      func(k *etcdv1alpha1.SnapshotKeyspace) { k.HashKV++ },
	} {
		t.Run(name, func(t *testing.T) {
			recorded := *res.Keyspace
			change(&recorded)
			got, err := verifyAsTheJobDoes(t, dest, res, &recorded)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(got.Mismatch, "recorded") {
				t.Fatalf("verification against a record the snapshot does not match: %+v", got)
			}
		})
	}
}
