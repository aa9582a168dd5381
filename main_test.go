package main

import (
	"reflect"
	"testing"

	"github.com/etcd-database/etcd-operator/controllers"
)

func TestWatchNamespacesFollowOLMTargetNamespaces(t *testing.T) {
	for _, tc := range []struct {
		annotation string
		want       []string
	}{
		{"", nil}, // AllNamespaces, or no OLM
		{"team-a", []string{"team-a"}},
		{"team-a,team-b", []string{"team-a", "team-b"}},
		{" team-a , ,team-b ", []string{"team-a", "team-b"}},
	} {
		got := controllers.CacheOptions(splitNamespaces(tc.annotation)).DefaultNamespaces
		var names []string
		for ns := range got {
			names = append(names, ns)
		}
		if len(names) != len(tc.want) {
			t.Errorf("%q: watches %v, want %v", tc.annotation, names, tc.want)
			continue
		}
		if !reflect.DeepEqual(splitNamespaces(tc.annotation), tc.want) {
			t.Errorf("%q: split into %v, want %v", tc.annotation, splitNamespaces(tc.annotation), tc.want)
		}
	}
}

func TestEtcdRepositoryComesFromTheRelatedImage(t *testing.T) {
	for image, want := range map[string]string{
		"":                                 defaultEtcdRepository,
		"127.0.0.1:5000/etcd:v3.6.16":      "127.0.0.1:5000/etcd",
		"quay.io/coreos/etcd@sha256:abcd":  "quay.io/coreos/etcd",
		"registry:5000/mirror/etcd":        "registry:5000/mirror/etcd",
		"registry/etcd:v3.6.16@sha256:abc": "registry/etcd",
	} {
		if got := etcdRepository(image); got != want {
			t.Errorf("etcdRepository(%q) = %q, want %q", image, got, want)
		}
	}
}
