package etcd_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// The streamed snapshot is a valid etcd database at the reported revision, and its reported
// size is that of the bytes written.
func TestSnapshotAgainstRealEtcd(t *testing.T) {
	servers, _, c := memberWithKeys(t, 500)

	var buf bytes.Buffer
	info, err := c.Snapshot(t.Context(), servers[0].ClientURL, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if info.SizeBytes != int64(buf.Len()) {
		t.Fatalf("reported %d bytes; wrote %d bytes", info.SizeBytes, buf.Len())
	}
	// StorageVersion is left out: etcd reports it only once the cluster version is settled.
	if info.Revision != 501 || info.EtcdVersion != "3.6.16" || info.MemberID == 0 || info.ClusterID == 0 {
		t.Fatalf("snapshot info %+v", info)
	}

	file := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(filepath.Dir(etcdtest.Binary(t)), "etcdutl"), "snapshot", "status", file, "-w", "json").Output()
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v", err)
	}
	var status struct {
		Revision int64 `json:"revision"`
		TotalKey int   `json:"totalKey"`
	}
	if err := json.Unmarshal(out, &status); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if status.Revision != info.Revision || status.TotalKey < 500 {
		t.Fatalf("etcdutl sees revision %d with %d keys; Snapshot reported revision %d", status.Revision, status.TotalKey, info.Revision)
	}
}

// KeyspaceAt describes a revision the same however the keyspace moved on after it, until that
// revision is compacted away.
func TestKeyspaceAtAgainstRealEtcd(t *testing.T) {
	servers, raw, c := memberWithKeys(t, 30)
	at31, err := c.KeyspaceAt(t.Context(), servers[0].ClientURL, 31)
	if err != nil {
		t.Fatal(err)
	}
	if at31.Revision != 31 || at31.Keys != 30 || at31.Hash == 0 {
		t.Fatalf("keyspace at 31: %+v", at31)
	}
	for i := range 10 {
		if _, err := raw.Put(t.Context(), fmt.Sprintf("later-%04d", i), "value"); err != nil {
			t.Fatal(err)
		}
	}
	if again, err := c.KeyspaceAt(t.Context(), servers[0].ClientURL, 31); err != nil || again != at31 {
		t.Fatalf("keyspace at 31 after more writes: %+v, %v; want %+v", again, err, at31)
	}
	if _, err := raw.Compact(t.Context(), 35, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeyspaceAt(t.Context(), servers[0].ClientURL, 31); !errors.Is(err, etcd.ErrCompacted) {
		t.Fatalf("keyspace at a compacted revision: %v, want ErrCompacted", err)
	}
}

// memberWithKeys starts a one-member cluster holding n keys (revision n+1), and returns it with
// a raw client and the package's client, closed when the test ends.
func memberWithKeys(t *testing.T, n int) ([]*etcdtest.Server, *clientv3.Client, etcd.Client) {
	t.Helper()
	servers := etcdtest.StartCluster(t, 1)
	raw := servers[0].Client(t)
	for i := range n {
		if _, err := raw.Put(t.Context(), fmt.Sprintf("key-%04d", i), "value"); err != nil {
			t.Fatal(err)
		}
	}
	c, err := etcd.New(etcd.Config{Endpoints: etcdtest.ClientURLs(servers)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return servers, raw, c
}

// A snapshot's stream holds at most a fixed flow-control window of data the writer has not
// taken yet: when the writer slows (a disk's write-back, an upload), etcd stops sending rather
// than the agent's memory filling. gRPC's default grows the window with the measured
// bandwidth-delay product, up to 16 MiB per connection, so a backup's memory grew with the
// snapshot's size (a 1 GiB one to a directory held 9–15 MiB more than a 64 MiB one).
func TestASnapshotHoldsAtMostAWindowNotYetWritten(t *testing.T) {
	servers := etcdtest.StartCluster(t, 1)
	raw := servers[0].Client(t)
	value := string(bytes.Repeat([]byte{'x'}, 1<<20))
	for i := range 64 {
		if _, err := raw.Put(t.Context(), fmt.Sprintf("big-%02d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	var received atomic.Int64
	// 5 ms each way: over a network's latency gRPC's default window grows past what the
	// writer takes; on bare loopback it stays near 1 MiB.
	url := "http://" + forwardWith(t, "127.0.0.1", servers[0].ClientURL[len("http://"):], forwarding{fromTarget: &received, delay: 5 * time.Millisecond})
	c, err := etcd.New(etcd.Config{Endpoints: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	w := &stallingWriter{after: 32 << 20, stalled: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := c.Snapshot(t.Context(), url, w)
		done <- err
	}()
	select {
	case <-w.stalled:
	case err := <-done:
		t.Fatalf("the snapshot ended before its writer stalled: %v", err)
	}
	time.Sleep(time.Second) // what etcd may still send arrives
	inFlight := received.Load() - w.written.Load()
	t.Logf("in flight %d bytes, received %d, written %d", inFlight, received.Load(), w.written.Load())
	close(w.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if inFlight > 2<<20 {
		t.Errorf("%.1f MiB received and not yet written while the writer stalled; want at most the 1 MiB window and a message", float64(inFlight)/(1<<20))
	}
}

// stallingWriter takes writes at once until after bytes, then blocks until released.
type stallingWriter struct {
	after   int64
	written atomic.Int64
	once    sync.Once
	stalled chan struct{}
	release chan struct{}
}

func (w *stallingWriter) Write(p []byte) (int, error) {
	if w.written.Load() >= w.after {
		w.once.Do(func() { close(w.stalled) })
		<-w.release
	}
	w.written.Add(int64(len(p)))
	return len(p), nil
}
