package archive

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// A point in time is materialized from a full snapshot of the series (a base) and the archived
// revisions after it, replayed in order. Everything here decides which, from a listing alone,
// with these invariants:
//   - a plan's segments hold every revision from its base's + 1 through its target, within one
//     lineage: one unbroken history of one cluster;
//   - its base is the newest usable one at or before the target;
//   - anything else (a target in a gap, outside every range, before every base) is refused,
//     with the ranges the archive can materialize named.
// Revisions are numbers, and two histories (a cluster made again under its name, one restored
// in place without a revision bump) may number theirs alike: so a base is taken for a lineage
// only when their times agree too (usableFor).

// Unrecoverable is a refusal: the archive cannot materialize what was asked as it stands.
type Unrecoverable struct{ Reason string }

func (e *Unrecoverable) Error() string { return e.Reason }

func refuse(format string, args ...any) error {
	return &Unrecoverable{Reason: fmt.Sprintf(format, args...)}
}

// Base is a full snapshot of the series.
type Base struct {
	Key      string `json:"key"`
	Revision int64  `json:"revision"`
	// Time is when its backup began, as its name says (to the second).
	Time time.Time `json:"time"`
}

// Target is what a restore asks for: a revision, or a time whose last archived revision to
// take. Exactly one is set.
type Target struct {
	Revision int64
	Time     *time.Time
}

// Validate refuses a target that asks for neither or both.
func (t Target) Validate() error {
	switch {
	case t.Time != nil && t.Revision != 0:
		return fmt.Errorf("a point in time is a revision or a time, not both (revision %d, time %s)", t.Revision, t.Time.Format(time.RFC3339))
	case t.Time == nil && t.Revision < 1:
		return fmt.Errorf("a point in time needs a revision of 1 or more, or a time (revision %d)", t.Revision)
	}
	return nil
}

// Range is revisions a lineage can materialize: First (its oldest usable base) through Last,
// every one archived; by time from FirstSeen (when the revision after First was seen) through
// LastSeen.
type Range struct {
	Lineage             string
	First, Last         int64
	FirstSeen, LastSeen time.Time
}

func (r Range) String() string {
	return fmt.Sprintf("revisions %d-%d of lineage %s (seen %s to %s)", r.First, r.Last, r.Lineage,
		r.FirstSeen.UTC().Format(time.RFC3339), r.LastSeen.UTC().Format(time.RFC3339))
}

// Plan is a base and the segments to replay on it, in order, up to Revision.
type Plan struct {
	Base     Base          `json:"base"`
	Lineage  string        `json:"lineage"`
	Segments []SegmentInfo `json:"segments"`
	Revision int64         `json:"revision"`
}

// chain is a lineage's segments that hold every revision from first through last; start is
// the lineage's lineage.json, if it was read.
type chain struct {
	segs        []SegmentInfo
	first, last int64
	start       Lineage
	known       bool
}

func (c chain) lineage() string      { return c.segs[0].Lineage }
func (c chain) lastSeen() time.Time  { return c.segs[len(c.segs)-1].LastSeen }
func (c chain) holds(rev int64) bool { return c.first <= rev && rev <= c.last }

// holding is the segment of c that holds rev, which c holds.
func (c chain) holding(rev int64) SegmentInfo {
	i, _ := slices.BinarySearchFunc(c.segs, rev, func(s SegmentInfo, rev int64) int { return cmp.Compare(s.Last, rev) })
	return c.segs[i]
}

// chains splits each lineage's segments where a revision is missing. A segment another already
// covers is left out (an archiver that crashed after an upload may write its revisions again,
// split otherwise); one that overlaps the chain's end extends it, the replay skipping what it
// has applied.
func chains(segs []SegmentInfo, lineages map[string]Lineage) []chain {
	sorted := slices.Clone(segs)
	slices.SortFunc(sorted, func(a, b SegmentInfo) int {
		return cmp.Or(strings.Compare(a.Lineage, b.Lineage), cmp.Compare(a.First, b.First), cmp.Compare(b.Last, a.Last))
	})
	var out []chain
	for _, s := range sorted {
		if s.Last < s.First {
			continue
		}
		if n := len(out); n > 0 && out[n-1].lineage() == s.Lineage && s.First <= out[n-1].last+1 {
			if s.Last > out[n-1].last {
				out[n-1].segs = append(out[n-1].segs, s)
				out[n-1].last = s.Last
			}
			continue
		}
		start, known := lineages[s.Lineage]
		out = append(out, chain{segs: []SegmentInfo{s}, first: s.First, last: s.Last, start: start, known: known})
	}
	return out
}

