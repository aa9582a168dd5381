package archive

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/etcd"
)

var t0 = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

// at is when revision rev of the test's history was seen: one every ten seconds.
func at(rev int64) time.Time { return t0.Add(time.Duration(rev) * 10 * time.Second) }

func seg(lineage string, first, last int64) SegmentInfo {
	return SegmentInfo{Key: fmt.Sprintf("%s/%d-%d", lineage, first, last), Lineage: lineage, First: first, Last: last, FirstSeen: at(first), LastSeen: at(last)}
}

// base is a snapshot of the test's history at rev: its backup began two seconds after rev was
// seen.
func base(rev int64) Base {
	return Base{Key: fmt.Sprintf("snap-r%d.db", rev), Revision: rev, Time: at(rev).Add(2 * time.Second)}
}

// started is the lineage.json of a lineage started from base(rev).
func started(rev int64) Lineage {
	b := base(rev)
	return Lineage{Base: rev, BaseKey: b.Key, Started: b.Time.Add(time.Second)}
}

func keys(segs []SegmentInfo) []string {
	out := make([]string, len(segs))
	for i, s := range segs {
		out[i] = s.Key
	}
	return out
}

func TestPlanTo(t *testing.T) {
	a := map[string]Lineage{"a": started(100)}
	// A snapshot of this history begun after lineage a started, and one of another history
	// numbered alike: taken after a's revisions past it were seen (a cluster made again).
	later := base(250)
	other := Base{Key: "other-r150.db", Revision: 150, Time: at(400)}
	older := Base{Key: "older-r150.db", Revision: 150, Time: t0.Add(-time.Hour)}
	for name, tc := range map[string]struct {
		bases    []Base
		segs     []SegmentInfo
		lineages map[string]Lineage
		target   int64
		wantBase string
		wantSegs []string
		wantErr  []string
	}{
		"the lineage's base and the segments after it": {
			bases: []Base{base(100)}, segs: []SegmentInfo{seg("a", 101, 200), seg("a", 201, 300)}, lineages: a, target: 150,
			wantBase: "snap-r100.db", wantSegs: []string{"a/101-200"},
		},
		"the newest base at or before the target": {
			bases: []Base{base(100), later}, segs: []SegmentInfo{seg("a", 201, 300), seg("a", 101, 200)}, lineages: a, target: 300,
			wantBase: later.Key, wantSegs: []string{"a/201-300"},
		},
		"a target that is a base's revision replays nothing": {
			bases: []Base{base(100), later}, segs: []SegmentInfo{seg("a", 101, 200), seg("a", 201, 300)}, lineages: a, target: 250,
			wantBase: later.Key,
		},
		"a base with no archived revision after it is not one": {
			bases: []Base{base(100), base(300)}, segs: []SegmentInfo{seg("a", 101, 200), seg("a", 201, 300)}, lineages: a, target: 300,
			wantBase: "snap-r100.db", wantSegs: []string{"a/101-200", "a/201-300"},
		},
		"a segment another covers is left out, one overlapping extends": {
			bases: []Base{base(100)}, segs: []SegmentInfo{seg("a", 101, 200), seg("a", 150, 180), seg("a", 190, 260)}, lineages: a, target: 240,
			wantBase: "snap-r100.db", wantSegs: []string{"a/101-200", "a/190-260"},
		},
		"a snapshot of a later history numbered alike is not a base": {
			bases: []Base{base(100), other}, segs: []SegmentInfo{seg("a", 101, 200)}, lineages: a, target: 180,
			wantBase: "snap-r100.db", wantSegs: []string{"a/101-200"},
		},
		"a snapshot of an earlier history numbered alike is not a base": {
			bases: []Base{base(100), older}, segs: []SegmentInfo{seg("a", 101, 200)}, lineages: a, target: 180,
			wantBase: "snap-r100.db", wantSegs: []string{"a/101-200"},
		},
		"of two histories holding the target, the one archived last": {
			bases:    []Base{base(100), {Key: "b-base.db", Revision: 120, Time: at(1000)}},
			segs:     []SegmentInfo{seg("a", 101, 200), {Key: "b/121-160", Lineage: "b", First: 121, Last: 160, FirstSeen: at(1001), LastSeen: at(1040)}},
			lineages: map[string]Lineage{"a": started(100), "b": {BaseKey: "b-base.db", Started: at(1000)}}, target: 150,
			wantBase: "b-base.db", wantSegs: []string{"b/121-160"},
		},
		"a gap": {
			bases: []Base{base(100)}, segs: []SegmentInfo{seg("a", 101, 200), seg("a", 231, 300)}, lineages: a, target: 210,
			wantErr: []string{"gap", "revisions 201-230 are missing", "revisions 100-200 of lineage a"},
		},
		"after a gap, without a base": {
			bases: []Base{base(100)}, segs: []SegmentInfo{seg("a", 101, 200), seg("a", 231, 300)}, lineages: a, target: 250,
			wantErr: []string{"no full snapshot of this history is left to start revisions 231-300 of lineage a", "revisions 100-200 of lineage a"},
		},
		"past the archive": {
			bases: []Base{base(100)}, segs: []SegmentInfo{seg("a", 101, 200)}, lineages: a, target: 201,
			wantErr: []string{"past the archive, whose newest revision is 200", "revisions 100-200 of lineage a"},
		},
		"before the archive": {
			bases: []Base{base(100)}, segs: []SegmentInfo{seg("a", 101, 200)}, lineages: a, target: 99,
			wantErr: []string{"before the archive, whose oldest revision is 101"},
		},
		"before the oldest base": {
			bases: []Base{later}, segs: []SegmentInfo{seg("a", 101, 200), seg("a", 201, 300)}, lineages: a, target: 150,
			wantErr: []string{"before the oldest full snapshot lineage a can start from there (snap-r250.db, revision 250)", "revisions 250-300 of lineage a"},
		},
		"a lineage whose lineage.json was not read": {
			bases: []Base{base(100)}, segs: []SegmentInfo{seg("a", 101, 200)}, target: 150,
			wantErr: []string{"lineage.json of lineage a", "materialize no revision"},
		},
		"no segments yet, the base's own revision": {
			bases: []Base{base(100)}, lineages: a, target: 100, wantBase: "snap-r100.db",
		},
		"no segments yet, past the base": {
			bases: []Base{base(100)}, lineages: a, target: 101,
			wantErr: []string{"the archive holds no revision"},
		},
		"no segments and no base": {
			bases: []Base{base(90)}, lineages: a, target: 100,
			wantErr: []string{"the archive holds no revision"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			plan, err := PlanTo(tc.bases, tc.segs, tc.lineages, tc.target)
			if tc.wantErr != nil {
				if u := (*Unrecoverable)(nil); !errors.As(err, &u) {
					t.Fatalf("planned %+v (%v), want a refusal", plan, err)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.Base.Key != tc.wantBase || !slices.Equal(keys(plan.Segments), tc.wantSegs) || plan.Revision != tc.target {
				t.Errorf("plan from %s with %v to %d, want from %s with %v", plan.Base.Key, keys(plan.Segments), plan.Revision, tc.wantBase, tc.wantSegs)
			}
		})
	}
}

func TestTargetIsARevisionOrATime(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		target Target
		ok     bool
	}{
		{Target{Revision: 5}, true},
		{Target{Time: &now}, true},
		{Target{}, false},
		{Target{Revision: -1}, false},
		{Target{Revision: 5, Time: &now}, false},
	} {
		if err := tc.target.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.target, err)
		}
	}
}

