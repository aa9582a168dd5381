// Package s3test runs a real S3-compatible server (versitygw, built by the Makefile into
// $VERSITYGW) on loopback for tests, never a fake.
package s3test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// Credentials of the server's root user.
const (
	AccessKey = "etcd-operator-test"
	SecretKey = "etcd-operator-test-secret"
)

// Server is one running S3 server whose buckets are directories under Root.
type Server struct {
	Endpoint string
	Root     string
	cmd      *exec.Cmd
	exited   chan struct{}
}

// Start runs the server until the test ends. Buckets are made with Bucket.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv("VERSITYGW")
	if bin == "" {
		t.Fatal("VERSITYGW is not set: run through `make test`, which builds the S3 server")
	}
	addr := etcdtest.FreeAddr(t)
	s := &Server{Endpoint: "http://" + addr, Root: t.TempDir(), exited: make(chan struct{})}
	s.cmd = exec.Command(bin, "--access", AccessKey, "--secret", SecretKey, "--port", addr, "posix", s.Root)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	go func() { _ = s.cmd.Wait(); _ = logFile.Close(); close(s.exited) }()
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint)
		if err == nil {
			resp.Body.Close()
			return s
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("versitygw did not answer: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Bucket makes a bucket (a directory, for the posix backend) and returns its name.
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	if err := os.Mkdir(filepath.Join(s.Root, name), 0o755); err != nil {
		t.Fatal(err)
	}
	return name
}

// Stop kills the server.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// String is for logs.
func (s *Server) String() string { return fmt.Sprintf("versitygw at %s", s.Endpoint) }
