package main

import (
	"net/http"
	"net/url"
	"testing"
)

// The scale benchmark's figures rest on this reading: the verb of each request the manager
// sends (and on test/nativehist's quantiles).
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
