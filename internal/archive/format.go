// Package archive is the continuous archive of a backup series: segments of revisions written
// beside its full snapshots, from which any revision after a snapshot can be rebuilt.
package archive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-database/etcd-operator/internal/etcd"
)

// Record is one revision as the archiver received it.
type Record struct {
	etcd.Revision
	// Seen is when the archiver received it.
	Seen time.Time
}

// Segment is a run of consecutive revisions; LeaseTTL holds the granted TTL of every lease its
// puts name, 0 when unknown: the lease was gone when the archiver asked (revoked or expired
// since), and a replay grants it a minute (see etcd.Replayer.Apply).
type Segment struct {
	Records  []Record
	LeaseTTL map[int64]int64
}

// First is the segment's first revision; 0 for an empty segment.
func (s Segment) First() int64 {
	if len(s.Records) == 0 {
		return 0
	}
	return s.Records[0].Revision.Revision
}

// Last is the segment's last revision; 0 for an empty segment.
func (s Segment) Last() int64 {
	if len(s.Records) == 0 {
		return 0
	}
	return s.Records[len(s.Records)-1].Revision.Revision
}

// A segment as stored:
//
//	magic | gzip( body ) | sha256 of everything before it
//
// The body is uvarint-framed: the lease count, then per lease its id and TTL (varints); the
// record count, then per record its revision and Seen (Unix nanoseconds, varints) and its
// event count, then per event a flag byte, the key, and for a put the value, create revision,
// version and lease. An event's mod revision is its record's. The checksum covers the
// compressed bytes, so a segment cut short or changed is refused before anything of it is
// believed, whatever gzip would have made of it.
const (
	magic        = "etcdseg1"
	checksumSize = sha256.Size
	flagDelete   = 1
)

// compressionLevel is gzip's fastest: an archive must keep up with the cluster first, and
// BenchmarkEncode shows what the default level would cost for what it saves.
var compressionLevel = gzip.BestSpeed

// ErrCorrupt is a segment that is not what Encode wrote: truncated, changed, or not a segment.
var ErrCorrupt = errors.New("the segment is corrupt")

