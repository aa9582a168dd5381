// Package nativehist reads quantiles from Prometheus native histograms, which the benchmarks
// read from the manager (its registry in process, or its metrics endpoint in the protobuf
// format): controller-runtime's reconcile-time histogram has native buckets 10 % apart, where
// its classic buckets jump from 10 to 25 to 50 ms.
package nativehist

import (
	"maps"
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
)

// Histogram is a native histogram's positive buckets: bucket i counts the observations in
// (base^(i-1), base^i], base = 2^(2^-schema).
type Histogram struct {
	schema  int32
	buckets map[int]int64
}

// Of reads h's native buckets; a histogram without them reads as empty.
func Of(h *dto.Histogram) Histogram {
	out := Histogram{schema: h.GetSchema(), buckets: map[int]int64{}}
	index, count, delta := 0, int64(0), 0
	for _, span := range h.GetPositiveSpan() {
		index += int(span.GetOffset())
		for range span.GetLength() {
			count += h.GetPositiveDelta()[delta]
			delta++
			out.buckets[index] = count
			index++
		}
	}
	return out
}

// Count is the number of observations h holds in its buckets.
func (h Histogram) Count() int64 {
	var total int64
	for _, n := range h.buckets {
		total += n
	}
	return total
}

// at is h at a schema no finer than its own: neighbouring buckets merged.
func (h Histogram) at(schema int32) Histogram {
	if schema >= h.schema {
		return h
	}
	out := Histogram{schema: schema, buckets: map[int]int64{}}
	for i, n := range h.buckets {
		out.buckets[((i-1)>>(h.schema-schema))+1] += n
	}
	return out
}

// Minus is what h counted since earlier.
func (h Histogram) Minus(earlier Histogram) Histogram {
	if h.buckets == nil {
		return h
	}
	schema := h.schema
	if earlier.buckets != nil {
		schema = min(schema, earlier.schema)
	}
	a, e := h.at(schema), earlier.at(schema)
	out := Histogram{schema: schema, buckets: map[int]int64{}}
	for i, n := range a.buckets {
		if d := n - e.buckets[i]; d > 0 {
			out.buckets[i] = d
		}
	}
	return out
}

// Quantile is the upper bound of the bucket that holds the q-quantile; 0 when empty.
func (h Histogram) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for _, i := range slices.Sorted(maps.Keys(h.buckets)) {
		if seen += h.buckets[i]; seen >= rank {
			return math.Exp2(float64(i) * math.Exp2(-float64(h.schema)))
		}
	}
	return math.Inf(1)
}
