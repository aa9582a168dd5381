package agent_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// The copy kept of a survivor of quorum loss holds its whole data directory, file for file;
// what PreserveData reports is what the db holds; a real etcd forced to a new cluster on the
// copy serves every key. A retried Job copies nothing again, and an attempt that crashed
// leaves nothing behind that the next one keeps.
func TestPreservedDataIsAWholeDataDirectoryEtcdServes(t *testing.T) {
	servers := etcdtest.NewServers(t, 3)
	for _, s := range servers {
		// Raft snapshots (member/snap/*.snap) and WAL entries after them, as a member that has
		// run for a while has.
		s.ExtraArgs = []string{"--snapshot-count=20"}
		s.Start(t, "new", etcdtest.InitialCluster(servers...))
	}
	for _, s := range servers {
		s.WaitReady(t)
	}
	survivor := servers[0]
	kv := survivor.Client(t)
	want := map[string]string{}
	var lastRevision int64
	for i := range 50 {
		k, v := fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)
		resp, err := kv.Put(t.Context(), k, v)
		if err != nil {
			t.Fatal(err)
		}
		want[k], lastRevision = v, resp.Header.Revision
	}
	servers[1].Stop()
	servers[2].Stop()
	cl, err := etcd.New(etcd.Config{Endpoints: []string{survivor.ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	status, err := cl.Status(t.Context(), survivor.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	survivor.Terminate(t)
	if snaps, _ := filepath.Glob(filepath.Join(survivor.DataDir, "member", "snap", "*.snap")); len(snaps) == 0 {
		t.Fatal("the survivor took no raft snapshot: the test would not copy one")
	}

	claim := t.TempDir()
	member := survivor.Name
	leftover := filepath.Join(claim, member+".partial")
	if err := os.MkdirAll(filepath.Join(leftover, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(leftover, "member", "stale"), []byte("from a crashed attempt"), 0o600); err != nil {
		t.Fatal(err)
	}

	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	got, err := agent.PreserveData(member, survivor.DataDir, claim, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(claim, got.Path)
	files, size := sameFiles(t, survivor.DataDir, copied)
	wantResult := agent.PreservedData{
		Member: member, Path: member, Files: files, SizeBytes: size,
		DBSHA256:  fileSHA256(t, filepath.Join(survivor.DataDir, "member", "snap", "db")),
		RaftIndex: status.RaftAppliedIndex, Revision: lastRevision, CompletionTime: at,
	}
	if got != wantResult || got.RaftIndex == 0 {
		t.Errorf("preserved\n%+v, want\n%+v", got, wantResult)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the unfinished copy is still there: %v", err)
	}
	var marked agent.PreservedData
	if raw, err := os.ReadFile(filepath.Join(copied, agent.PreservedMarker)); err != nil {
		t.Error(err)
	} else if err := json.Unmarshal(raw, &marked); err != nil || marked != got {
		t.Errorf("marker %s: %+v, %v", raw, marked, err)
	}

	if back, err := agent.DecodeReport(string(agent.Report{Preserved: &got}.Encode())); err != nil || back.Preserved == nil || *back.Preserved != got {
		t.Errorf("the termination message gives back %+v, %v", back.Preserved, err)
	}

	// Retried, it copies nothing: it answers even from a data directory no longer there.
	again, err := agent.PreserveData(member, filepath.Join(t.TempDir(), "gone"), claim, func() time.Time { return at.Add(time.Hour) })
	if err != nil || again != got {
		t.Errorf("retried: %+v, %v; want the first result %+v", again, err, got)
	}

	restored := etcdtest.NewServer(t, member)
	restored.DataDir = copied
	restored.ExtraArgs = []string{"--force-new-cluster"}
	restored.Start(t, "existing", etcdtest.InitialCluster(restored))
	restored.WaitReady(t)
	resp, err := restored.Client(t).Get(t.Context(), "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]string{}
	for _, kv := range resp.Kvs {
		served[string(kv.Key)] = string(kv.Value)
	}
	if fmt.Sprint(served) != fmt.Sprint(want) || resp.Header.Revision != lastRevision {
		t.Errorf("etcd on the copy serves %d keys at revision %d, want %d at %d", len(served), resp.Header.Revision, len(want), lastRevision)
	}
}

// While etcd still runs on the data, the copy would be torn: the agent fails, and a retry once
// the member has stopped makes the copy.
func TestPreserveDataWaitsUntilTheMemberIsStopped(t *testing.T) {
	server := etcdtest.StartCluster(t, 1)[0]
	put, err := server.Client(t).Put(t.Context(), "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	claim := t.TempDir()
	_, err = agent.PreserveData(server.Name, server.DataDir, claim, time.Now)
	if err == nil || agent.IsPermanent(err) || !strings.Contains(err.Error(), "still runs") {
		t.Fatalf("preserved the data of a running etcd: %v (want an error a retry may clear)", err)
	}
	if entries, _ := os.ReadDir(claim); len(entries) != 0 {
		t.Errorf("the claim holds %v after a refused copy", entries)
	}
	server.Terminate(t)
	if got, err := agent.PreserveData(server.Name, server.DataDir, claim, time.Now); err != nil || got.Revision != put.Header.Revision {
		t.Errorf("preserved once etcd stopped: %+v, %v", got, err)
	}
}

// A claim that holds no etcd data, a member name that is not one, or a directory of the copy's
// name the agent did not finish: each fails the Job at once, and nothing is written.
func TestPreserveDataRefusesWhatIsNotEtcdDataForGood(t *testing.T) {
	noDB := t.TempDir()
	if err := os.MkdirAll(filepath.Join(noDB, "member", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	foreign := t.TempDir()
	if err := os.Mkdir(filepath.Join(foreign, "m"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		member, dataDir, claim, says string
	}{
		"no db":                {"m", noDB, t.TempDir(), filepath.Join(noDB, "member", "snap", "db")},
		"no data directory":    {"m", filepath.Join(noDB, "none"), t.TempDir(), "none/member/snap/db does not exist"},
		"empty member":         {"", noDB, t.TempDir(), `member ""`},
		"member with a slash":  {"a/b", noDB, t.TempDir(), `member "a/b"`},
		"parent":               {"..", noDB, t.TempDir(), `member ".."`},
		"unmarked copy exists": {"m", noDB, foreign, "is not a copy the agent finished"},
	} {
		t.Run(name, func(t *testing.T) {
			before, _ := os.ReadDir(tc.claim)
			_, err := agent.PreserveData(tc.member, tc.dataDir, tc.claim, time.Now)
			if err == nil || !agent.IsPermanent(err) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %v: want a permanent one saying %q", err, tc.says)
			}
			if after, _ := os.ReadDir(tc.claim); len(after) != len(before) {
				t.Errorf("the claim held %v, now %v", before, after)
			}
		})
	}
}

// sameFiles checks that copy holds every regular file of dir with the same content and no other
// but the marker, and returns how many there are and their size.
func sameFiles(t *testing.T, dir, copied string) (int, int64) {
	t.Helper()
	files, size := 0, int64(0)
	seen := map[string]bool{agent.PreservedMarker: true}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		seen[rel] = true
		want, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if got, err := os.ReadFile(filepath.Join(copied, rel)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: copied %d bytes of %d, %v", rel, len(got), len(want), err)
		}
		files, size = files+1, size+int64(len(want))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(copied, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if rel, _ := filepath.Rel(copied, path); !seen[rel] {
			t.Errorf("the copy holds %s, which the data directory does not", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 2 {
		t.Fatalf("%s holds %d files: not an etcd data directory", dir, files)
	}
	return files, size
}

func fileSHA256(t *testing.T, file string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}
