package archive_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/etcd"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

// sample is a segment with every kind of event: a put with a lease, an empty value, a delete,
// a revision of several events.
func sample() archive.Segment {
	return archive.Segment{
		Records: []archive.Record{
			{Revision: etcd.Revision{Revision: 5, Events: []etcd.Event{
				{Key: []byte("a"), Value: []byte("1"), CreateRevision: 5, ModRevision: 5, Version: 1, Lease: 0x694d7e5b1c2a0f03},
				{Key: []byte("empty"), Value: []byte{}, CreateRevision: 3, ModRevision: 5, Version: 4},
			}}, Seen: t0},
			{Revision: etcd.Revision{Revision: 6, Events: []etcd.Event{
				{Delete: true, Key: []byte("b"), ModRevision: 6},
				{Key: []byte{0, 0xff, '/'}, Value: bytes.Repeat([]byte("v"), 10000), CreateRevision: 6, ModRevision: 6, Version: 1},
			}}, Seen: t0.Add(time.Millisecond)},
		},
		LeaseTTL: map[int64]int64{0x694d7e5b1c2a0f03: 30, 7: 0},
	}
}

func encode(t *testing.T, s archive.Segment) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := archive.Encode(&buf, s); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestASegmentDecodesToWhatWasEncoded(t *testing.T) {
	want := sample()
	got, err := archive.Decode(bytes.NewReader(encode(t, want)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
	if got.First() != 5 || got.Last() != 6 {
		t.Fatalf("first %d last %d, want 5 and 6", got.First(), got.Last())
	}
	if !bytes.Equal(encode(t, want), encode(t, want)) {
		t.Fatal("the same segment encoded twice differs")
	}
	empty, err := archive.Decode(bytes.NewReader(encode(t, archive.Segment{})))
	if err != nil || len(empty.Records) != 0 || len(empty.LeaseTTL) != 0 {
		t.Fatalf("an empty segment decoded as %+v, %v", empty, err)
	}
}

// TestATruncatedOrAlteredSegmentIsRefused: every prefix and every single-byte change.
func TestATruncatedOrAlteredSegmentIsRefused(t *testing.T) {
	whole := encode(t, sample())
	for n := range len(whole) {
		if _, err := archive.Decode(bytes.NewReader(whole[:n])); !errors.Is(err, archive.ErrCorrupt) {
			t.Fatalf("the first %d of %d bytes: %v, want ErrCorrupt", n, len(whole), err)
		}
	}
	for i := range whole {
		altered := bytes.Clone(whole)
		altered[i] ^= 0x20
		_, err := archive.Decode(bytes.NewReader(altered))
		if !errors.Is(err, archive.ErrCorrupt) {
			t.Fatalf("byte %d changed: %v, want ErrCorrupt", i, err)
		}
	}
	_, err := archive.Decode(strings.NewReader("SQLite format 3\x00 and then some more bytes than a checksum"))
	if !errors.Is(err, archive.ErrCorrupt) || !strings.Contains(err.Error(), "do not begin as a segment") {
		t.Fatalf("not a segment: %v", err)
	}
}

func TestRecordSizeBoundsTheEncodedSegment(t *testing.T) {
	s := sample()
	bound := 0
	for _, r := range s.Records {
		bound += r.Size()
	}
	if n := len(encode(t, s)); n > bound+100 {
		t.Fatalf("encoded %d bytes, more than the records' sizes (%d) and the framing", n, bound)
	}
}

func TestSegmentKeys(t *testing.T) {
	dir := "etcd/db/main/nightly-3f9a1c20/"
	lineage := archive.LineageName(0xcdef0123456789ab, 42)
	if lineage != "cdef0123456789ab-r00000000000000000042" {
		t.Fatalf("lineage name %s", lineage)
	}
	key := archive.SegmentKey(dir, lineage, 43, 1000)
	if key != dir+"archive/"+lineage+"/00000000000000000043-00000000000000001000.seg" {
		t.Fatalf("segment key %s", key)
	}
	gotLineage, first, last, ok := archive.ParseSegmentKey(dir, key)
	if !ok || gotLineage != lineage || first != 43 || last != 1000 {
		t.Fatalf("parsed %s as %s %d %d %v", key, gotLineage, first, last, ok)
	}
	for _, other := range []string{
		dir + "2026-03-01T12:00:00Z-r42.db",
		dir + "archive/" + lineage + "/lineage.json",
		dir + "archive/" + lineage + "/watermark.json",
		dir + "archive/" + lineage + "/00000000000000000043-00000000000000000042.seg",
		dir + "archive/" + lineage + "/43-1000.seg",
		dir + "archive//00000000000000000043-00000000000000001000.seg",
		"other/" + key,
	} {
		if _, _, _, ok := archive.ParseSegmentKey(dir, other); ok {
			t.Errorf("%s parsed as a segment key", other)
		}
	}
}
