// Package archive is the continuous archive of a backup series: segments of revisions written
// beside its full snapshots, from which any revision after a snapshot can be rebuilt.
package archive

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

var errNotYet = errors.New("not implemented yet")

// Record is one revision as the archiver received it.
type Record struct {
	etcd.Revision
	// Seen is when the archiver received it.
	Seen time.Time
}

// Segment is a run of consecutive revisions; LeaseTTL holds the granted TTL of every lease its
// puts name (0: unknown, the lease was gone when the archiver asked).
type Segment struct {
	Records  []Record
	LeaseTTL map[int64]int64
}

// Encode writes s compressed, framed, with a trailing checksum.
func Encode(w io.Writer, s Segment) error { return errNotYet }

// Decode reads a segment Encode wrote, refusing one truncated or altered.
func Decode(r io.Reader) (Segment, error) { return Segment{}, errNotYet }

// SegmentKey is where the segment of revisions first..last of lineage is stored.
func SegmentKey(dir, lineage string, first, last int64) string { return "" }

// ParseSegmentKey is SegmentKey's inverse; ok is false for any other key.
func ParseSegmentKey(dir, key string) (lineage string, first, last int64, ok bool) {
	return "", 0, 0, false
}

// LineageName names the lineage that starts from a full snapshot at base of cluster clusterID.
func LineageName(clusterID uint64, base int64) string { return "" }

// Lineage is lineage.json: written once when a lineage starts.
type Lineage struct {
	ClusterID   string    `json:"clusterID"`
	Base        int64     `json:"base"`
	BaseKey     string    `json:"baseKey"`
	RestoreMark string    `json:"restoreMark"`
	Started     time.Time `json:"started"`
}

// Watermark is watermark.json: rewritten after every segment.
type Watermark struct {
	HighestRevision int64     `json:"highestRevision"`
	Time            time.Time `json:"time"`
}

// SegmentInfo is what a listing (storage.List and each object's metadata) tells of a segment.
type SegmentInfo struct {
	Key, Lineage        string
	First, Last         int64
	FirstSeen, LastSeen time.Time
	// KeyID is the encryption key the segment is encrypted to; empty for a plain segment.
	KeyID string
}

// ListSegments lists the segments of every lineage under the series directory dir.
func ListSegments(ctx context.Context, d *storage.Destination, dir string) ([]SegmentInfo, error) {
	return nil, errNotYet
}

// ReadLineage reads lineage.json of lineage.
func ReadLineage(ctx context.Context, d *storage.Destination, dir, lineage string) (Lineage, error) {
	return Lineage{}, errNotYet
}

// WriteLineage writes lineage.json of lineage.
func WriteLineage(ctx context.Context, d *storage.Destination, dir, lineage string, l Lineage) error {
	return errNotYet
}

// ReadWatermark reads watermark.json of lineage.
func ReadWatermark(ctx context.Context, d *storage.Destination, dir, lineage string) (Watermark, error) {
	return Watermark{}, errNotYet
}

// WriteWatermark rewrites watermark.json of lineage.
func WriteWatermark(ctx context.Context, d *storage.Destination, dir, lineage string, w Watermark) error {
	return errNotYet
}
