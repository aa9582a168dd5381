package archive

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// The metadata a segment is stored with, so that a listing tells what it holds without
// reading it.
const (
	MetadataFirstRevision = "first-revision"
	MetadataLastRevision  = "last-revision"
	MetadataFirstSeen     = "first-seen"
	MetadataLastSeen      = "last-seen"
	MetadataRecords       = "records"
)

// Metadata is what s is stored with; keyID names the encryption key it is encrypted to, empty
// for a plain segment.
func Metadata(s Segment, keyID string) map[string]string {
	m := map[string]string{
		MetadataFirstRevision: strconv.FormatInt(s.First(), 10),
		MetadataLastRevision:  strconv.FormatInt(s.Last(), 10),
		MetadataRecords:       strconv.Itoa(len(s.Records)),
	}
	if len(s.Records) > 0 {
		m[MetadataFirstSeen] = s.Records[0].Seen.UTC().Format(time.RFC3339Nano)
		m[MetadataLastSeen] = s.Records[len(s.Records)-1].Seen.UTC().Format(time.RFC3339Nano)
	}
	if keyID != "" {
		m[encryption.MetadataKeyID] = keyID
	}
	return m
}

// SegmentInfo is what a listing (storage.List and each object's metadata) tells of a segment.
type SegmentInfo struct {
	Key, Lineage string
	First, Last  int64
	// FirstSeen and LastSeen are when the archiver received the first and last revision; zero
	// when the object's metadata lacks them.
	FirstSeen, LastSeen time.Time
	// KeyID is the encryption key the segment is encrypted to; empty for a plain segment.
	KeyID     string
	SizeBytes int64
}

// metadataReaders is how many segments' metadata ListSegments asks for at once: a request
// each, which one after the other would make a month of five-minute segments a long listing.
const metadataReaders = 8

// ListSegments lists the segments of every lineage under the series directory dir, by lineage
// then first revision.
func ListSegments(ctx context.Context, d *storage.Destination, dir string) ([]SegmentInfo, error) {
	return ListSegmentsKnowing(ctx, d, dir, nil)
}

// ListSegmentsKnowing is ListSegments reading the metadata only of the segments known does not
// hold (by key): a segment never changes once written, and a long-running lister would
// otherwise ask for every segment's metadata again at each listing.
func ListSegmentsKnowing(ctx context.Context, d *storage.Destination, dir string, known map[string]SegmentInfo) ([]SegmentInfo, error) {
	objects, err := d.List(ctx, ArchiveDir(dir))
	if err != nil {
		return nil, err
	}
	var segs, unknown []SegmentInfo
	for _, o := range objects {
		lineage, first, last, ok := ParseSegmentKey(dir, o.Key)
		switch seg, isKnown := known[o.Key]; {
		case !ok:
		case isKnown:
			segs = append(segs, seg)
		default:
			unknown = append(unknown, SegmentInfo{Key: o.Key, Lineage: lineage, First: first, Last: last, SizeBytes: o.SizeBytes})
		}
	}
	unknown, err = withMetadata(ctx, d, unknown)
	if err != nil {
		return nil, err
	}
	segs = append(segs, unknown...)
	slices.SortFunc(segs, func(a, b SegmentInfo) int {
		if c := strings.Compare(a.Lineage, b.Lineage); c != 0 {
			return c
		}
		return cmp.Compare(a.First, b.First)
	})
	return segs, nil
}

// withMetadata is segs with their times and key id from their metadata, less those deleted
// since the listing (pruned meanwhile).
func withMetadata(ctx context.Context, d *storage.Destination, segs []SegmentInfo) ([]SegmentInfo, error) {
	errs := make([]error, len(segs))
	gone := make([]bool, len(segs))
	readers := make(chan struct{}, metadataReaders)
	var wg sync.WaitGroup
	for i := range segs {
		readers <- struct{}{}
		wg.Go(func() {
			defer func() { <-readers }()
			gone[i], errs[i] = readMetadataOf(ctx, d, &segs[i])
		})
	}
	wg.Wait()
	var kept []SegmentInfo
	for i, seg := range segs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if !gone[i] {
			kept = append(kept, seg)
		}
	}
	return kept, nil
}

