package archive

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/etcd"
)

// benchSegment is a 16 MiB segment (the default segment size) of puts of 1 KiB values, half
// of them random (incompressible, as encrypted or binary values are) and half text-like (as
// Kubernetes objects are), under keys like a Kubernetes registry's.
func benchSegment() Segment {
	const valueSize, total = 1024, 16 << 20
	random := make([]byte, total/2)
	_, _ = rand.Read(random)
	text := bytes.Repeat([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","namespace":"default"}}`), valueSize)
	seg := Segment{LeaseTTL: map[int64]int64{}}
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range total / valueSize {
		value := text[i%64 : i%64+valueSize]
		if i%2 == 0 {
			value = random[(i/2)*valueSize : (i/2+1)*valueSize]
		}
		rev := int64(i + 2)
		key := fmt.Sprintf("/registry/configmaps/default/object-%06d", i)
		seg.Records = append(seg.Records, Record{Revision: etcd.Revision{Revision: rev, Events: []etcd.Event{
			{Key: []byte(key), Value: value, CreateRevision: rev, ModRevision: rev, Version: 1},
		}}, Seen: start.Add(time.Duration(i) * time.Millisecond)})
	}
	return seg
}

func rawBytes(s Segment) int64 {
	var n int64
	for _, r := range s.Records {
		for _, ev := range r.Events {
			n += int64(len(ev.Key) + len(ev.Value))
		}
	}
	return n
}

// BenchmarkEncode: a 16 MiB segment encoded as the archive writes it (gzip's fastest level),
// beside the same encoding at gzip's default level and the plainest alternative, the segment
// as JSON without compression; then decoded. Reports throughput over the keys' and values'
// bytes (SetBytes: MB/s) and the stored size relative to them.
func BenchmarkEncode(b *testing.B) {
	seg := benchSegment()
	raw := rawBytes(seg)
	encodeAt := func(level int) func(*testing.B) {
		return func(b *testing.B) {
			saved := compressionLevel
			compressionLevel = level
			defer func() { compressionLevel = saved }()
			b.SetBytes(raw)
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := Encode(&buf, seg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len())/float64(raw), "stored/raw")
		}
	}
	b.Run("segment-gzip-fastest", encodeAt(gzip.BestSpeed))
	b.Run("segment-gzip-default", encodeAt(gzip.DefaultCompression))
	b.Run("json-plain", func(b *testing.B) {
		b.SetBytes(raw)
		var out []byte
		for b.Loop() {
			var err error
			if out, err = json.Marshal(seg); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(out))/float64(raw), "stored/raw")
	})
	b.Run("decode", func(b *testing.B) {
		var buf bytes.Buffer
		if err := Encode(&buf, seg); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(raw)
		for b.Loop() {
			if _, err := Decode(bytes.NewReader(buf.Bytes())); err != nil {
				b.Fatal(err)
			}
		}
	})
}