// world is a generated archive: histories one after the other in time, each of a cluster
// whose revisions may be numbered as an earlier one's were; in each, lineages started from a
// full snapshot and ended by a gap; scheduled snapshots between; then segments and snapshots
// deleted at random. history says which history each snapshot and lineage is of.
type world struct {
	bases    []Base
	segs     []SegmentInfo
	lineages map[string]Lineage
	history  map[string]int
	// revisions are every (history, revision) made, to aim targets at.
	maxRevision int64
}

func generate(rng *rand.Rand) world {
	w := world{lineages: map[string]Lineage{}, history: map[string]int{}}
	begin := t0
	var from int64 = 1
	for h := range 1 + rng.IntN(3) {
		n := 20 + rng.Int64N(150)
		seen := func(rev int64) time.Time { return begin.Add(time.Duration(rev-from) * 10 * time.Second) }
		snapshot := func(key string, rev int64) Base {
			b := Base{Key: key, Revision: rev, Time: seen(rev).Add(time.Duration(1+rng.IntN(9)) * time.Second)}
			w.history[key] = h
			return b
		}
		// The archiver: lineages from a full snapshot, each ended by a gap.
		rev := from + rng.Int64N(5)
		for rev < from+n {
			lineage := fmt.Sprintf("h%d-r%020d", h, rev)
			b := snapshot(fmt.Sprintf("h%d-base-r%d.db", h, rev), rev)
			w.bases = append(w.bases, b)
			w.lineages[lineage] = Lineage{Base: rev, BaseKey: b.Key, Started: b.Time.Add(time.Duration(1+rng.IntN(30)) * time.Second)}
			w.history[lineage] = h
			for rev < from+n {
				last := min(rev+1+rng.Int64N(15), from+n)
				w.segs = append(w.segs, SegmentInfo{Key: fmt.Sprintf("%s/%d-%d", lineage, rev+1, last), Lineage: lineage,
					First: rev + 1, Last: last, FirstSeen: seen(rev + 1), LastSeen: seen(last)})
				rev = last
				if rng.IntN(8) == 0 {
					rev += 1 + rng.Int64N(20) // compaction overtook the archiver
					break
				}
			}
		}
		// Scheduled snapshots.
		for i := range rng.IntN(8) {
			r := from + rng.Int64N(n)
			w.bases = append(w.bases, snapshot(fmt.Sprintf("h%d-%d-r%d.db", h, i, r), r))
		}
		w.maxRevision = max(w.maxRevision, from+n)
		begin = seen(from + n).Add(time.Hour)
		// The next history: a new cluster from 1, or one restored in place without a bump.
		if rng.IntN(2) == 0 {
			from = 1
		} else {
			from = 1 + rng.Int64N(from+n)
		}
	}
	w.segs = slices.DeleteFunc(w.segs, func(SegmentInfo) bool { return rng.IntN(12) == 0 })
	w.bases = slices.DeleteFunc(w.bases, func(Base) bool { return rng.IntN(5) == 0 })
	rng.Shuffle(len(w.segs), func(i, j int) { w.segs[i], w.segs[j] = w.segs[j], w.segs[i] })
	return w
}