// readMetadataOf fills in seg's times and key id; gone when it no longer exists.
func readMetadataOf(ctx context.Context, d *storage.Destination, seg *SegmentInfo) (gone bool, err error) {
	m, err := d.Metadata(ctx, seg.Key)
	if storage.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	seg.FirstSeen = parseTime(m[MetadataFirstSeen])
	seg.LastSeen = parseTime(m[MetadataLastSeen])
	seg.KeyID = m[encryption.MetadataKeyID]
	return false, nil
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// ListLineages lists the lineages under dir that have a lineage.json.
func ListLineages(ctx context.Context, d *storage.Destination, dir string) ([]string, error) {
	objects, err := d.List(ctx, ArchiveDir(dir))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, o := range objects {
		rest, _ := strings.CutPrefix(o.Key, ArchiveDir(dir))
		if lineage, file, ok := strings.Cut(rest, "/"); ok && file == lineageFile {
			names = append(names, lineage)
		}
	}
	slices.Sort(names)
	return names, nil
}

// ReadLineage reads lineage.json of lineage; storage.IsNotFound when it has none.
func ReadLineage(ctx context.Context, d *storage.Destination, dir, lineage string) (Lineage, error) {
	var l Lineage
	return l, readJSON(ctx, d, LineageDir(dir, lineage)+lineageFile, &l)
}

// WriteLineage writes lineage.json of lineage.
func WriteLineage(ctx context.Context, d *storage.Destination, dir, lineage string, l Lineage) error {
	return writeJSON(ctx, d, LineageDir(dir, lineage)+lineageFile, l)
}

// ReadWatermark reads watermark.json of lineage; storage.IsNotFound when it has none.
func ReadWatermark(ctx context.Context, d *storage.Destination, dir, lineage string) (Watermark, error) {
	var w Watermark
	return w, readJSON(ctx, d, LineageDir(dir, lineage)+watermarkFile, &w)
}

// WriteWatermark rewrites watermark.json of lineage.
func WriteWatermark(ctx context.Context, d *storage.Destination, dir, lineage string, w Watermark) error {
	return writeJSON(ctx, d, LineageDir(dir, lineage)+watermarkFile, w)
}

// SeriesWatermarkKey is where the series stored under dir records the highest revision its
// cluster had served when its newest snapshot was stored: beside the snapshots, so that a
// restore from any of them, with or without the operator that wrote them, knows how far clients
// may have seen.
func SeriesWatermarkKey(dir string) string { return dir + watermarkFile }

// RaiseSeriesWatermark records w as the series' watermark unless the one stored is as high:
// revisions only grow, and a restore in place (which bumps them) is followed by higher ones.
func RaiseSeriesWatermark(ctx context.Context, d JSONStore, dir string, w Watermark) error {
	var stored Watermark
	err := readJSON(ctx, d, SeriesWatermarkKey(dir), &stored)
	if err != nil && !storage.IsNotFound(err) {
		return err
	}
	if err == nil && stored.HighestRevision >= w.HighestRevision {
		return nil
	}
	return writeJSON(ctx, d, SeriesWatermarkKey(dir), w)
}

// HighestServed is the highest revision any watermark of the series stored under dir records:
// the series' own, raised after each snapshot, and each archive lineage's, rewritten after each
// segment. found is false when the store holds none (snapshots written before watermarks were,
// or a series whose objects were copied without them).
func HighestServed(ctx context.Context, d *storage.Destination, dir string) (w Watermark, found bool, err error) {
	keys := []string{SeriesWatermarkKey(dir)}
	lineages, err := ListLineages(ctx, d, dir)
	if err != nil {
		return Watermark{}, false, err
	}
	for _, lineage := range lineages {
		keys = append(keys, LineageDir(dir, lineage)+watermarkFile)
	}
	for _, key := range keys {
		var one Watermark
		switch err := readJSON(ctx, d, key, &one); {
		case storage.IsNotFound(err):
			continue
		case err != nil:
			return Watermark{}, false, err
		}
		if !found || one.HighestRevision > w.HighestRevision {
			w, found = one, true
		}
	}
	return w, found, nil
}

// JSONStore is what reading and writing a record needs of a destination.
type JSONStore interface {
	URI(key string) string
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	Upload(ctx context.Context, key string, r io.Reader) error
}

func readJSON(ctx context.Context, d JSONStore, key string, v any) error {
	r, err := d.Open(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := json.NewDecoder(r).Decode(v); err != nil {
		return fmt.Errorf("read %s: %w", d.URI(key), err)
	}
	return nil
}

func writeJSON(ctx context.Context, d JSONStore, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return d.Upload(ctx, key, bytes.NewReader(b))
}
