package main

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The scale benchmark's figures rest on these two readings: the verb of each request the
// manager sends, and quantiles of the part of a native histogram observed since a mark.
func TestRequestKindNamesVerbAndResource(t *testing.T) {
	for _, tc := range []struct {
		method, path, want string
	}{
		{http.MethodPatch, "/apis/etcd.database.dev/v1alpha1/namespaces/ns/etcdclusters/c/status", "patch etcdclusters/status"},
		{http.MethodGet, "/api/v1/namespaces/ns/pods?labelSelector=a%3Db", "list pods"},
		{http.MethodGet, "/api/v1/pods?watch=true&resourceVersion=1", "watch pods"},
		{http.MethodGet, "/api/v1/namespaces/ns/secrets/s", "get secrets"},
		{http.MethodPost, "/apis/events.k8s.io/v1/namespaces/ns/events", "create events"},
		{http.MethodDelete, "/api/v1/namespaces/ns/pods/p", "delete pods"},
		{http.MethodPost, "/api/v1/namespaces", "create namespaces"},
		{http.MethodGet, "/api/v1/namespaces/ns", "get namespaces"},
		{http.MethodGet, "/apis/policy/v1", "discovery"},
	} {
		u, err := url.Parse(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := requestKind(tc.method, u); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestNativeHistogramQuantilesSinceAMark(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", NativeHistogramBucketFactor: 1.1,
		NativeHistogramMaxBucketNumber: 100})
	read := func() nativeHistogram {
		m := &dto.Metric{}
		if err := h.Write(m); err != nil {
			t.Fatal(err)
		}
		return nativeHistogramOf(m.GetHistogram())
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
	since := read().minus(mark)
	within := func(name string, got, lower float64) {
		if got < lower || got > lower*1.1 {
			t.Errorf("%s = %v, want the upper bound of the bucket holding %v (within 10 %%)", name, got, lower)
		}
	}
	within("p50", since.quantile(0.5), 0.001)
	within("p99", since.quantile(0.99), 0.050)
	within("p99 of everything", read().quantile(0.99), 0.100)
}
