package agent_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// The reach of a member's log, read from its WAL, is the raft index it reported while it
// served, on real etcd: across a WAL cut (the checksum chained from file to file), for the
// member that saw every write, one killed before the last of them, and one killed long before.
// Of members that cannot answer, the one to recover from is thus found as for those that can.
func TestReadLogIsTheRaftIndexTheMemberReported(t *testing.T) {
	servers := etcdtest.NewServers(t, 3)
	for _, s := range servers {
		s.Start(t, "new", etcdtest.InitialCluster(servers...))
	}
	for _, s := range servers {
		s.WaitReady(t)
	}
	kv := servers[0].Client(t)
	put := func(n, size int) {
		t.Helper()
		value := strings.Repeat("v", size)
		for range n {
			// A 1 MiB entry fsynced by two members sharing the machine's two cores with the
			// other packages' tests can outlast etcd's request timeout (seen in make test:
			// "etcdserver: request timed out"). Tried again: a put more only takes the
			// members that saw it further, which is what the test compares.
			var err error
			for attempt := 0; attempt < 5; attempt++ {
				_, err = kv.Put(t.Context(), "k", value)
				if !timedOut(err) {
					break
				}
				t.Logf("put timed out, trying again: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	put(10, 10)
	servers[2].Stop() // killed: misses everything after
	// Past the WAL's 64 MiB segment, so that the survivors' WALs are cut into a second file.
	put(70, 1<<20)
	servers[1].Stop() // killed; servers[0] is left without a quorum, its log as it is
	cl, err := etcd.New(etcd.Config{Endpoints: []string{servers[0].ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	status, err := cl.Status(t.Context(), servers[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	servers[0].Terminate(t)

	logs := make([]agent.LogState, len(servers))
	for i, s := range servers {
		if logs[i], err = agent.ReadLog(s.Name, s.DataDir); err != nil {
			t.Fatalf("member %s: %v", s.Name, err)
		}
		if logs[i].Member != s.Name || logs[i].Torn || logs[i].Term == 0 {
			t.Errorf("member %s: %+v", s.Name, logs[i])
		}
	}
	if logs[0].CommitIndex != status.RaftIndex {
		t.Errorf("the WAL of %s reaches %d; the member reported raft index %d", servers[0].Name, logs[0].CommitIndex, status.RaftIndex)
	}
	if logs[0].WALFiles < 2 {
		t.Errorf("the WAL of %s has %d file(s): the test meant to read across a cut", servers[0].Name, logs[0].WALFiles)
	}
	// A follower learns that the last write committed from the leader's next message: the
	// leader stopped right after it was acknowledged, or a follower stopped then, may have
	// recorded one write fewer as committed than the other of the two that saw them all (seen in
	// make test: 88, 87, 18).
	if logs[2].CommitIndex+69 > min(logs[0].CommitIndex, logs[1].CommitIndex) || logs[1].CommitIndex > logs[0].CommitIndex+1 {
		t.Errorf("commit indexes %d, %d, %d: want the two that saw every write within one of each other, the one killed before the 70 writes at least 69 behind both",
			logs[0].CommitIndex, logs[1].CommitIndex, logs[2].CommitIndex)
	}
	if back, err := agent.DecodeReport(string(agent.Report{Log: &logs[0]}.Encode())); err != nil || back.Log == nil || *back.Log != logs[0] {
		t.Errorf("the termination message gives back %+v, %v", back.Log, err)
	}
}

// timedOut says whether etcd gave up waiting for a write to be applied: the write may or may
// not be in the log.
func timedOut(err error) bool {
	err = rpctypes.Error(err)
	return errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost)
}

// A member killed mid-write leaves a record cut short, or one whose checksum fails, at the end
// of its WAL: the reader stops there, says so, and reports what the WAL held before it.
func TestReadLogStopsAtATornRecord(t *testing.T) {
	s := etcdtest.NewServer(t, "m0")
	s.Start(t, "new", etcdtest.InitialCluster(s))
	s.WaitReady(t)
	for range 20 {
		if _, err := s.Client(t).Put(t.Context(), "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	s.Terminate(t)
	whole, err := agent.ReadLog(s.Name, s.DataDir)
	if err != nil || whole.Torn {
		t.Fatalf("%+v, %v", whole, err)
	}

	for name, damage := range map[string]func(data []byte, end int) []byte{
		"cut short":      func(data []byte, end int) []byte { return data[:end-3] },
		"checksum fails": func(data []byte, end int) []byte { data[end-2] ^= 0xff; return data },
	} {
		t.Run(name, func(t *testing.T) {
			dataDir := t.TempDir()
			walDir := filepath.Join(dataDir, "member", "wal")
			if err := os.MkdirAll(walDir, 0o700); err != nil {
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(s.DataDir, "member", "wal", "*.wal"))
			if len(files) != 1 {
				t.Fatalf("WAL files %v, want one", files)
			}
			data, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			// The records end where the zeros of the preallocated tail begin.
			end := len(bytes.TrimRight(data, "\x00"))
			if err := os.WriteFile(filepath.Join(walDir, filepath.Base(files[0])), damage(data, end), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := agent.ReadLog(s.Name, dataDir)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Torn || got.CommitIndex == 0 || got.CommitIndex > whole.CommitIndex {
				t.Errorf("read %+v from the damaged WAL; the whole one reaches %d", got, whole.CommitIndex)
			}
		})
	}
}

// A claim without etcd data is a permanent failure, not something a retry mends.
func TestReadLogRefusesAClaimWithoutEtcdData(t *testing.T) {
	_, err := agent.ReadLog("m0", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "holds no etcd data") {
		t.Errorf("got %v", err)
	}
}