// usableFor says whether b can start a replay on c: c holds the revision after b's, and b is
// of c's history. The lineage's own base is. Another snapshot is only if its backup began
// after the lineage started, and no later than the revision after it was seen: a backup reads
// its revision after it begins, so the next revision of its history is made after that. An
// older snapshot of an earlier history fails the first, a later one of a newer history
// numbered alike the second. One begun in the moment between the lineage's base and its start
// is left out with them: a base to spare, never a wrong one.
func usableFor(b Base, c chain) bool {
	next := b.Revision + 1
	if !c.known || !c.holds(next) {
		return false
	}
	if b.Key == c.start.BaseKey {
		return true
	}
	return !b.Time.Before(c.start.Started.Truncate(time.Second)) && !c.holding(next).LastSeen.Before(b.Time)
}

// newestBase is the newest of bases usable for c at or before target.
func newestBase(bases []Base, c chain, target int64) (Base, bool) {
	var best Base
	found := false
	for _, b := range bases {
		if b.Revision > target || !usableFor(b, c) {
			continue
		}
		if !found || b.Revision > best.Revision || (b.Revision == best.Revision && b.Time.After(best.Time)) {
			best, found = b, true
		}
	}
	return best, found
}

// oldestBase is the oldest of bases usable for c.
func oldestBase(bases []Base, c chain) (Base, bool) {
	var oldest Base
	found := false
	for _, b := range bases {
		if usableFor(b, c) && (!found || b.Revision < oldest.Revision) {
			oldest, found = b, true
		}
	}
	return oldest, found
}

// Recoverable is what the archive can materialize: per lineage, and per run of it without a
// missing revision, from its oldest usable base through its last segment; newest last.
// lineages are the lineages' lineage.json: one not there has no usable base.
func Recoverable(bases []Base, segs []SegmentInfo, lineages map[string]Lineage) []Range {
	out := recoverable(bases, chains(segs, lineages))
	for _, only := range baseOnly(bases, segs, lineages) {
		out = append(out, Range{Lineage: only.Lineage, First: only.Base.Revision, Last: only.Base.Revision, FirstSeen: only.started, LastSeen: only.started})
	}
	slices.SortFunc(out, func(a, b Range) int { return cmp.Or(a.LastSeen.Compare(b.LastSeen), cmp.Compare(a.Last, b.Last)) })
	return out
}

// startedLineage is a lineage that has archived no revision yet, and the snapshot it starts
// from.
type startedLineage struct {
	Lineage string
	Base    Base
	started time.Time
}

// baseOnly are the lineages that have written no segment yet but whose base is still there: a
// lineage just started, or on a cluster no one has written to since. Their base's revision is
// recoverable, from the base alone.
func baseOnly(bases []Base, segs []SegmentInfo, lineages map[string]Lineage) []startedLineage {
	var out []startedLineage
	for name, l := range lineages {
		if slices.ContainsFunc(segs, func(s SegmentInfo) bool { return s.Lineage == name }) {
			continue
		}
		i := slices.IndexFunc(bases, func(b Base) bool { return b.Key == l.BaseKey })
		if i < 0 {
			continue
		}
		out = append(out, startedLineage{Lineage: name, Base: bases[i], started: l.Started})
	}
	return out
}

func recoverable(bases []Base, cs []chain) []Range {
	var out []Range
	for _, c := range cs {
		b, ok := oldestBase(bases, c)
		if !ok {
			continue
		}
		out = append(out, Range{Lineage: c.lineage(), First: b.Revision, Last: c.last, FirstSeen: c.holding(b.Revision + 1).FirstSeen, LastSeen: c.lastSeen()})
	}
	slices.SortFunc(out, func(a, b Range) int { return cmp.Or(a.LastSeen.Compare(b.LastSeen), cmp.Compare(a.Last, b.Last)) })
	return out
}

// PlanTo plans the materialization of revision target: the newest base at or before it within
// one lineage whose segments hold every revision after the base through it. Should two
// lineages (two histories numbered alike) both hold it, the one archived last is taken, the
// history the cluster has had since. Anything else is refused, naming the gap or the ranges.
// lineages are the lineages' lineage.json, as for Recoverable.
func PlanTo(bases []Base, segs []SegmentInfo, lineages map[string]Lineage, target int64) (Plan, error) {
	cs := chains(segs, lineages)
	var plan Plan
	var plannedSeen time.Time // when the planned lineage was last archived to
	for _, c := range cs {
		if target < c.first-1 || target > c.last {
			continue
		}
		b, ok := newestBase(bases, c, target)
		if !ok || (plan.Lineage != "" && !c.lastSeen().After(plannedSeen)) {
			continue
		}
		plan, plannedSeen = Plan{Base: b, Lineage: c.lineage(), Segments: replayed(c, b.Revision, target), Revision: target}, c.lastSeen()
	}
	for _, only := range baseOnly(bases, segs, lineages) {
		if only.Base.Revision == target && (plan.Lineage == "" || only.started.After(plannedSeen)) {
			plan, plannedSeen = Plan{Base: only.Base, Lineage: only.Lineage, Revision: target}, only.started
		}
	}
	if plan.Lineage == "" {
		return Plan{}, refusal(bases, segs, lineages, cs, target)
	}
	return plan, nil
}

