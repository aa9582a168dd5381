package agent_test

import (
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/s3test"
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
	clientTLS, err := agent.VerifyClientTLS(restored.tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	return agent.VerifyRestored(t.Context(), agent.VerifyConfig{
		Etcd: etcd.Config{Endpoints: []string{restored.ClientURL}, TLS: clientTLS}, Revision: res.Revision, Keyspace: keyspace, Ready: 20 * time.Second,
	})
}

// restoredMember is etcd serving a restored snapshot as a verify Job's sidecar does; scratch
// is the pod's scratch directory, tlsDir the TLS material in it.
type restoredMember struct {
	*etcdtest.Server
	scratch, tlsDir string
}

// serveRestored fetches the backup's snapshot (checking its sha256), restores it with etcdutl
// into a scratch directory and starts etcd on it alone on localhost, as a verify Job does:
// over TLS from the material the Job's fetch makes, requiring a client certificate. It returns
// the fetch's error, or the member serving the restored snapshot.
func serveRestored(t *testing.T, dest *storage.Destination, res agent.BackupResult) (*restoredMember, error) {
	t.Helper()
	key := strings.TrimPrefix(res.URI, dest.URI(dest.Prefix()))
	staging := filepath.Join(t.TempDir(), "verify")
	if _, err := agent.Fetch(t.Context(), agent.FetchConfig{Source: dest, Key: key, SHA256: res.SHA256, Dir: staging}); err != nil {
		return nil, err
	}
	scratch := t.TempDir()
	tlsDir := filepath.Join(scratch, jobspec.VerifyTLSSubdir)
	if err := agent.WriteVerifyTLS(tlsDir, time.Now()); err != nil {
		t.Fatal(err)
	}
	member := etcdtest.NewServer(t, "verify")
	member.ClientURL = strings.Replace(member.ClientURL, "http://", "https://", 1)
	member.ExtraArgs = jobspec.VerifyEtcdTLSArgs(tlsDir)
	restore := exec.Command(filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl"), "snapshot", "restore", filepath.Join(staging, "snapshot.db"),
		"--data-dir", member.DataDir, "--name", member.Name,
		"--initial-cluster", etcdtest.InitialCluster(member), "--initial-advertise-peer-urls", member.PeerURL)
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	member.Start(t, "new", etcdtest.InitialCluster(member))
	return &restoredMember{Server: member, scratch: scratch, tlsDir: tlsDir}, nil
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

// A snapshot of a cluster with authentication enabled carries its users and roles: the member
// restored from it refuses a client with no user ("user name is empty"). It verifies all the
// same, root's password since changed: nothing of the password of then is needed.
func TestASnapshotOfAnAuthenticatedClusterVerifies(t *testing.T) {
	dest, res := backUpAnAuthenticatedCluster(t)
	got, err := verifyAsTheJobDoes(t, dest, res, res.Keyspace)
	if err != nil {
		t.Fatalf("verification of an authenticated cluster's snapshot: %v", err)
	}
	if got.Mismatch != "" || !got.HashCompared || got.KeyCount != 20 {
		t.Fatalf("verification of an authenticated cluster's snapshot: %+v", got)
	}
}

// A restored member that refuses the verifier's user refuses it for good: the verification
// ends at once, as one that could not be made (permanent, the snapshot not at fault), rather
// than holding its Job for the whole wait.
func TestAVerifierRefusedIsNotKeptWaiting(t *testing.T) {
	dest, res := backUpAnAuthenticatedCluster(t)
	restored, err := serveRestored(t, dest, res)
	if err != nil {
		t.Fatal(err)
	}
	// A certificate of the pod's CA whose name is no user of the snapshot's: the member's own.
	clientTLS, err := agent.VerifyClientTLS(restored.tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	other, err := tls.LoadX509KeyPair(filepath.Join(restored.tlsDir, jobspec.VerifyServerCertFile), filepath.Join(restored.tlsDir, jobspec.VerifyServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	clientTLS.Certificates = []tls.Certificate{other}
	start := time.Now()
	_, err = agent.VerifyRestored(t.Context(), agent.VerifyConfig{
		Etcd: etcd.Config{Endpoints: []string{restored.ClientURL}, TLS: clientTLS}, Revision: res.Revision, Keyspace: res.Keyspace, Ready: 2 * time.Minute,
	})
	if err == nil || !agent.IsPermanent(err) || agent.IsUnrestorable(err) || !strings.Contains(err.Error(), "refused the verifier") {
		t.Fatalf("verification as a user the snapshot does not have: %v; want a permanent refusal, the snapshot not at fault", err)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Errorf("the refusal took %s: the verifier waited on a refusal that does not change", waited)
	}
}

// backUpAnAuthenticatedCluster backs up a one-member cluster with authentication enabled and 20
// keys, as root with the password "then", which is changed after the backup.
func backUpAnAuthenticatedCluster(t *testing.T) (*storage.Destination, agent.BackupResult) {
	t.Helper()
	servers := etcdtest.StartCluster(t, 1)
	admin, err := etcd.New(etcd.Config{Endpoints: etcdtest.ClientURLs(servers)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.SetRootPassword(t.Context(), "then"); err != nil {
		t.Fatal(err)
	}
	if err := admin.EnableAuth(t.Context()); err != nil {
		t.Fatal(err)
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: etcdtest.ClientURLs(servers), Username: "root", Password: "then", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for i := range 20 {
		if _, err := root.Put(t.Context(), fmt.Sprintf("k%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	srv := s3test.Start(t)
	dest := destination(t, srv, srv.Bucket(t, "backups"))
	res, err := agent.Backup(t.Context(), agent.BackupConfig{
		Etcd:   etcd.Config{Endpoints: etcdtest.ClientURLs(servers), Username: "root", Password: "then"},
		Series: nightly, Destination: dest, Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserChangePassword(t.Context(), "root", "now"); err != nil {
		t.Fatal(err)
	}
	return dest, res
}
