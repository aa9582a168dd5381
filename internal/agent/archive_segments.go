package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// writeSegment writes the pending revisions as one segment, verified, and the lineage's
// watermark after it. It tries again until the segment is written or ctx ends: the revisions
// exist nowhere else the archiver could read them from once compacted.
func (a *Archiver) writeSegment(ctx context.Context) error {
	seg := archive.Segment{Records: a.lin.pending, LeaseTTL: a.lin.leases.current}
	key := archive.SegmentKey(a.dir, a.lin.name, seg.First(), seg.Last())
	var keyID string
	if a.cfg.Keys != nil {
		keyID = a.cfg.Keys.Newest().ID
	}
	var size int64
	for {
		var err error
		if size, err = uploadSegment(ctx, a.cfg.Destination, key, seg, a.cfg.Keys, archive.Metadata(seg, keyID)); err == nil {
			break
		}
		a.status.failed(err)
		a.cfg.Log.Error("write a segment", "segment", key, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(archiveRetryDelay):
		}
	}
	a.lin.written = seg.Last()
	a.lin.pending, a.lin.pendingBytes = nil, 0
	a.lin.leases.next()
	last := seg.Records[len(seg.Records)-1].Seen
	a.listing.segments[key] = archive.SegmentInfo{Key: key, Lineage: a.lin.name, First: seg.First(), Last: seg.Last(),
		FirstSeen: seg.Records[0].Seen, LastSeen: last, KeyID: keyID, SizeBytes: size}
	a.status.segmentWritten(seg.Last(), a.listing.ranges())
	a.cfg.Log.Info("wrote a segment", "segment", key, "records", len(seg.Records), "bytes", size)
	a.writeWatermark(ctx)
	return nil
}

// writeWatermark records how far the cluster had gone when the segment was written: a time
// past the last segment is restorable only while the watermark shows no revision came since.
// A watermark left behind only makes such times refused, so its failure is reported, not
// retried.
func (a *Archiver) writeWatermark(ctx context.Context) {
	w := archive.Watermark{HighestRevision: a.status.highest(), Time: a.cfg.Now()}
	if err := archive.WriteWatermark(ctx, a.cfg.Destination, a.dir, a.lin.name, w); err != nil {
		a.status.failed(err)
		a.cfg.Log.Error("write the watermark", "lineage", a.lin.name, "err", err)
	}
}

// uploadSegment streams seg, encoded (and encrypted to keys' newest key when set), to key
// whole, hashing what it sends; then reads back what the destination holds: a copy that
// differs is deleted, and the upload fails. Streaming keeps no second copy of the segment in
// memory beside its records. It returns the size stored.
func uploadSegment(ctx context.Context, d *storage.Destination, key string, seg archive.Segment, keys *encryption.Keyring, metadata map[string]string) (int64, error) {
	pr, pw := io.Pipe()
	sent := newDigest(pw)
	encoded := make(chan error, 1)
	go func() {
		err := encodeSegment(sent, seg, keys)
		encoded <- err
		_ = pw.CloseWithError(err) // an error here fails the upload, which aborts it
	}()
	uploadErr := d.UploadWithMetadata(ctx, key, pr, metadata)
	_ = pr.CloseWithError(errors.New("upload ended")) // unblocks the encoder if the upload failed
	if err := errors.Join(uploadErr, <-encoded); err != nil {
		return 0, err
	}
	stored, err := d.Verify(ctx, key)
	if err != nil {
		return 0, err
	}
	if sentBytes, sentSHA256 := sent.sum(); stored.SHA256 != sentSHA256 || stored.SizeBytes != sentBytes {
		_ = d.Delete(ctx, key)
		return 0, fmt.Errorf("%s holds %d bytes (sha256 %s) but %d bytes (sha256 %s) were sent; deleted it",
			d.URI(key), stored.SizeBytes, stored.SHA256, sentBytes, sentSHA256)
	}
	return stored.SizeBytes, nil
}

// encodeSegment writes seg into w, through age to keys' newest key when keys is set.
func encodeSegment(w io.Writer, seg archive.Segment, keys *encryption.Keyring) error {
	if keys == nil {
		return archive.Encode(w, seg)
	}
	encrypted, _, err := keys.Encrypt(w)
	if err != nil {
		return err
	}
	if err := archive.Encode(encrypted, seg); err != nil {
		return err
	}
	// The last chunk, with its end marker: without it the segment would not decrypt.
	return encrypted.Close()
}

// seriesListing is the series as last listed, kept up to date with what the archiver writes
// between listings.
type seriesListing struct {
	bases    []archive.Base
	segments map[string]archive.SegmentInfo
	lineages map[string]archive.Lineage
}