// replayed are the segments of c that hold revisions after base through target.
func replayed(c chain, base, target int64) []SegmentInfo {
	var out []SegmentInfo
	for _, s := range c.segs {
		if max(s.First, base+1) <= min(s.Last, target) {
			out = append(out, s)
		}
	}
	return out
}

// refusal says why no plan reaches target, and what the archive can materialize instead.
func refusal(bases []Base, segs []SegmentInfo, lineages map[string]Lineage, cs []chain, target int64) error {
	ranges := Recoverable(bases, segs, lineages)
	reason := whyNot(bases, cs, target)
	if len(ranges) == 0 {
		return refuse("revision %d cannot be materialized: %s; the archive can materialize no revision", target, reason)
	}
	can := make([]string, len(ranges))
	for i, r := range ranges {
		can[i] = r.String()
	}
	return refuse("revision %d cannot be materialized: %s; the archive can materialize %s", target, reason, strings.Join(can, ", "))
}

// whyNot names what keeps target from every plan: the archive ends before it, starts after it,
// misses revisions around it, or has no base before it where it holds it.
func whyNot(bases []Base, cs []chain, target int64) string {
	if len(cs) == 0 {
		return "the archive holds no revision"
	}
	var newest, oldest chain
	for i, c := range cs {
		if i == 0 || c.last > newest.last {
			newest = c
		}
		if i == 0 || c.first < oldest.first {
			oldest = c
		}
		if c.holds(target) || c.first-1 == target {
			return noBaseIn(bases, c)
		}
	}
	switch {
	case target > newest.last:
		return fmt.Sprintf("it is past the archive, whose newest revision is %d (lineage %s)", newest.last, newest.lineage())
	case target < oldest.first-1:
		return fmt.Sprintf("it is before the archive, whose oldest revision is %d (lineage %s)", oldest.first, oldest.lineage())
	}
	before, after := around(cs, target)
	return fmt.Sprintf("it falls in a gap of the archive: revisions %d-%d are missing (lineage %s ends at %d, lineage %s resumes at %d)",
		before.last+1, after.first-1, before.lineage(), before.last, after.lineage(), after.first)
}

// noBaseIn says why c, which holds the target or the revision after it, has no base for it.
func noBaseIn(bases []Base, c chain) string {
	if !c.known {
		return fmt.Sprintf("the lineage.json of lineage %s, which holds it, was not read: no full snapshot is known to start it", c.lineage())
	}
	if b, ok := oldestBase(bases, c); ok {
		return fmt.Sprintf("it is before the oldest full snapshot lineage %s can start from there (%s, revision %d)", c.lineage(), b.Key, b.Revision)
	}
	return fmt.Sprintf("no full snapshot of this history is left to start revisions %d-%d of lineage %s from", c.first, c.last, c.lineage())
}

// around are the chains ending last before target and starting first after it: target falls
// between chains, neither held by one nor a base's revision for one.
func around(cs []chain, target int64) (before, after chain) {
	foundBefore, foundAfter := false, false
	for _, c := range cs {
		if c.last < target && (!foundBefore || c.last > before.last) {
			before, foundBefore = c, true
		}
		if c.first-1 > target && (!foundAfter || c.first < after.first) {
			after, foundAfter = c, true
		}
	}
	return before, after
}

// RevisionAt is the last revision the archive saw at or before t, and its lineage: the one in
// whose segments t falls. Only the segment whose seen times bracket t is read (open returns its
// plaintext); between two segments the listing answers, and after the last of a run the
// lineage's watermark (read by watermark) must show that the cluster had made no revision
// since by t. A time before the archive, past what it has seen, or in a gap of it, is refused.
func RevisionAt(segs []SegmentInfo, t time.Time, open func(SegmentInfo) (io.ReadCloser, error), watermark func(lineage string) (Watermark, error)) (string, int64, error) {
	look, err := lookUpTime(chains(segs, nil), t)
	if err != nil {
		return "", 0, err
	}
	switch {
	case look.read != nil:
		rev, err := lastSeenBy(*look.read, t, open)
		return look.lineage, rev, err
	case look.unlessPast == nil:
		return look.lineage, look.revision, nil
	}
	last := *look.unlessPast
	wm, err := watermark(last.Lineage)
	if err != nil {
		return "", 0, fmt.Errorf("the watermark of lineage %s: %w", last.Lineage, err)
	}
	if wm.HighestRevision > last.Last || wm.Time.Before(t) {
		return "", 0, pastTheArchive(t, last, wm, look.next)
	}
	return last.Lineage, last.Last, nil
}