// covers says whether lineage's segments in w hold every revision from first through last.
func (w world) covers(lineage string, first, last int64) bool {
	for rev := first; rev <= last; rev++ {
		if !slices.ContainsFunc(w.segs, func(s SegmentInfo) bool { return s.Lineage == lineage && s.First <= rev && rev <= s.Last }) {
			return false
		}
	}
	return true
}

// archived says whether any segment of lineage is left in w.
func (w world) archived(lineage string) bool {
	return slices.ContainsFunc(w.segs, func(s SegmentInfo) bool { return s.Lineage == lineage })
}

// valid are the (lineage, base) pairs the model knows to materialize target rightly: the base
// of the lineage's history, its lineage's own or begun after the lineage started, and every
// revision after it through target (and the one after it) archived in that lineage; or, for a
// lineage none of whose segments is left, its own base at its own revision.
func (w world) valid(target int64) map[string][]Base {
	out := map[string][]Base{}
	for lineage, start := range w.lineages {
		for _, b := range w.bases {
			if w.history[b.Key] != w.history[lineage] || b.Revision > target || (b.Key != start.BaseKey && b.Time.Before(start.Started)) {
				continue
			}
			if w.covers(lineage, b.Revision+1, max(target, b.Revision+1)) || (b.Key == start.BaseKey && b.Revision == target && !w.archived(lineage)) {
				out[lineage] = append(out[lineage], b)
			}
		}
	}
	return out
}