// Encode writes s compressed, framed, with a trailing checksum.
func Encode(w io.Writer, s Segment) error {
	sum := sha256.New()
	out := io.MultiWriter(w, sum)
	if _, err := io.WriteString(out, magic); err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(out, compressionLevel)
	if err != nil {
		return err
	}
	body := bufio.NewWriterSize(zw, 64<<10)
	e := encoder{w: body}
	e.leases(s.LeaseTTL)
	e.uvarint(uint64(len(s.Records)))
	for _, r := range s.Records {
		e.record(r)
	}
	if e.err != nil {
		return e.err
	}
	if err := body.Flush(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	_, err = w.Write(sum.Sum(nil))
	return err
}

// encoder writes the body, keeping the first error.
type encoder struct {
	w   *bufio.Writer
	buf [binary.MaxVarintLen64]byte
	err error
}

func (e *encoder) uvarint(v uint64) {
	if e.err == nil {
		_, e.err = e.w.Write(binary.AppendUvarint(e.buf[:0], v))
	}
}

func (e *encoder) varint(v int64) {
	if e.err == nil {
		_, e.err = e.w.Write(binary.AppendVarint(e.buf[:0], v))
	}
}

func (e *encoder) bytes(b []byte) {
	e.uvarint(uint64(len(b)))
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

// leases writes the lease TTLs in id order, so that a segment's bytes depend on it alone.
func (e *encoder) leases(ttl map[int64]int64) {
	ids := make([]int64, 0, len(ttl))
	for id := range ttl {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		e.varint(id)
		e.varint(ttl[id])
	}
}

func (e *encoder) record(r Record) {
	e.varint(r.Revision.Revision)
	e.varint(r.Seen.UnixNano())
	e.uvarint(uint64(len(r.Events)))
	for _, ev := range r.Events {
		if ev.Delete {
			e.uvarint(flagDelete)
			e.bytes(ev.Key)
			continue
		}
		e.uvarint(0)
		e.bytes(ev.Key)
		e.bytes(ev.Value)
		e.varint(ev.CreateRevision)
		e.varint(ev.Version)
		e.varint(ev.Lease)
	}
}

// recordOverhead bounds what a record adds to a segment besides its keys and values: its
// revision, time and event count, and per event a flag, two lengths and three varints.
const (
	recordOverhead = 3 * binary.MaxVarintLen64
	eventOverhead  = 1 + 5*binary.MaxVarintLen64
)

// Size is what r adds to a segment's body before compression: an upper bound of what it adds
// to the stored segment, which compression only makes smaller (or, for incompressible data,
// a few bytes per block larger).
func (r Record) Size() int {
	n := recordOverhead
	for _, ev := range r.Events {
		n += eventOverhead + len(ev.Key) + len(ev.Value)
	}
	return n
}

// Decode reads a segment Encode wrote, refusing one truncated or altered (ErrCorrupt). It
// reads the whole segment before believing any of it: the checksum is at its end.
func Decode(r io.Reader) (Segment, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return Segment{}, fmt.Errorf("read the segment: %w", err)
	}
	if len(raw) < len(magic)+checksumSize || string(raw[:len(magic)]) != magic {
		return Segment{}, fmt.Errorf("%w: %d bytes that do not begin as a segment does", ErrCorrupt, len(raw))
	}
	content, trailer := raw[:len(raw)-checksumSize], raw[len(raw)-checksumSize:]
	if sum := sha256.Sum256(content); !bytes.Equal(sum[:], trailer) {
		return Segment{}, fmt.Errorf("%w: its checksum does not match its %d bytes (cut short, or changed since it was written)", ErrCorrupt, len(raw))
	}
	zr, err := gzip.NewReader(bytes.NewReader(content[len(magic):]))
	if err != nil {
		return Segment{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	d := decoder{r: bufio.NewReaderSize(zr, 64<<10)}
	s := Segment{LeaseTTL: d.leases()}
	records := d.count()
	s.Records = make([]Record, 0, min(records, 1<<16))
	for i := 0; i < records && d.err == nil; i++ {
		s.Records = append(s.Records, d.record())
	}
	if d.err != nil {
		return Segment{}, fmt.Errorf("%w: %w", ErrCorrupt, d.err)
	}
	return s, nil
}

// decoder reads the body, keeping the first error.
type decoder struct {
	r   *bufio.Reader
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	d.err = err
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(d.r)
	d.err = err
	return v
}

// maxFieldBytes bounds a key or value's length as read, so that a length the checksum let
// through by a fault of its own cannot ask for an absurd allocation: etcd's own request limit
// is far below it.
const maxFieldBytes = 1 << 31

// count is a count or length, refused past maxFieldBytes.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > maxFieldBytes && d.err == nil {
		d.err = fmt.Errorf("a length of %d", n)
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	b := make([]byte, n)
	_, d.err = io.ReadFull(d.r, b)
	return b
}

func (d *decoder) leases() map[int64]int64 {
	n := d.count()
	ttl := make(map[int64]int64, min(n, 1<<16))
	for i := 0; i < n && d.err == nil; i++ {
		id := d.varint()
		ttl[id] = d.varint()
	}
	return ttl
}

func (d *decoder) record() Record {
	rev := d.varint()
	seen := d.varint()
	n := d.count()
	r := Record{Revision: etcd.Revision{Revision: rev, Events: make([]etcd.Event, 0, min(n, 1<<16))}, Seen: time.Unix(0, seen).UTC()}
	for i := 0; i < n && d.err == nil; i++ {
		r.Events = append(r.Events, d.event(rev))
	}
	return r
}

func (d *decoder) event(rev int64) etcd.Event {
	flags := d.uvarint()
	if flags&flagDelete != 0 {
		return etcd.Event{Delete: true, Key: d.bytes(), ModRevision: rev}
	}
	ev := etcd.Event{Key: d.bytes(), Value: d.bytes(), ModRevision: rev}
	ev.CreateRevision = d.varint()
	ev.Version = d.varint()
	ev.Lease = d.varint()
	return ev
}

// ArchiveDir is where the lineages of the series stored under dir (backupplan.Series.Dir) are.
func ArchiveDir(dir string) string { return dir + "archive/" }

// LineageDir is where lineage's segments and records are.
func LineageDir(dir, lineage string) string { return ArchiveDir(dir) + lineage + "/" }

const (
	segmentSuffix = ".seg"
	lineageFile   = "lineage.json"
	watermarkFile = "watermark.json"
)

// SegmentKey is where the segment of revisions first..last of lineage is stored. The
// revisions are zero-padded so that the keys of a lineage list in revision order.
func SegmentKey(dir, lineage string, first, last int64) string {
	return fmt.Sprintf("%s%020d-%020d%s", LineageDir(dir, lineage), first, last, segmentSuffix)
}

// ParseSegmentKey is SegmentKey's inverse; ok is false for any other key.
func ParseSegmentKey(dir, key string) (lineage string, first, last int64, ok bool) {
	rest, found := strings.CutPrefix(key, ArchiveDir(dir))
	if !found {
		return "", 0, 0, false
	}
	lineage, name, found := strings.Cut(rest, "/")
	if !found || lineage == "" {
		return "", 0, 0, false
	}
	revs, found := strings.CutSuffix(name, segmentSuffix)
	if !found {
		return "", 0, 0, false
	}
	a, b, found := strings.Cut(revs, "-")
	if !found || len(a) != 20 || len(b) != 20 {
		return "", 0, 0, false
	}
	first, errFirst := strconv.ParseInt(a, 10, 64)
	last, errLast := strconv.ParseInt(b, 10, 64)
	if errFirst != nil || errLast != nil || first < 1 || last < first {
		return "", 0, 0, false
	}
	return lineage, first, last, true
}

// LineageName names the lineage that starts from a full snapshot at base of cluster clusterID.
func LineageName(clusterID uint64, base int64) string {
	return fmt.Sprintf("%s-r%020d", etcd.FormatID(clusterID), base)
}

// Lineage is lineage.json: written once when a lineage starts.
type Lineage struct {
	ClusterID string `json:"clusterID"`
	// Base is the revision of the full snapshot BaseKey the lineage continues.
	Base    int64  `json:"base"`
	BaseKey string `json:"baseKey"`
	// RestoreMark is the archiver's, from its configuration: a lineage is continued only by
	// an archiver with the same mark.
	RestoreMark string    `json:"restoreMark"`
	Started     time.Time `json:"started"`
}

// Watermark is watermark.json: rewritten after every segment.
type Watermark struct {
	// HighestRevision is the highest revision the cluster had served, as etcd said.
	HighestRevision int64     `json:"highestRevision"`
	Time            time.Time `json:"time"`
}