// pastTheArchive refuses t, after the last segment of a run of lineage last whose watermark
// does not show that nothing came after by t.
func pastTheArchive(t time.Time, last SegmentInfo, wm Watermark, next *SegmentInfo) error {
	reason := fmt.Sprintf("%s is past what the archive has seen of lineage %s: its revision %d was seen at %s, and when the archiver last looked, at %s, the cluster was at revision %d",
		stamp(t), last.Lineage, last.Last, stamp(last.LastSeen), stamp(wm.Time), wm.HighestRevision)
	if next != nil {
		reason += fmt.Sprintf("; the archive resumes with revision %d of lineage %s, seen at %s", next.First, next.Lineage, stamp(next.FirstSeen))
	}
	return &Unrecoverable{Reason: reason}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// timeLookup is what the listing says of a time: its revision, or the segment to read for it,
// or the last segment of a run before it, whose last revision is the answer unless the cluster
// had gone past it by then (next: what the archive resumes with, if anything).
type timeLookup struct {
	lineage          string
	revision         int64
	read             *SegmentInfo
	unlessPast, next *SegmentInfo
}

// lookUpTime decides, from the listing alone, where t's revision is.
func lookUpTime(cs []chain, t time.Time) (timeLookup, error) {
	var prev, next *SegmentInfo
	var prevChain chain
	for _, c := range cs {
		for i := range c.segs {
			s := &c.segs[i]
			if !s.FirstSeen.After(t) && !s.LastSeen.Before(t) {
				return timeLookup{lineage: s.Lineage, read: s}, nil
			}
			if s.LastSeen.Before(t) && (prev == nil || s.LastSeen.After(prev.LastSeen)) {
				prev, prevChain = s, c
			}
			if s.FirstSeen.After(t) && (next == nil || s.FirstSeen.Before(next.FirstSeen)) {
				next = s
			}
		}
	}
	switch {
	case prev == nil && next == nil:
		return timeLookup{}, refuse("%s cannot be materialized: the archive holds no revision", stamp(t))
	case prev == nil:
		return timeLookup{}, refuse("%s is before the archive: its first revision, %d of lineage %s, was seen at %s", stamp(t), next.First, next.Lineage, stamp(next.FirstSeen))
	case next != nil && next.Lineage == prev.Lineage && next.First <= prev.Last+1 && next.Last > prev.Last:
		// The revision after prev's last was seen after t: nothing came between.
		return timeLookup{lineage: prev.Lineage, revision: prev.Last}, nil
	case prev.Last == prevChain.last && (next == nil || next.Lineage != prev.Lineage):
		return timeLookup{lineage: prev.Lineage, unlessPast: prev, next: next}, nil
	}
	return timeLookup{}, refuse("%s falls in a gap of the archive: revision %d of lineage %s was seen at %s, and the archive resumes with revision %d of lineage %s, seen at %s",
		stamp(t), prev.Last, prev.Lineage, stamp(prev.LastSeen), next.First, next.Lineage, stamp(next.FirstSeen))
}

// lastSeenBy reads s for its last revision seen at or before t.
func lastSeenBy(s SegmentInfo, t time.Time, open func(SegmentInfo) (io.ReadCloser, error)) (int64, error) {
	seg, err := readSegment(s, open)
	if err != nil {
		return 0, err
	}
	var rev int64
	for _, r := range seg.Records {
		if r.Seen.After(t) {
			break
		}
		rev = r.Revision.Revision
	}
	if rev == 0 {
		return 0, refuse("segment %s was listed as first seen at %s, but its records were all seen after %s", s.Key, stamp(s.FirstSeen), stamp(t))
	}
	return rev, nil
}

// readSegment opens and decodes s.
func readSegment(s SegmentInfo, open func(SegmentInfo) (io.ReadCloser, error)) (Segment, error) {
	r, err := open(s)
	if err != nil {
		return Segment{}, err
	}
	seg, err := Decode(r)
	if closeErr := r.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return Segment{}, fmt.Errorf("segment %s: %w", s.Key, err)
	}
	return seg, nil
}
