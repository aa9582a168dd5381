package etcd

import (
	"crypto/tls"
	"testing"
)

type fakeClient struct {
	Client
	closed bool
}

func (f *fakeClient) Close() error { f.closed = true; return nil }

func TestCacheReconnectsOnlyWhenTheConfigChanges(t *testing.T) {
	var dialled []*fakeClient
	cache := NewCacheWith(func(Config) (Client, error) {
		c := &fakeClient{}
		dialled = append(dialled, c)
		return c, nil
	})
	base := Config{Endpoints: []string{"https://a:2379"}, TLS: &tls.Config{}, Fingerprint: "client-tls@1"}

	first, _ := cache.Get("ns/c", base)
	sameButFreshTLS := base
	sameButFreshTLS.TLS = &tls.Config{} // every reconcile builds its own
	if again, _ := cache.Get("ns/c", sameButFreshTLS); again != first || len(dialled) != 1 {
		t.Fatalf("reconnected for an unchanged config (%d dials)", len(dialled))
	}

	renewed := base
	renewed.Fingerprint = "client-tls@2"
	if next, _ := cache.Get("ns/c", renewed); next == first || !dialled[0].closed {
		t.Fatal("a renewed client certificate must replace, and close, the old connection")
	}
	moreMembers := renewed
	moreMembers.Endpoints = []string{"https://a:2379", "https://b:2379"}
	if _, _ = cache.Get("ns/c", moreMembers); len(dialled) != 3 || !dialled[1].closed {
		t.Fatalf("new endpoints must reconnect (%d dials)", len(dialled))
	}

	cache.Forget("ns/c")
	if !dialled[2].closed || cache.Len() != 0 {
		t.Fatal("Forget must close the client")
	}
}
