package archive_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// source is a real etcd with a workload written into it: a snapshot taken at base, then
// puts, deletes, multi-key txns, leased keys and a lease revoked, up to last.
type source struct {
	server     *etcdtest.Server
	cl         *clientv3.Client
	snapshot   string
	base, last int64
	// burst are the revisions of a run of multi-key txns.
	burst    []int64
	leaseTTL map[int64]int64
}

func newSource(t *testing.T) *source {
	t.Helper()
	s := &source{server: etcdtest.StartCluster(t, 1)[0], leaseTTL: map[int64]int64{}}
	s.cl = s.server.Client(t)
	ctx := t.Context()
	l1 := s.grant(t, 600)
	s.do(t, clientv3.OpPut("a", "1"), clientv3.OpPut("b", "1"))
	s.do(t, clientv3.OpPut("l1/x", "leased", clientv3.WithLease(clientv3.LeaseID(l1))))
	s.do(t, clientv3.OpPut("c", "1"), clientv3.OpPut("d", "1"), clientv3.OpDelete("a"))
	s.snapshot, s.base = s.takeSnapshot(t)

	s.do(t, clientv3.OpPut("a", "2")) // made again: a new create revision, version 1
	l2 := s.grant(t, 300)
	s.do(t, clientv3.OpPut("l2/y", "leased", clientv3.WithLease(clientv3.LeaseID(l2))), clientv3.OpPut("l2/z", "leased", clientv3.WithLease(clientv3.LeaseID(l2))))
	for i := range 5 {
		rev := s.do(t, clientv3.OpPut(fmt.Sprintf("k/%d/0", i), "v"), clientv3.OpPut(fmt.Sprintf("k/%d/1", i), "v"),
			clientv3.OpPut("c", fmt.Sprint(i)), clientv3.OpDelete(fmt.Sprintf("k/%d/0", i-1)))
		s.burst = append(s.burst, rev)
	}
	s.do(t, clientv3.OpDelete("k/", clientv3.WithPrefix()))           // many keys deleted in one revision
	if _, err := s.cl.Revoke(ctx, clientv3.LeaseID(l1)); err != nil { // its key deleted in a revision of its own
		t.Fatal(err)
	}
	s.do(t, clientv3.OpPut("l2/y", "again", clientv3.WithIgnoreLease()))
	s.last = s.do(t, clientv3.OpDelete("b"), clientv3.OpPut("d", "2"))
	return s
}