// list lists the series: its snapshots, its segments (asking for the metadata only of those
// not known yet) and its lineages (reading only the lineage.json not read yet: written once).
func (a *Archiver) list(ctx context.Context) error {
	d := a.cfg.Destination
	objects, err := d.List(ctx, a.dir)
	if err != nil {
		return err
	}
	keys := make([]string, len(objects))
	for i, o := range objects {
		keys[i] = o.Key
	}
	segs, err := archive.ListSegmentsKnowing(ctx, d, a.dir, a.listing.segments)
	if err != nil {
		return err
	}
	names, err := archive.ListLineages(ctx, d, a.dir)
	if err != nil {
		return err
	}
	lineages := map[string]archive.Lineage{}
	for _, name := range names {
		l, ok := a.listing.lineages[name]
		if !ok {
			if l, err = archive.ReadLineage(ctx, d, a.dir, name); err != nil {
				return err
			}
		}
		lineages[name] = l
	}
	a.listing = seriesListing{bases: seriesBases(d.Prefix(), a.cfg.Series, keys), segments: map[string]archive.SegmentInfo{}, lineages: lineages}
	for _, s := range segs {
		a.listing.segments[s.Key] = s
	}
	return nil
}

func (l seriesListing) segmentList() []archive.SegmentInfo {
	out := make([]archive.SegmentInfo, 0, len(l.segments))
	for _, s := range l.segments {
		out = append(out, s)
	}
	return out
}

// ranges are what the archive can materialize, as status reports them.
func (l seriesListing) ranges() []ArchiveRange {
	var out []ArchiveRange
	for _, r := range archive.Recoverable(l.bases, l.segmentList(), l.lineages) {
		out = append(out, ArchiveRange{Lineage: r.Lineage, First: ArchivePoint{Revision: r.First, Time: r.FirstSeen}, Last: ArchivePoint{Revision: r.Last, Time: r.LastSeen}})
	}
	return out
}

// newestLineage is the lineage started last.
func (l seriesListing) newestLineage() (namedLineage, bool) {
	var newest namedLineage
	for name, rec := range l.lineages {
		if newest.name == "" || rec.Started.After(newest.Started) {
			newest = namedLineage{name: name, Lineage: rec}
		}
	}
	return newest, newest.name != ""
}

// lastRevision is the last revision written to lineage l: its base's, before any segment.
func (l seriesListing) lastRevision(n namedLineage) int64 {
	last := n.Base
	for _, s := range l.segments {
		if s.Lineage == n.name {
			last = max(last, s.Last)
		}
	}
	return last
}

// housekeep lists the series again, deletes the segments no base can use, and reports what
// the archive can materialize. Its failures are reported and left for the next time.
func (a *Archiver) housekeep(ctx context.Context) {
	a.lastHousekept = a.cfg.Now()
	if err := a.list(ctx); err != nil {
		a.status.failed(err)
		a.cfg.Log.Error("list the series", "err", err)
		return
	}
	segs := a.listing.segmentList()
	doomed := prunable(segs, archive.Recoverable(a.listing.bases, segs, a.listing.lineages), a.lin.name)
	for _, s := range doomed {
		if err := a.cfg.Destination.Delete(ctx, s.Key); err != nil {
			a.status.failed(err)
			a.cfg.Log.Error("delete a segment no base can use", "segment", s.Key, "err", err)
			return
		}
		delete(a.listing.segments, s.Key)
		a.cfg.Log.Info("deleted a segment no base can use", "segment", s.Key)
	}
	for _, name := range emptyLineages(a.listing, a.lin.name) {
		a.deleteLineage(ctx, name)
	}
	a.status.rangesChanged(a.listing.ranges())
}

// prunable are the segments no base can use: those holding only revisions at or before the
// oldest snapshot their lineage can start from (the start of its range), and those of a
// lineage left without any snapshot to start from. The lineage being written keeps its
// segments while it has no range: a snapshot taken after it started will make them usable.
func prunable(segs []archive.SegmentInfo, ranges []archive.Range, current string) []archive.SegmentInfo {
	var out []archive.SegmentInfo
	for _, s := range segs {
		inRange := slices.ContainsFunc(ranges, func(r archive.Range) bool {
			return r.Lineage == s.Lineage && s.Last > r.First && s.First <= r.Last
		})
		hasRange := slices.ContainsFunc(ranges, func(r archive.Range) bool { return r.Lineage == s.Lineage })
		if !inRange && (s.Lineage != current || hasRange) {
			out = append(out, s)
		}
	}
	return out
}

// emptyLineages are the lineages other than current left without a segment, whose records
// say nothing any more.
func emptyLineages(l seriesListing, current string) []string {
	written := map[string]bool{}
	for _, s := range l.segments {
		written[s.Lineage] = true
	}
	var out []string
	for name := range l.lineages {
		if name != current && !written[name] {
			out = append(out, name)
		}
	}
	return out
}

// deleteLineage deletes the records of a lineage without segments.
func (a *Archiver) deleteLineage(ctx context.Context, name string) {
	dir := archive.LineageDir(a.dir, name)
	objects, err := a.cfg.Destination.List(ctx, dir)
	if err != nil {
		a.cfg.Log.Error("list a lineage without segments", "lineage", name, "err", err)
		return
	}
	for _, o := range objects {
		if err := a.cfg.Destination.Delete(ctx, o.Key); err != nil {
			a.cfg.Log.Error("delete a lineage without segments", "lineage", name, "err", err)
			return
		}
	}
	delete(a.listing.lineages, name)
	a.cfg.Log.Info("deleted a lineage without segments", "lineage", name)
}