// Whatever bases and segments exist, a plan replays one lineage's segments without a missing
// revision from its base through its target, from a base of that lineage's history, the
// newest usable one, in the newest history that has one; a target no lineage can reach is
// refused, naming every range the archive can materialize; and every range named can be.
func TestPlansOfGeneratedArchives(t *testing.T) {
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 7))
		w := generate(rng)
		for range 30 {
			target := 1 + rng.Int64N(w.maxRevision+3)
			checkPlan(t, seed, w, target)
		}
		for _, r := range Recoverable(w.bases, w.segs, w.lineages) {
			for _, target := range []int64{r.First, r.Last} {
				if _, err := PlanTo(w.bases, w.segs, w.lineages, target); err != nil {
					t.Errorf("seed %d: %s is recoverable, yet %d is refused: %v", seed, r, target, err)
				}
			}
		}
	}
}

func checkPlan(t *testing.T, seed uint64, w world, target int64) {
	t.Helper()
	valid := w.valid(target)
	plan, err := PlanTo(w.bases, w.segs, w.lineages, target)
	if err != nil {
		if len(valid) > 0 {
			t.Errorf("seed %d: revision %d refused (%v), yet these can materialize it: %v", seed, target, err, valid)
		}
		for _, r := range Recoverable(w.bases, w.segs, w.lineages) {
			if !strings.Contains(err.Error(), r.String()) {
				t.Errorf("seed %d: the refusal %q does not name %s", seed, err, r)
			}
		}
		return
	}
	bases, ok := valid[plan.Lineage]
	if !ok || !slices.Contains(bases, plan.Base) {
		t.Fatalf("seed %d: revision %d planned from %+v in lineage %s, which the model does not take as its (valid: %v)", seed, target, plan.Base, plan.Lineage, valid)
	}
	for _, b := range bases {
		if b.Revision > plan.Base.Revision {
			t.Errorf("seed %d: revision %d planned from %s at %d, yet %s at %d is usable", seed, target, plan.Base.Key, plan.Base.Revision, b.Key, b.Revision)
		}
	}
	for lineage := range valid {
		if w.history[lineage] > w.history[plan.Lineage] {
			t.Errorf("seed %d: revision %d planned in lineage %s, yet the later history's %s can materialize it", seed, target, plan.Lineage, lineage)
		}
	}
	next := plan.Base.Revision + 1
	for _, s := range plan.Segments {
		if s.Lineage != plan.Lineage || s.First > next || s.Last < next || s.First > target {
			t.Fatalf("seed %d: plan to %d from %d: segment %s does not continue from %d", seed, target, plan.Base.Revision, s.Key, next)
		}
		next = s.Last + 1
	}
	if plan.Revision != target || next <= target {
		t.Errorf("seed %d: plan to %d from %d ends at %d", seed, target, plan.Base.Revision, next-1)
	}
}

// archived is the segments of a history as an archive holds them, a revision seen every ten
// seconds from a segment's first, and counts the segments read.
type archived struct {
	reads []string
}

func (a *archived) open(s SegmentInfo) (io.ReadCloser, error) {
	a.reads = append(a.reads, s.Key)
	var seg Segment
	for rev := s.First; rev <= s.Last; rev++ {
		seg.Records = append(seg.Records, Record{Revision: etcd.Revision{Revision: rev, Events: []etcd.Event{{Key: []byte("k"), Value: []byte(fmt.Sprint(rev)), ModRevision: rev}}},
			Seen: s.FirstSeen.Add(time.Duration(rev-s.First) * 10 * time.Second)})
	}
	var buf bytes.Buffer
	if err := Encode(&buf, seg); err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}

