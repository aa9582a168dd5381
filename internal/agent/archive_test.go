package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/backupplan"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// archiveWorld is a real cluster and a real S3 server with the series' bucket.
type archiveWorld struct {
	servers []*etcdtest.Server
	raw     *clientv3.Client
	dest    *storage.Destination
	dir     string
}

func newArchiveWorld(t *testing.T) archiveWorld {
	t.Helper()
	servers := etcdtest.StartCluster(t, 1)
	srv := s3test.Start(t)
	dest := destination(t, srv, srv.Bucket(t, "archive"))
	return archiveWorld{servers: servers, raw: servers[0].Client(t), dest: dest, dir: nightly.Dir(dest.Prefix())}
}

func (w archiveWorld) config(mark string, keys *encryption.Keyring) agent.ArchiveConfig {
	return agent.ArchiveConfig{
		Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(w.servers)}, Series: nightly, Destination: w.dest, Keys: keys,
		SegmentDuration: time.Second, SegmentMaxBytes: 4096, RestoreMark: mark, Now: time.Now,
	}
}

// runningArchiver is an archiver running until stop.
type runningArchiver struct {
	*agent.Archiver
	cancel context.CancelFunc
	done   chan struct{}
}

func startArchiver(t *testing.T, cfg agent.ArchiveConfig) *runningArchiver {
	t.Helper()
	a, err := agent.NewArchiver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningArchiver{Archiver: a, cancel: cancel, done: make(chan struct{})}
	go func() { a.Run(ctx); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

// startArchiving starts an archiver and waits until it has a lineage: revisions written
// from then on are after its base.
func startArchiving(t *testing.T, cfg agent.ArchiveConfig) *runningArchiver {
	t.Helper()
	a := startArchiver(t, cfg)
	waitFor(t, "a lineage", func() bool { return a.Status().Lineage != "" })
	return a
}

// stop stops the archiver as its pod's deletion does, waiting for it to write what it holds.
func (r *runningArchiver) stop() {
	r.cancel()
	<-r.done
	_ = r.Close()
}

// waitArchived waits until the archiver has written revision rev and reports no lag.
func waitArchived(t *testing.T, a *runningArchiver, rev int64) agent.ArchiveStatus {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := a.Status()
		if n := len(s.Ranges); n > 0 && s.Ranges[n-1].Lineage == s.Lineage && s.Ranges[n-1].Last.Revision >= rev && s.LagRevisions == 0 && s.LagSeconds == 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d not archived within a minute: %+v", rev, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeChanges writes n rounds of every kind of revision: puts of values big enough to fill
// several segments, a delete, a txn, a leased key and a lease revoked with its keys. It
// returns the last revision.
func writeChanges(t *testing.T, c *clientv3.Client, round string, n int) int64 {
	t.Helper()
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var last int64
	for i := range n {
		k := fmt.Sprintf("%s/%03d", round, i)
		value := strings.Repeat(k, 40)
		must(c.Put(ctx, k, value))
		must(c.Txn(ctx).Then(clientv3.OpPut(k+"/a", "1"), clientv3.OpPut(k+"/b", "2"), clientv3.OpDelete(k)).Commit())
		lease, err := c.Grant(ctx, 600)
		if err != nil {
			t.Fatal(err)
		}
		must(c.Put(ctx, k+"/leased", "x", clientv3.WithLease(lease.ID)))
		if i%2 == 0 {
			must(c.Revoke(ctx, lease.ID))
		}
		resp, err := c.Delete(ctx, k+"/a")
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Header.Revision
	}
	return last
}

// lineageSegments reads every segment of lineage, checking they hold every revision from
// first through last once, in order.
func lineageSegments(t *testing.T, w archiveWorld, lineage string, first, last int64, keys *encryption.Keyring) []archive.Record {
	t.Helper()
	segs, err := archive.ListSegments(t.Context(), w.dest, w.dir)
	if err != nil {
		t.Fatal(err)
	}
	var records []archive.Record
	for _, s := range segs {
		if s.Lineage != lineage {
			continue
		}
		seg := readSegment(t, w.dest, s, keys)
		if seg.First() != s.First || seg.Last() != s.Last || !s.FirstSeen.Equal(seg.Records[0].Seen) || !s.LastSeen.Equal(seg.Records[len(seg.Records)-1].Seen) {
			t.Fatalf("segment %s holds %d-%d seen %s-%s; its listing says %+v", s.Key, seg.First(), seg.Last(), seg.Records[0].Seen, seg.Records[len(seg.Records)-1].Seen, s)
		}
		for _, r := range seg.Records {
			for _, ev := range r.Events {
				if _, ok := seg.LeaseTTL[ev.Lease]; ev.Lease != 0 && !ok {
					t.Fatalf("segment %s names lease %x without its TTL", s.Key, ev.Lease)
				}
			}
		}
		records = append(records, seg.Records...)
	}
	for i, r := range records {
		if r.Revision.Revision != first+int64(i) {
			t.Fatalf("lineage %s holds revision %d at position %d: want every revision from %d once, in order", lineage, r.Revision.Revision, i, first)
		}
	}
	if len(records) == 0 || records[len(records)-1].Revision.Revision != last {
		t.Fatalf("lineage %s holds %d revisions from %d, want through %d", lineage, len(records), first, last)
	}
	return records
}

func readSegment(t *testing.T, d *storage.Destination, s archive.SegmentInfo, keys *encryption.Keyring) archive.Segment {
	t.Helper()
	r, err := d.Open(t.Context(), s.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var plain io.Reader = r
	if s.KeyID != "" {
		if plain, err = keys.Decrypt(r, s.KeyID); err != nil {
			t.Fatal(err)
		}
	}
	seg, err := archive.Decode(plain)
	if err != nil {
		t.Fatalf("segment %s: %v", s.Key, err)
	}
	return seg
}

// kv is a key as a range read shows it.
type kv struct {
	Key, Value                           string
	CreateRevision, ModRevision, Version int64
	Lease                                int64
}

func keyspace(t *testing.T, c *clientv3.Client, rev int64) map[string]kv {
	t.Helper()
	resp, err := c.Get(t.Context(), "", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]kv{}
	for _, v := range resp.Kvs {
		out[string(v.Key)] = kv{string(v.Key), string(v.Value), v.CreateRevision, v.ModRevision, v.Version, v.Lease}
	}
	return out
}

// replayMatches applies records to the keyspace at base and checks it against the source's at
// every revision: the archive holds exactly what the cluster committed.
func replayMatches(t *testing.T, c *clientv3.Client, base int64, records []archive.Record) {
	t.Helper()
	model := keyspace(t, c, base)
	for _, r := range records {
		for _, ev := range r.Events {
			if ev.Delete {
				delete(model, string(ev.Key))
				continue
			}
			model[string(ev.Key)] = kv{string(ev.Key), string(ev.Value), ev.CreateRevision, ev.ModRevision, ev.Version, ev.Lease}
		}
		if want := keyspace(t, c, r.Revision.Revision); !reflect.DeepEqual(model, want) {
			t.Fatalf("after revision %d the archive implies %v, the cluster held %v", r.Revision.Revision, model, want)
		}
	}
}

func seriesSnapshots(t *testing.T, w archiveWorld) []string {
	t.Helper()
	objects, err := w.dest.List(t.Context(), w.dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objects {
		if _, ok := backupplan.ParseObjectName(w.dest.Prefix(), nightly, o.Key); ok {
			out = append(out, o.Key)
		}
	}
	sort.Strings(out)
	return out
}

// TestTheArchiveHoldsEveryRevisionAndGoesOnWhereItStopped: a series without any snapshot gets
// one, a lineage starts from it, every revision after lands in verified segments (several, by
// size), the archiver stopped and started again continues the lineage, and the archive
// replays to the cluster's keyspace at each revision.
func TestTheArchiveHoldsEveryRevisionAndGoesOnWhereItStopped(t *testing.T) {
	w := newArchiveWorld(t)
	writeChanges(t, w.raw, "before", 3)
	a := startArchiving(t, w.config("mark-1", nil))
	last := writeChanges(t, w.raw, "first", 10)
	s := waitArchived(t, a, last)

	snapshots := seriesSnapshots(t, w)
	if len(snapshots) != 1 || s.Base == 0 || s.Segments < 2 || s.Error != "" || len(s.Gaps) != 0 {
		t.Fatalf("snapshots %v, status %+v: want the one snapshot the archiver took, its lineage, several segments, no error, no gap", snapshots, s)
	}
	l, err := archive.ReadLineage(t.Context(), w.dest, w.dir, s.Lineage)
	if err != nil || l.BaseKey != snapshots[0] || l.Base != s.Base || l.RestoreMark != "mark-1" || archive.LineageName(clusterID(t, w), l.Base) != s.Lineage {
		t.Fatalf("lineage.json %+v (%v); status %+v", l, err, s)
	}
	if first := s.Ranges[len(s.Ranges)-1].First.Revision; first != s.Base {
		t.Fatalf("the recoverable range starts at %d, want the base's %d", first, s.Base)
	}
	wm, err := archive.ReadWatermark(t.Context(), w.dest, w.dir, s.Lineage)
	if err != nil || wm.HighestRevision < last {
		t.Fatalf("watermark %+v (%v), want at least revision %d", wm, err, last)
	}

	a.stop()
	stoppedAt := last
	last = writeChanges(t, w.raw, "while-stopped", 3)
	b := startArchiving(t, w.config("mark-1", nil))
	last = max(last, writeChanges(t, w.raw, "second", 3))
	s2 := waitArchived(t, b, last)
	if s2.Lineage != s.Lineage || len(seriesSnapshots(t, w)) != 1 || len(s2.Gaps) != 0 {
		t.Fatalf("after a restart: status %+v, snapshots %v; want lineage %s continued from %d, no snapshot taken", s2, seriesSnapshots(t, w), s.Lineage, stoppedAt)
	}
	records := lineageSegments(t, w, s.Lineage, s.Base+1, last, nil)
	replayMatches(t, w.raw, s.Base, records)
}

func clusterID(t *testing.T, w archiveWorld) uint64 {
	t.Helper()
	resp, err := w.raw.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.ClusterId
}

// TestACompactionThatOvertakesTheArchiveStartsANewLineage: revisions compacted before the
// archiver read them are a gap, reported, after which a new lineage starts from a snapshot
// taken then.
func TestACompactionThatOvertakesTheArchiveStartsANewLineage(t *testing.T) {
	w := newArchiveWorld(t)
	a := startArchiving(t, w.config("mark-1", nil))
	last := writeChanges(t, w.raw, "first", 3)
	s := waitArchived(t, a, last)
	a.stop()

	last = writeChanges(t, w.raw, "unread", 3)
	if _, err := w.raw.Compact(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	b := startArchiver(t, w.config("mark-1", nil))
	waitFor(t, "a new lineage", func() bool { now := b.Status(); return now.Lineage != "" && now.Lineage != s.Lineage })
	last = writeChanges(t, w.raw, "after", 3)
	s2 := waitArchived(t, b, last)
	if s2.Lineage == s.Lineage || len(s2.Gaps) != 1 {
		t.Fatalf("status %+v: want a new lineage after the gap", s2)
	}
	g := s2.Gaps[0]
	if g.Lineage != s.Lineage || g.Reason != agent.GapCompacted || g.AfterRevision != s.Ranges[len(s.Ranges)-1].Last.Revision || g.ResumedAt != s2.Base || s2.Base <= g.AfterRevision {
		t.Fatalf("gap %+v; want lineage %s compacted after %d, resumed at the new base %d", g, s.Lineage, s.Ranges[len(s.Ranges)-1].Last.Revision, s2.Base)
	}
	if len(seriesSnapshots(t, w)) != 2 {
		t.Fatalf("snapshots %v: want a second, the new lineage's base", seriesSnapshots(t, w))
	}
	lineageSegments(t, w, s2.Lineage, s2.Base+1, last, nil)
	// Both lineages stay restorable from their own bases.
	if len(s2.Ranges) != 2 {
		t.Fatalf("ranges %+v: want the compacted lineage's and the new one's", s2.Ranges)
	}
}

// TestANewRestoreMarkStartsANewLineageFromAFreshSnapshot: the cluster restored in place is
// another history, even when the newest snapshot looks like this one.
func TestANewRestoreMarkStartsANewLineageFromAFreshSnapshot(t *testing.T) {
	w := newArchiveWorld(t)
	a := startArchiving(t, w.config("mark-1", nil))
	last := writeChanges(t, w.raw, "first", 2)
	s := waitArchived(t, a, last)
	a.stop()

	b := startArchiving(t, w.config("mark-2", nil))
	last = writeChanges(t, w.raw, "after", 2)
	s2 := waitArchived(t, b, last)
	if s2.Lineage == s.Lineage || len(s2.Gaps) != 1 || s2.Gaps[0].Reason != agent.GapRestored || len(seriesSnapshots(t, w)) != 2 {
		t.Fatalf("status %+v, snapshots %v: want a new lineage from a new snapshot, the gap Restored", s2, seriesSnapshots(t, w))
	}
	l, err := archive.ReadLineage(t.Context(), w.dest, w.dir, s2.Lineage)
	if err != nil || l.RestoreMark != "mark-2" {
		t.Fatalf("lineage.json %+v (%v)", l, err)
	}
}

// TestANewLineageStartsFromTheNewestSnapshotOfThisHistory: a scheduled backup already in the
// series is the base; no snapshot is taken.
func TestANewLineageStartsFromTheNewestSnapshotOfThisHistory(t *testing.T) {
	w := newArchiveWorld(t)
	writeChanges(t, w.raw, "before", 2)
	res, err := agent.Backup(t.Context(), agent.BackupConfig{Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(w.servers)}, Series: nightly, Destination: w.dest, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	a := startArchiving(t, w.config("mark-1", nil))
	last := writeChanges(t, w.raw, "after", 2)
	s := waitArchived(t, a, last)
	if s.Base != res.Revision || len(seriesSnapshots(t, w)) != 1 {
		t.Fatalf("status %+v, snapshots %v: want the lineage to start from the scheduled backup at %d", s, seriesSnapshots(t, w), res.Revision)
	}
	replayMatches(t, w.raw, s.Base, lineageSegments(t, w, s.Lineage, s.Base+1, last, nil))
}

// TestEncryptedSegmentsDecryptWithTheKeyTheirMetadataNames.
func TestEncryptedSegmentsDecryptWithTheKeyTheirMetadataNames(t *testing.T) {
	w := newArchiveWorld(t)
	keys := keyring(t, "archive-keys", map[string]*age.X25519Identity{"2026-01": newIdentity(t)})
	a := startArchiving(t, w.config("mark-1", keys))
	last := writeChanges(t, w.raw, "secret", 3)
	s := waitArchived(t, a, last)
	segs, err := archive.ListSegments(t.Context(), w.dest, w.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, seg := range segs {
		if seg.KeyID != keys.Newest().ID {
			t.Fatalf("segment %s encrypted to %q, want %s", seg.Key, seg.KeyID, keys.Newest().ID)
		}
		r, err := w.dest.Open(t.Context(), seg.Key)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(r)
		r.Close()
		if bytes.Contains(raw, []byte("etcdseg1")) {
			t.Fatalf("segment %s is stored in plain", seg.Key)
		}
	}
	replayMatches(t, w.raw, s.Base, lineageSegments(t, w, s.Lineage, s.Base+1, last, keys))
}

// TestSegmentsNoBaseCanUseArePruned: once a later snapshot of the lineage exists and the older
// base is gone, the segments at or before the later one's revision go, and the rest stay.
func TestSegmentsNoBaseCanUseArePruned(t *testing.T) {
	agent.UseHousekeepingInterval(t, 500*time.Millisecond)
	w := newArchiveWorld(t)
	a := startArchiving(t, w.config("mark-1", nil))
	mid := writeChanges(t, w.raw, "first", 5)
	s := waitArchived(t, a, mid)
	// Backups name snapshots to the second: the later one must not share the base's second.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	res, err := agent.Backup(t.Context(), agent.BackupConfig{Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(w.servers)}, Series: nightly, Destination: w.dest, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	last := writeChanges(t, w.raw, "second", 5)
	waitArchived(t, a, last)
	l, err := archive.ReadLineage(t.Context(), w.dest, w.dir, s.Lineage)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.dest.Delete(t.Context(), l.BaseKey); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		segs, err := archive.ListSegments(t.Context(), w.dest, w.dir)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(segs, func(s archive.SegmentInfo) bool { return s.Last <= res.Revision }) {
			if segs[0].First > res.Revision+1 {
				t.Fatalf("segments from %d left: revision %d, after the snapshot at %d, is gone too", segs[0].First, res.Revision+1, res.Revision)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segments at or before the snapshot at %d still there: %+v", res.Revision, segs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	st := a.Status()
	if r := st.Ranges[len(st.Ranges)-1]; r.First.Revision != res.Revision || r.Last.Revision < last {
		t.Fatalf("range %+v: want from the remaining snapshot's %d through %d", r, res.Revision, last)
	}
}

// TestArchiveStatusIsServedAsJSON: /status says what Status says, /healthz answers.
func TestArchiveStatusIsServedAsJSON(t *testing.T) {
	want := agent.ArchiveStatus{Lineage: "abc-r00000000000000000005", Base: 5, HighestRevision: 9, LagRevisions: 2, LagSeconds: 1,
		Ranges: []agent.ArchiveRange{{Lineage: "abc-r00000000000000000005", First: agent.ArchivePoint{Revision: 5, Time: t0}, Last: agent.ArchivePoint{Revision: 7, Time: t0.Add(time.Second)}}},
		Gaps:   []agent.ArchiveGap{{Lineage: "old", AfterRevision: 3, ResumedAt: 5, Reason: agent.GapCompacted, Time: t0}}, Segments: 2}
	srv := httptest.NewServer(agent.ArchiveStatusHandler(func() agent.ArchiveStatus { return want }))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got agent.ArchiveStatus
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("served %+v (%v), want %+v", got, err, want)
	}
	health, err := srv.Client().Get(srv.URL + "/healthz")
	if err != nil || health.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", health, err)
	}
	health.Body.Close()
}

// TestASnapshotOfAnotherHistoryIsNeverABase: the series' newest snapshot, of a cluster since
// made again under the name, is not built on: the archiver takes its own.
func TestASnapshotOfAnotherHistoryIsNeverABase(t *testing.T) {
	w := newArchiveWorld(t)
	earlier := etcdtest.StartCluster(t, 1)
	writeChanges(t, earlier[0].Client(t), "earlier", 1)
	other, err := agent.Backup(t.Context(), agent.BackupConfig{Etcd: etcd.Config{Endpoints: etcdtest.ClientURLs(earlier)}, Series: nightly, Destination: w.dest, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	// The cluster archived now has gone past that snapshot's revision, with other keys.
	writeChanges(t, w.raw, "now", 3)
	a := startArchiving(t, w.config("mark-1", nil))
	last := writeChanges(t, w.raw, "after", 1)
	s := waitArchived(t, a, last)
	l, err := archive.ReadLineage(t.Context(), w.dest, w.dir, s.Lineage)
	if err != nil {
		t.Fatal(err)
	}
	if snapshots := seriesSnapshots(t, w); len(snapshots) != 2 || w.dest.URI(l.BaseKey) == other.URI {
		t.Fatalf("lineage %+v, snapshots %v: want a base the archiver took of this cluster, not %s", l, snapshots, other.URI)
	}
	replayMatches(t, w.raw, s.Base, lineageSegments(t, w, s.Lineage, s.Base+1, last, nil))
}
