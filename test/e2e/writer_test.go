//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// writer puts numbered keys into an etcd cluster for as long as it runs, recording each write
// etcd acknowledged. An acknowledged write must survive anything the operator does; a write
// that failed may or may not have been applied, so it proves nothing either way.
type writer struct {
	client *clientv3.Client
	prefix string

	mu       sync.Mutex
	acked    []string
	failures int

	cancel context.CancelFunc
	done   chan struct{}
}

func startWriter(t *testing.T, endpoint, prefix string) *writer {
	t.Helper()
	return startWriterAs(t, endpoint, prefix, "", "")
}

// startWriterAs writes as user (with password) to a cluster with authentication on.
func startWriterAs(t *testing.T, endpoint, prefix, user, password string) *writer {
	t.Helper()
	return startWriterWith(t, clientv3.Config{Endpoints: []string{endpoint}, Username: user, Password: password}, prefix)
}

// startWriterWith writes with the client cfg makes (a cluster served over TLS, say).
func startWriterWith(t *testing.T, cfg clientv3.Config, prefix string) *writer {
	t.Helper()
	cfg.DialTimeout, cfg.Logger = 2*time.Second, zap.NewNop()
	// The cluster may be down for minutes (a quorum loss): with gRPC's default back-off the
	// client's next attempt after it serves again could be two minutes away, past the
	// read-back's minute.
	cfg.DialOptions = append(cfg.DialOptions, quickReconnect...)
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{client: c, prefix: prefix, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx)
	t.Cleanup(func() { w.stop(); _ = c.Close() })
	return w
}

func (w *writer) run(ctx context.Context) {
	defer close(w.done)
	for i := 0; ctx.Err() == nil; i++ {
		key := fmt.Sprintf("%s/%08d", w.prefix, i)
		putCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := w.client.Put(putCtx, key, key)
		cancel()
		w.mu.Lock()
		if err == nil {
			w.acked = append(w.acked, key)
		} else {
			w.failures++
		}
		w.mu.Unlock()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (w *writer) stop() {
	w.cancel()
	<-w.done
}

func (w *writer) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// failedCount is how many writes failed: each applied or not, nobody knows.
func (w *writer) failedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failures
}

// verify stops the writer and checks, with a linearizable read, that every acknowledged key
// is present with its value.
func (w *writer) verify(t *testing.T) {
	t.Helper()
	w.verifyWith(t, w.client)
}

// verifyAt is verify, reading through endpoint: the writer's own may be gone (a pod IP).
func (w *writer) verifyAt(t *testing.T, endpoint string) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w.verifyWith(t, c)
}

func (w *writer) verifyWith(t *testing.T, c *clientv3.Client) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	acked, failures := w.acked, w.failures
	w.mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("the writer got no write acknowledged: the test proves nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var resp *clientv3.GetResponse
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if resp, err = c.Get(ctx, w.prefix+"/", clientv3.WithPrefix()); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	present := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = string(kv.Value)
	}
	var lost []string
	for _, key := range acked {
		if present[key] != key {
			lost = append(lost, key)
		}
	}
	t.Logf("writer: %d writes acknowledged, %d failed (unacknowledged), %d keys present", len(acked), failures, len(present))
	if len(lost) > 0 {
		t.Fatalf("%d acknowledged writes lost, first %v", len(lost), lost[:min(5, len(lost))])
	}
}
