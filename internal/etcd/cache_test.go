package etcd

import (
	"crypto/tls"
	"sync"
	"testing"
	"time"
)

type fakeClient struct {
	Client
	mu     sync.Mutex
	closed bool
}

func (f *fakeClient) Close() error { f.mu.Lock(); defer f.mu.Unlock(); f.closed = true; return nil }

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

// A dial can take clientv3's whole DialTimeout (an authenticated cluster without a quorum
// cannot give a token): meanwhile the other clusters' clients are handed out, and Forget does
// not wait either.
func TestASlowDialHoldsUpNoOtherCluster(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	cache := NewCacheWith(func(cfg Config) (Client, error) {
		if cfg.Endpoints[0] == "https://no-quorum:2379" {
			<-release
		}
		return &fakeClient{}, nil
	})
	go func() { _, _ = cache.Get("ns/stuck", Config{Endpoints: []string{"https://no-quorum:2379"}}) }()
	time.Sleep(50 * time.Millisecond) // the slow dial has begun

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = cache.Get("ns/healthy", Config{Endpoints: []string{"https://a:2379"}})
		cache.Forget("ns/other")
		_ = cache.Len()
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("another cluster's client waited for a slow dial")
	}
}

// Two Gets of one key racing: one client is kept, the other closed, none leaked.
func TestRacingGetsKeepOneClient(t *testing.T) {
	var mu sync.Mutex
	var dialled []*fakeClient
	cache := NewCacheWith(func(Config) (Client, error) {
		time.Sleep(10 * time.Millisecond)
		c := &fakeClient{}
		mu.Lock()
		dialled = append(dialled, c)
		mu.Unlock()
		return c, nil
	})
	cfg := Config{Endpoints: []string{"https://a:2379"}}
	var wg sync.WaitGroup
	got := make([]Client, 2)
	for i := range got {
		wg.Go(func() { got[i], _ = cache.Get("ns/c", cfg) })
	}
	wg.Wait()
	if got[0] != got[1] {
		t.Fatal("two Gets of one key with one config returned different clients")
	}
	open := 0
	for _, c := range dialled {
		if !c.closed {
			open++
		}
	}
	if open != 1 || cache.Len() != 1 {
		t.Fatalf("%d of %d dialled clients open, %d cached: want 1", open, len(dialled), cache.Len())
	}
}
