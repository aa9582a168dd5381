package nativehist_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/etcd-database/etcd-operator/test/nativehist"
)

// The benchmarks' reconcile quantiles rest on this reading: quantiles of the part of a native
// histogram observed since a mark.
func TestQuantilesSinceAMark(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", NativeHistogramBucketFactor: 1.1,
		NativeHistogramMaxBucketNumber: 100})
	read := func() nativehist.Histogram {
		m := &dto.Metric{}
		if err := h.Write(m); err != nil {
			t.Fatal(err)
		}
		return nativehist.Of(m.GetHistogram())
	}
	for range 1000 {
		h.Observe(0.100)
	}
	mark := read()
	for range 98 {
		h.Observe(0.001)
	}
	h.Observe(0.050)
	h.Observe(0.050)
	since := read().Minus(mark)
	within := func(name string, got, lower float64) {
		if got < lower || got > lower*1.1 {
			t.Errorf("%s = %v, want the upper bound of the bucket holding %v (within 10 %%)", name, got, lower)
		}
	}
	within("p50", since.Quantile(0.5), 0.001)
	within("p99", since.Quantile(0.99), 0.050)
	within("p99 of everything", read().Quantile(0.99), 0.100)
	if n := since.Count(); n != 100 {
		t.Errorf("%d observations since the mark, want 100", n)
	}
}