func TestRevisionAt(t *testing.T) {
	gapless := []SegmentInfo{seg("a", 101, 200), seg("a", 201, 300)}
	later := SegmentInfo{Key: "b/501-600", Lineage: "b", First: 501, Last: 600, FirstSeen: at(1000), LastSeen: at(1099)}
	for name, tc := range map[string]struct {
		segs  []SegmentInfo
		t     time.Time
		marks map[string]Watermark
		// want is the lineage and revision, or the refusal's words.
		wantLineage string
		wantRev     int64
		wantReads   []string
		wantErr     []string
	}{
		"within a segment: read it": {
			segs: gapless, t: at(150).Add(5 * time.Second), wantLineage: "a", wantRev: 150, wantReads: []string{"a/101-200"},
		},
		"at a revision's time": {
			segs: gapless, t: at(250), wantLineage: "a", wantRev: 250, wantReads: []string{"a/201-300"},
		},
		"between two segments: the listing says": {
			segs: gapless, t: at(200).Add(5 * time.Second), wantLineage: "a", wantRev: 200,
		},
		"after the last segment, with nothing since by the watermark": {
			segs: gapless, t: at(300).Add(10 * time.Minute), marks: map[string]Watermark{"a": {HighestRevision: 300, Time: at(300).Add(time.Hour)}},
			wantLineage: "a", wantRev: 300,
		},
		"after the last segment, the cluster past it": {
			segs: gapless, t: at(300).Add(10 * time.Minute), marks: map[string]Watermark{"a": {HighestRevision: 310, Time: at(300).Add(time.Hour)}},
			wantErr: []string{"past what the archive has seen of lineage a", "the cluster was at revision 310"},
		},
		"after the watermark": {
			segs: gapless, t: at(300).Add(2 * time.Hour), marks: map[string]Watermark{"a": {HighestRevision: 300, Time: at(300).Add(time.Hour)}},
			wantErr: []string{"past what the archive has seen of lineage a"},
		},
		"before the archive": {
			segs: gapless, t: at(100), wantErr: []string{"before the archive: its first revision, 101 of lineage a"},
		},
		"in a gap of a lineage": {
			segs: []SegmentInfo{seg("a", 101, 200), seg("a", 231, 300)}, t: at(215),
			wantErr: []string{"gap", "revision 200 of lineage a", "resumes with revision 231 of lineage a"},
		},
		"between lineages, the first still current by its watermark": {
			segs: append(slices.Clone(gapless), later), t: at(400), marks: map[string]Watermark{"a": {HighestRevision: 300, Time: at(500)}},
			wantLineage: "a", wantRev: 300,
		},
		"between lineages, the first gone past": {
			segs: append(slices.Clone(gapless), later), t: at(400), marks: map[string]Watermark{"a": {HighestRevision: 320, Time: at(500)}},
			wantErr: []string{"past what the archive has seen of lineage a", "resumes with revision 501 of lineage b"},
		},
		"in a later lineage": {
			segs: append(slices.Clone(gapless), later), t: at(1050), wantLineage: "b", wantRev: 551, wantReads: []string{"b/501-600"},
		},
		"no segments": {
			t: at(1), wantErr: []string{"the archive holds no revision"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			a := &archived{}
			watermark := func(lineage string) (Watermark, error) {
				wm, ok := tc.marks[lineage]
				if !ok {
					return Watermark{}, fmt.Errorf("no watermark of %s", lineage)
				}
				return wm, nil
			}
			lineage, rev, err := RevisionAt(tc.segs, tc.t, a.open, watermark)
			if tc.wantErr != nil {
				if u := (*Unrecoverable)(nil); !errors.As(err, &u) {
					t.Fatalf("revision %d of %s (%v), want a refusal", rev, lineage, err)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lineage != tc.wantLineage || rev != tc.wantRev || !slices.Equal(a.reads, tc.wantReads) {
				t.Errorf("revision %d of %s reading %v, want %d of %s reading %v", rev, lineage, a.reads, tc.wantRev, tc.wantLineage, tc.wantReads)
			}
		})
	}
}

// A lineage that has written no segment yet (just started, or on a cluster no one has written
// to since) can be restored at its base's revision, and says so; without its base, not at all.
func TestALineageWithoutSegmentsIsRecoverableAtItsBase(t *testing.T) {
	a := map[string]Lineage{"a": started(100)}
	got := Recoverable([]Base{base(100)}, nil, a)
	if len(got) != 1 || got[0].Lineage != "a" || got[0].First != 100 || got[0].Last != 100 || !got[0].LastSeen.Equal(started(100).Started) {
		t.Errorf("recoverable %+v, want lineage a at revision 100 alone", got)
	}
	if got := Recoverable([]Base{base(90)}, nil, a); len(got) != 0 {
		t.Errorf("recoverable %+v without the lineage's base, want nothing", got)
	}
}
