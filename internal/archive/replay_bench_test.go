package archive_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// The replay benchmark's workload: replayBenchRevisions revisions, each of them one write by a
// cluster of Kubernetes objects' kind, of replayBenchValueSize values. Per ten revisions: six
// single puts (three of a new key, three overwriting a live one), one txn of three puts and a
// delete, one delete of a live key, and two puts of a new key under one of replayBenchLeases
// leases (as events are, under their TTL's lease).
const (
	replayBenchRevisions    = 20000
	replayBenchValueSize    = 1024
	replayBenchLeases       = 8
	replayBenchLeaseTTL     = 3600
	replayBenchSegmentBytes = 16 << 20 // the archiver's default segment size
)

// benchWrite is one write of the workload, one revision at the source: a single put or delete
// when it holds one op, a txn otherwise.
type benchWrite []benchOp

// benchOp is a put, or a delete when value is nil; lease is the workload's lease (1 to
// replayBenchLeases) the put is under, 0 for none.
type benchOp struct {
	key   string
	value []byte
	lease int
}

// replayWorkload is the workload, the same at every call: its keys from a fixed seed, half its
// values random (incompressible, as encrypted or binary values are) and half text-like (as
// Kubernetes objects are).
func replayWorkload() []benchWrite {
	rng := mathrand.New(mathrand.NewPCG(1, 2))
	random := make([]byte, 8<<20)
	_, _ = rand.Read(random)
	text := bytes.Repeat([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","namespace":"default"}}`), replayBenchValueSize/64)
	values := 0
	value := func() []byte {
		values++
		if values%2 == 0 {
			off := rng.IntN(len(random) - replayBenchValueSize)
			return random[off : off+replayBenchValueSize]
		}
		off := values % 64
		return text[off : off+replayBenchValueSize]
	}
	var live []string
	created := 0
	newKey := func(kind string) string {
		created++
		return fmt.Sprintf("/registry/%s/ns-%02d/object-%07d", kind, created%50, created)
	}
	// takeLive removes a live key and returns it; pickLive returns one, other than not.
	takeLive := func() string {
		i := rng.IntN(len(live))
		key := live[i]
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
		return key
	}
	pickLive := func(not string) string {
		for {
			if key := live[rng.IntN(len(live))]; key != not {
				return key
			}
		}
	}
	writes := make([]benchWrite, 0, replayBenchRevisions)
	for i := range replayBenchRevisions {
		var w benchWrite
		switch kind := i % 10; {
		case len(live) < 2 || kind == 0 || kind == 2 || kind == 4:
			key := newKey("configmaps")
			live = append(live, key)
			w = benchWrite{{key: key, value: value()}}
		case kind == 1 || kind == 3 || kind == 5:
			w = benchWrite{{key: pickLive(""), value: value()}}
		case kind == 6:
			gone := takeLive()
			overwritten := pickLive(gone)
			a, b := newKey("secrets"), newKey("secrets")
			live = append(live, a, b)
			w = benchWrite{{key: a, value: value()}, {key: b, value: value()}, {key: overwritten, value: value()}, {key: gone}}
		case kind == 7:
			w = benchWrite{{key: takeLive()}}
		default:
			w = benchWrite{{key: newKey("events"), value: value(), lease: 1 + (i/10)%replayBenchLeases}}
		}
		writes = append(writes, w)
	}
	return writes
}

// writeBytes is the workload's keys' and values' bytes.
func writeBytes(writes []benchWrite) int64 {
	var n int64
	for _, w := range writes {
		for _, op := range w {
			n += int64(len(op.key) + len(op.value))
		}
	}
	return n
}

// writePlainly issues the workload into a fresh etcd as an application would, through one
// client, one call per write (Put, Delete, or Txn for several ops), its leases granted first;
// it returns the last revision and the leases' TTLs by ID.
func writePlainly(ctx context.Context, c *clientv3.Client, writes []benchWrite) (int64, map[int64]int64, error) {
	leases := make([]clientv3.LeaseID, replayBenchLeases+1)
	ttl := map[int64]int64{}
	for i := 1; i <= replayBenchLeases; i++ {
		l, err := c.Grant(ctx, replayBenchLeaseTTL)
		if err != nil {
			return 0, nil, err
		}
		leases[i], ttl[int64(l.ID)] = l.ID, replayBenchLeaseTTL
	}
	opOf := func(op benchOp) clientv3.Op {
		switch {
		case op.value == nil:
			return clientv3.OpDelete(op.key)
		case op.lease != 0:
			return clientv3.OpPut(op.key, string(op.value), clientv3.WithLease(leases[op.lease]))
		}
		return clientv3.OpPut(op.key, string(op.value))
	}
	last := int64(1) // a fresh etcd's revision
	for _, w := range writes {
		var header int64
		if len(w) == 1 {
			resp, err := c.Do(ctx, opOf(w[0]))
			if err != nil {
				return 0, nil, err
			}
			if put := resp.Put(); put != nil {
				header = put.Header.Revision
			} else {
				header = resp.Del().Header.Revision
			}
		} else {
			ops := make([]clientv3.Op, len(w))
			for i, op := range w {
				ops[i] = opOf(op)
			}
			resp, err := c.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				return 0, nil, err
			}
			header = resp.Header.Revision
		}
		if header != last+1 {
			return 0, nil, fmt.Errorf("a write made revision %d after %d: each write must make one revision", header, last)
		}
		last = header
	}
	return last, ttl, nil
}

// segmentsOf cuts revs into segments as the archiver does, each closed once its changes reach
// replayBenchSegmentBytes, and encodes them; it returns them as a plan lists them and their
// stored bytes by key.
func segmentsOf(b *testing.B, revs []etcd.Revision, leaseTTL map[int64]int64) ([]archive.SegmentInfo, map[string][]byte) {
	b.Helper()
	var infos []archive.SegmentInfo
	stored := map[string][]byte{}
	seen := time.Now()
	for len(revs) > 0 {
		seg := archive.Segment{LeaseTTL: map[int64]int64{}}
		size := 0
		for len(revs) > 0 && size < replayBenchSegmentBytes {
			rec := archive.Record{Revision: revs[0], Seen: seen}
			seg.Records = append(seg.Records, rec)
			size += rec.Size()
			for _, ev := range rec.Events {
				if ev.Lease != 0 {
					seg.LeaseTTL[ev.Lease] = leaseTTL[ev.Lease]
				}
			}
			revs = revs[1:]
		}
		var buf bytes.Buffer
		if err := archive.Encode(&buf, seg); err != nil {
			b.Fatal(err)
		}
		info := archive.SegmentInfo{Key: archive.SegmentKey("series/", "bench", seg.First(), seg.Last()), Lineage: "bench",
			First: seg.First(), Last: seg.Last(), FirstSeen: seen, LastSeen: seen, SizeBytes: int64(buf.Len())}
		infos = append(infos, info)
		stored[info.Key] = buf.Bytes()
	}
	return infos, stored
}

// scratchMemberArgs are the flags a point-in-time Job's scratch member runs with
// (internal/resources/pitr.go): its history compacted as the replay goes, a revision of any
// size taken as one txn.
var scratchMemberArgs = []string{"--auto-compaction-mode=revision", "--auto-compaction-retention=1000",
	"--max-txn-ops=100000000", "--max-request-bytes=1073741824"}

// BenchmarkReplay: a restore to a point replays the archive's revisions into a scratch etcd,
// one txn per revision (archive.Replay, etcd.Replayer), after its base snapshot. Here the base
// is an empty etcd (revision 1) and the archive 20000 revisions of a realistic mix (see
// replayWorkload), 16 MiB segments held in memory, so the figure is the replay's own: decoding
// the segments and writing their revisions, not fetching them. Side by side in the same
// iteration, the plainest alternative: the same writes issued by one clientv3 client into a
// fresh etcd, one call each, which is what writing the data at all costs (and the source the
// archive is read from, through a watch as the archiver reads it). Both run against a one-member
// etcd on loopback, one write in flight at a time; the replay's runs with the scratch member's
// flags. Reports revisions per second and the keys'
// and values' bytes per second (10^6) of each, and the replay's time over the plain writes'.
func BenchmarkReplay(b *testing.B) {
	if os.Getenv("ETCD_BIN") == "" {
		b.Skip("ETCD_BIN is not set: run through `make bench`, which builds etcd")
	}
	writes := replayWorkload()
	raw := writeBytes(writes)
	var plainTime, replayTime time.Duration
	var storedBytes int64
	var segments int
	for i := 0; i < b.N; i++ {
		source := etcdtest.StartCluster(b, 1)[0]
		cl := source.Client(b)
		start := time.Now()
		last, leaseTTL, err := writePlainly(b.Context(), cl, writes)
		if err != nil {
			b.Fatal(err)
		}
		plainTime += time.Since(start)
		infos, stored := segmentsOf(b, etcdtest.Revisions(b, cl, 1, last), leaseTTL)
		segments = len(infos)
		storedBytes = 0
		for _, s := range infos {
			storedBytes += s.SizeBytes
		}
		source.Stop()

		scratch := etcdtest.NewServer(b, "scratch")
		scratch.ExtraArgs = scratchMemberArgs
		scratch.Start(b, "new", etcdtest.InitialCluster(scratch))
		scratch.WaitReady(b)
		r, err := etcd.NewReplayer(etcd.Config{Endpoints: []string{scratch.ClientURL}})
		if err != nil {
			b.Fatal(err)
		}
		plan := archive.Plan{Base: archive.Base{Key: "empty", Revision: 1}, Lineage: "bench", Segments: infos, Revision: last}
		open := func(s archive.SegmentInfo) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(stored[s.Key])), nil
		}
		start = time.Now()
		if err := archive.Replay(b.Context(), r, open, plan); err != nil {
			b.Fatal(err)
		}
		replayTime += time.Since(start)
		_ = r.Close()
		scratch.Stop()
	}
	revisions := float64(b.N) * float64(len(writes))
	written := float64(b.N) * float64(raw)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(revisions/replayTime.Seconds(), "replay-rev/s")
	b.ReportMetric(written/1e6/replayTime.Seconds(), "replay-MB/s")
	b.ReportMetric(revisions/plainTime.Seconds(), "plain-rev/s")
	b.ReportMetric(written/1e6/plainTime.Seconds(), "plain-MB/s")
	b.ReportMetric(replayTime.Seconds()/plainTime.Seconds(), "replay/plain")
	b.ReportMetric(float64(segments), "segments")
	b.ReportMetric(float64(storedBytes)/float64(raw), "stored/raw")
}
