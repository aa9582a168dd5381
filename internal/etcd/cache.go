package etcd

import (
	"fmt"
	"slices"
	"sync"
)

// Cache keeps one client per cluster, so a reconcile reuses warm connections instead of
// dialling every member again, and closes it when the cluster goes away.
type Cache struct {
	mu      sync.Mutex
	entries map[string]cacheEntry
	dial    func(Config) (Client, error)
}

type cacheEntry struct {
	cfg    Config
	client Client
}

// NewCache makes a cache that connects with New.
func NewCache() *Cache { return NewCacheWith(New) }

// NewCacheWith makes a cache that connects with dial; tests pass a fake.
func NewCacheWith(dial func(Config) (Client, error)) *Cache {
	return &Cache{entries: map[string]cacheEntry{}, dial: dial}
}

// Get returns the client for key, connecting anew when there is none or when cfg no longer
// matches the one it was made with (members or credentials changed). The dial runs outside the
// cache's lock: it can take clientv3's whole DialTimeout (a cluster with authentication and no
// quorum cannot hand out a token), and the other clusters' reconciles must not wait for it.
func (c *Cache) Get(key string, cfg Config) (Client, error) {
	if cl, ok := c.cached(key, cfg); ok {
		return cl, nil
	}
	client, err := c.dial(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", key, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		if sameConfig(e.cfg, cfg) {
			_ = client.Close() // another Get of this key dialled first
			return e.client, nil
		}
		_ = e.client.Close()
	}
	c.entries[key] = cacheEntry{cfg: cfg, client: client}
	return client, nil
}

// cached is the client kept for key if it was made with cfg; one made otherwise is closed and
// dropped.
func (c *Cache) cached(key string, cfg Config) (Client, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	if sameConfig(e.cfg, cfg) {
		return e.client, true
	}
	_ = e.client.Close()
	delete(c.entries, key)
	return nil, false
}

// Dial connects with the cache's dial function and does not keep the client: for a long call
// that must not be cut when the cached client is replaced. The caller closes it.
func (c *Cache) Dial(cfg Config) (Client, error) { return c.dial(cfg) }

// Forget closes and drops the client for key.
func (c *Cache) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		_ = e.client.Close()
		delete(c.entries, key)
	}
}

// Len is the number of open clients.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func sameConfig(a, b Config) bool {
	return slices.Equal(a.Endpoints, b.Endpoints) && a.Fingerprint == b.Fingerprint && (a.TLS == nil) == (b.TLS == nil) &&
		a.Username == b.Username && a.Password == b.Password
}
