package agent

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/archive"
)

var when = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestSegmentDue(t *testing.T) {
	for _, c := range []struct {
		name  string
		bytes int
		age   time.Duration
		due   bool
	}{
		{"small and young", 100, 10 * time.Second, false},
		{"full", 1000, 0, true},
		{"past full", 5000, 0, true},
		{"old enough", 1, time.Minute, true},
	} {
		if got := segmentDue(c.bytes, when, when.Add(c.age), 1000, time.Minute); got != c.due {
			t.Errorf("%s: due %v, want %v", c.name, got, c.due)
		}
	}
}

func TestHowToGoOn(t *testing.T) {
	newest := namedLineage{name: "abc-r1", Lineage: archive.Lineage{ClusterID: "abc", RestoreMark: "m1"}}
	for _, c := range []struct {
		name      string
		found     bool
		cluster   string
		mark      string
		abandoned map[string]bool
		cont      bool
		gap       string
	}{
		{"the series' first lineage", false, "abc", "m1", nil, false, ""},
		{"this cluster's, same mark", true, "abc", "m1", nil, true, ""},
		{"restored in place", true, "abc", "m2", nil, false, GapRestored},
		{"another cluster of the name", true, "def", "m1", nil, false, GapStarted},
		{"overtaken by compaction", true, "abc", "m1", map[string]bool{"abc-r1": true}, false, ""},
	} {
		cont, gap := howToGoOn(newest, c.found, c.cluster, c.mark, c.abandoned)
		if cont != c.cont || gap != c.gap {
			t.Errorf("%s: continue %v gap %q, want %v %q", c.name, cont, gap, c.cont, c.gap)
		}
	}
}

func TestPrunable(t *testing.T) {
	seg := func(lineage string, first, last int64) archive.SegmentInfo {
		return archive.SegmentInfo{Key: archive.SegmentKey("d/", lineage, first, last), Lineage: lineage, First: first, Last: last}
	}
	old1, old2, straddles, after := seg("a", 11, 20), seg("a", 21, 30), seg("a", 31, 40), seg("a", 41, 50)
	baseless, current := seg("b", 5, 9), seg("c", 61, 70)
	ranges := []archive.Range{{Lineage: "a", First: 35, Last: 50}}
	got := prunable([]archive.SegmentInfo{old1, old2, straddles, after, baseless, current}, ranges, "c")
	if want := []archive.SegmentInfo{old1, old2, baseless}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pruned %v, want %v: revisions at or before the oldest usable base, and a lineage without one; never the lineage being written while it has no range", got, want)
	}
	if got := prunable([]archive.SegmentInfo{seg("a", 31, 35)}, ranges, "a"); len(got) != 1 {
		t.Fatalf("the lineage being written keeps a segment at or before its oldest base: %v", got)
	}
}

func TestArchiveBoardLag(t *testing.T) {
	now := when
	b := newArchiveBoard(func() time.Time { return now })
	b.lineageStarted("l", 10, 10)
	b.progressed(15, when.Add(-3*time.Second))
	b.observed(20)
	if s := b.report(); s.LagRevisions != 10 || s.LagSeconds != 3 || s.HighestRevision != 20 {
		t.Fatalf("report %+v: want 10 revisions, 3s behind", s)
	}
	b.failed(errors.New("upload: connection reset"))
	b.segmentWritten(15, nil)
	if s := b.report(); s.LagRevisions != 5 || s.LagSeconds != 0 || s.Segments != 1 || s.Error != "" {
		t.Fatalf("report %+v: want 5 revisions behind, none waiting, the error cleared", s)
	}
	for i := range 12 {
		b.gapped(ArchiveGap{AfterRevision: int64(i)})
	}
	if s := b.report(); len(s.Gaps) != 10 || s.Gaps[9].AfterRevision != 11 {
		t.Fatalf("gaps %+v: want the newest ten", s.Gaps)
	}
}
