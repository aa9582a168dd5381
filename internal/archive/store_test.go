package archive_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/archive"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

func destinations(t *testing.T) map[string]*storage.Destination {
	t.Helper()
	srv := s3test.Start(t)
	s3, err := storage.OpenS3(t.Context(), storage.S3{
		Bucket: srv.Bucket(t, "archive"), Prefix: "etcd/", Endpoint: srv.Endpoint, Region: "us-east-1", ForcePathStyle: true,
		AccessKeyID: s3test.AccessKey, SecretKey: s3test.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := storage.OpenDir(t.TempDir(), "pvc://backups/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s3.Close(); _ = dir.Close() })
	return map[string]*storage.Destination{"s3": s3, "claim": dir}
}

func record(rev int64, seen time.Time) archive.Record {
	return archive.Record{Revision: etcd.Revision{Revision: rev, Events: []etcd.Event{{Key: []byte("k"), Value: []byte("v"), CreateRevision: 2, ModRevision: rev, Version: rev - 1}}}, Seen: seen}
}

// TestListSegmentsTellsWhatEachHolds: the listing gives each segment's lineage, revisions,
// times and key from its key and metadata, and nothing else under the series.
func TestListSegmentsTellsWhatEachHolds(t *testing.T) {
	for name, d := range destinations(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			dir := d.Prefix() + "db/main/nightly/"
			a, b := archive.LineageName(0xabc, 10), archive.LineageName(0xabc, 20)
			segs := []struct {
				lineage string
				s       archive.Segment
				keyID   string
			}{
				{b, archive.Segment{Records: []archive.Record{record(21, t0.Add(time.Hour))}}, "0123456789abcdef"},
				{a, archive.Segment{Records: []archive.Record{record(14, t0.Add(time.Minute)), record(15, t0.Add(2*time.Minute))}}, ""},
				{a, archive.Segment{Records: []archive.Record{record(11, t0), record(12, t0.Add(time.Second)), record(13, t0.Add(time.Second))}}, ""},
			}
			for _, s := range segs {
				key := archive.SegmentKey(dir, s.lineage, s.s.First(), s.s.Last())
				if err := d.UploadWithMetadata(ctx, key, bytes.NewReader(encode(t, s.s)), archive.Metadata(s.s, s.keyID)); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Upload(ctx, dir+"2026-03-01T12:00:00Z-r10.db", bytes.NewReader([]byte("snapshot"))); err != nil {
				t.Fatal(err)
			}
			if err := archive.WriteLineage(ctx, d, dir, a, archive.Lineage{ClusterID: "abc", Base: 10}); err != nil {
				t.Fatal(err)
			}
			got, err := archive.ListSegments(ctx, d, dir)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i].SizeBytes = 0
			}
			want := []archive.SegmentInfo{
				{Key: archive.SegmentKey(dir, a, 11, 13), Lineage: a, First: 11, Last: 13, FirstSeen: t0, LastSeen: t0.Add(time.Second)},
				{Key: archive.SegmentKey(dir, a, 14, 15), Lineage: a, First: 14, Last: 15, FirstSeen: t0.Add(time.Minute), LastSeen: t0.Add(2 * time.Minute)},
				{Key: archive.SegmentKey(dir, b, 21, 21), Lineage: b, First: 21, Last: 21, FirstSeen: t0.Add(time.Hour), LastSeen: t0.Add(time.Hour), KeyID: "0123456789abcdef"},
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("listed\n%+v\nwant\n%+v", got, want)
			}
			m, err := d.Metadata(ctx, want[0].Key)
			if err != nil || m[archive.MetadataRecords] != "3" || m[archive.MetadataFirstRevision] != "11" || m[archive.MetadataLastRevision] != "13" {
				t.Fatalf("metadata %v, %v", m, err)
			}
			if _, ok := m[encryption.MetadataKeyID]; ok {
				t.Fatalf("a plain segment's metadata names a key: %v", m)
			}
		})
	}
}

func TestLineageAndWatermarkReadBackAsWritten(t *testing.T) {
	for name, d := range destinations(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			dir := d.Prefix() + "db/main/nightly/"
			name := archive.LineageName(0xabc, 10)
			if _, err := archive.ReadLineage(ctx, d, dir, name); !storage.IsNotFound(err) {
				t.Fatalf("read of a lineage never written: %v, want not found", err)
			}
			l := archive.Lineage{ClusterID: "abc", Base: 10, BaseKey: dir + "2026-03-01T12:00:00Z-r10.db", RestoreMark: "restore-1", Started: t0}
			if err := archive.WriteLineage(ctx, d, dir, name, l); err != nil {
				t.Fatal(err)
			}
			if got, err := archive.ReadLineage(ctx, d, dir, name); err != nil || got != l {
				t.Fatalf("read %+v, %v; want %+v", got, err, l)
			}
			for _, rev := range []int64{15, 30} {
				w := archive.Watermark{HighestRevision: rev, Time: t0.Add(time.Duration(rev) * time.Second)}
				if err := archive.WriteWatermark(ctx, d, dir, name, w); err != nil {
					t.Fatal(err)
				}
				if got, err := archive.ReadWatermark(ctx, d, dir, name); err != nil || got != w {
					t.Fatalf("read %+v, %v; want %+v", got, err, w)
				}
			}
			lineages, err := archive.ListLineages(ctx, d, dir)
			if err != nil || !reflect.DeepEqual(lineages, []string{name}) {
				t.Fatalf("lineages %v, %v", lineages, err)
			}
		})
	}
}
