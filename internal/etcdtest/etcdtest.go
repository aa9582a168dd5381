// Package etcdtest starts real etcd servers on loopback for tests: the etcd built by the
// Makefile into $ETCD_BIN, never a fake.
package etcdtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Server is one etcd process.
type Server struct {
	Name      string
	ClientURL string
	PeerURL   string
	DataDir   string
	// ExtraArgs are passed to etcd after the ones Start sets, such as a small quota.
	ExtraArgs []string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// Binary is the etcd server the tests run, from $ETCD_BIN (set by `make test`).
func Binary(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("ETCD_BIN")
	if dir == "" {
		t.Fatal("ETCD_BIN is not set: run through `make test`, which builds etcd")
	}
	return filepath.Join(dir, "etcd")
}

// NewServers reserves loopback ports and data directories for n members named m0..m(n-1).
func NewServers(t testing.TB, n int) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = NewServer(t, fmt.Sprintf("m%d", i))
	}
	return servers
}

// NewServer reserves loopback ports and a data directory for one member.
func NewServer(t testing.TB, name string) *Server {
	t.Helper()
	return &Server{
		Name:      name,
		ClientURL: "http://" + FreeAddr(t),
		PeerURL:   "http://" + FreeAddr(t),
		DataDir:   filepath.Join(t.TempDir(), name),
	}
}

// InitialCluster is the --initial-cluster value naming every server.
func InitialCluster(servers ...*Server) string {
	parts := make([]string, len(servers))
	for i, s := range servers {
		parts[i] = s.Name + "=" + s.PeerURL
	}
	return strings.Join(parts, ",")
}

// StartCluster bootstraps n members and waits until every one serves.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	servers := NewServers(t, n)
	initial := InitialCluster(servers...)
	for _, s := range servers {
		s.Start(t, "new", initial)
	}
	for _, s := range servers {
		s.WaitReady(t)
	}
	return servers
}

// Start runs etcd for s with the given --initial-cluster-state and --initial-cluster; the
// process is stopped when the test ends.
func (s *Server) Start(t testing.TB, state, initialCluster string) {
	t.Helper()
	args := []string{
		"--name", s.Name,
		"--data-dir", s.DataDir,
		"--listen-client-urls", s.ClientURL,
		"--advertise-client-urls", s.ClientURL,
		"--listen-peer-urls", s.PeerURL,
		"--initial-advertise-peer-urls", s.PeerURL,
		"--initial-cluster", initialCluster,
		"--initial-cluster-state", state,
		"--initial-cluster-token", "etcdtest",
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--log-level", "error",
	}
	cmd := exec.Command(Binary(t), append(args, s.ExtraArgs...)...)
	// etcd reads ETCD_* variables as flags; ETCD_BIN (set by make test) is not one.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ETCD_") })
	logFile, err := os.Create(s.DataDir + ".log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd %s: %v", s.Name, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(s.exited) }()
	t.Cleanup(s.Stop)
}

// Stop kills the process, if it runs.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Terminate stops the process as the deletion of a pod does, with SIGTERM, and waits for it to
// exit: etcd commits its backend on the way out, so its db holds all it applied.
func (s *Server) Terminate(t testing.TB) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stop etcd %s: %v", s.Name, err)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("etcd %s still runs 30s after SIGTERM", s.Name)
	}
	s.cmd = nil
}

// WaitReady waits until s answers a linearizable read.
func (s *Server) WaitReady(t testing.TB) {
	t.Helper()
	c := s.Client(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Get(ctx, "health")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.DataDir + ".log")
			t.Fatalf("etcd %s not ready: %v\n%s", s.Name, err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Client is a plain clientv3 client of s alone, closed when the test ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ClientURLs lists the servers' client URLs.
func ClientURLs(servers []*Server) []string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL
	}
	return urls
}

// FreeAddr reserves a loopback address for a server until the test ends. Ports come from
// below the kernel's ephemeral range (32768 and up), so the outgoing connections of the servers
// already running cannot take a port between its reservation here and the server binding it.
//
// Test packages run as parallel processes, and a port that is merely free when drawn may be
// drawn by another process before this one's server binds it. So each port handed out is also
// held by an exclusive lock on a file named after it, shared by every test process on the
// machine; the kernel drops the lock when the test ends or its process dies.
func FreeAddr(t testing.TB) string {
	t.Helper()
	locks := filepath.Join(os.TempDir(), "etcdtest-ports")
	if err := os.MkdirAll(locks, 0o777); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		lock, err := os.OpenFile(filepath.Join(locks, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			lock.Close() // held by another test
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			lock.Close() // in use by something that is not a test
			continue
		}
		l.Close()
		t.Cleanup(func() { lock.Close() })
		return addr
	}
	t.Fatal("no free loopback port")
	return ""
}