func (s *source) grant(t *testing.T, ttl int64) int64 {
	t.Helper()
	l, err := s.cl.Grant(t.Context(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	s.leaseTTL[int64(l.ID)] = ttl
	return int64(l.ID)
}

// do commits ops as one txn and returns its revision.
func (s *source) do(t *testing.T, ops ...clientv3.Op) int64 {
	t.Helper()
	resp, err := s.cl.Txn(t.Context()).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// takeSnapshot saves a snapshot of the source as a backup does, and returns its file and revision.
func (s *source) takeSnapshot(t *testing.T) (string, int64) {
	t.Helper()
	c, err := etcd.New(etcd.Config{Endpoints: []string{s.server.ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	file := filepath.Join(t.TempDir(), "base.db")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := c.Snapshot(t.Context(), s.server.ClientURL, f)
	if err != nil {
		t.Fatal(err)
	}
	return file, info.Revision
}

// archiveOf encodes revs into segments of three revisions each, as an archiver writes them.
func archiveOf(t *testing.T, revs []etcd.Revision, leaseTTL map[int64]int64) ([]archive.SegmentInfo, map[string][]byte) {
	t.Helper()
	var infos []archive.SegmentInfo
	stored := map[string][]byte{}
	for chunk := range slices.Chunk(revs, 3) {
		seg := archive.Segment{LeaseTTL: map[int64]int64{}}
		seen := time.Now()
		for _, r := range chunk {
			seg.Records = append(seg.Records, archive.Record{Revision: r, Seen: seen})
			for _, e := range r.Events {
				if e.Lease != 0 {
					seg.LeaseTTL[e.Lease] = leaseTTL[e.Lease]
				}
			}
		}
		var buf bytes.Buffer
		if err := archive.Encode(&buf, seg); err != nil {
			t.Fatal(err)
		}
		first, last := chunk[0].Revision, chunk[len(chunk)-1].Revision
		info := archive.SegmentInfo{Key: archive.SegmentKey("series/", "lineage", first, last), Lineage: "lineage", First: first, Last: last, FirstSeen: seen, LastSeen: seen}
		infos = append(infos, info)
		stored[info.Key] = buf.Bytes()
	}
	return infos, stored
}

// scratch restores the snapshot with etcdutl and serves it, as a point-in-time Job's member.
func scratch(t *testing.T, snapshot string) *etcdtest.Server {
	t.Helper()
	member := etcdtest.NewServer(t, "scratch")
	restore := exec.Command(filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl"), "snapshot", "restore", snapshot,
		"--data-dir", member.DataDir, "--name", member.Name,
		"--initial-cluster", etcdtest.InitialCluster(member), "--initial-advertise-peer-urls", member.PeerURL)
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	member.Start(t, "new", etcdtest.InitialCluster(member))
	member.WaitReady(t)
	return member
}

// keyValue is what a range read says of a key.
type keyValue struct {
	Key, Value                           string
	CreateRevision, ModRevision, Version int64
	Lease                                int64
}

func rangeRead(t *testing.T, cl *clientv3.Client, opts ...clientv3.OpOption) []keyValue {
	t.Helper()
	resp, err := cl.Get(t.Context(), "\x00", append([]clientv3.OpOption{clientv3.WithFromKey()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]keyValue, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = keyValue{string(kv.Key), string(kv.Value), kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease}
	}
	return out
}

// A snapshot restored and replayed to a target holds exactly what the source held at that
// revision: every key with its value, create and mod revisions, version and lease, the
// leases granted, and the revision itself; wherever the target is, a txn's middle included.
func TestReplayMaterializesTheSourceAtTheTarget(t *testing.T) {
	src := newSource(t)
	revs := etcdtest.Revisions(t, src.cl, src.base, src.last)
	segs, stored := archiveOf(t, revs, src.leaseTTL)
	open := func(s archive.SegmentInfo) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(stored[s.Key])), nil
	}
	bases := []archive.Base{{Key: "base.db", Revision: src.base, Time: time.Now().Add(-time.Hour)}}
	lineages := map[string]archive.Lineage{"lineage": {Base: src.base, BaseKey: "base.db", Started: time.Now().Add(-time.Hour)}}
	for _, target := range []int64{src.base, src.base + 1, src.burst[2], src.last} {
		t.Run(fmt.Sprint(target), func(t *testing.T) {
			plan, err := archive.PlanTo(bases, segs, lineages, target)
			if err != nil {
				t.Fatal(err)
			}
			member := scratch(t, src.snapshot)
			r, err := etcd.NewReplayer(etcd.Config{Endpoints: []string{member.ClientURL}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := archive.Replay(t.Context(), r, open, plan); err != nil {
				t.Fatal(err)
			}
			got := member.Client(t)
			want, have := rangeRead(t, src.cl, clientv3.WithRev(target)), rangeRead(t, got)
			if !slices.Equal(have, want) {
				t.Errorf("replayed to %d:\n%v\nthe source at %d:\n%v", target, have, target, want)
			}
			resp, err := got.Get(t.Context(), "a")
			if err != nil {
				t.Fatal(err)
			}
			if resp.Header.Revision != target {
				t.Errorf("the scratch etcd is at revision %d, want %d", resp.Header.Revision, target)
			}
			for _, kv := range have {
				if kv.Lease == 0 {
					continue
				}
				ttl, err := got.TimeToLive(t.Context(), clientv3.LeaseID(kv.Lease))
				if err != nil || ttl.TTL <= 0 {
					t.Errorf("key %s's lease %x is not held in the scratch etcd: %+v, %v", kv.Key, kv.Lease, ttl, err)
				}
			}
		})
	}
}

// A base that restored to another revision than planned is refused before anything is
// written: every revision replayed on it would be shifted.
func TestReplayRefusesABaseAtAnotherRevision(t *testing.T) {
	src := newSource(t)
	member := scratch(t, src.snapshot)
	r, err := etcd.NewReplayer(etcd.Config{Endpoints: []string{member.ClientURL}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Planned to the revision it was planned from: nothing to replay, and the snapshot saved
	// would be labelled with a revision it is not at.
	plan := archive.Plan{Base: archive.Base{Key: "base.db", Revision: src.base - 1}, Lineage: "lineage", Revision: src.base - 1}
	err = archive.Replay(t.Context(), r, nil, plan)
	if !errors.Is(err, archive.ErrUnreplayable) || !strings.Contains(err.Error(), fmt.Sprintf("restored to revision %d", src.base)) {
		t.Fatalf("replay on a base at %d planned from %d: %v, want it refused", src.base, src.base-1, err)
	}
	if rev, err := r.Revision(t.Context()); err != nil || rev != src.base {
		t.Errorf("the scratch etcd is at %d (%v), want the base's %d untouched", rev, err, src.base)
	}
}
