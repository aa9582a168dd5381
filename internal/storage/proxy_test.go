package storage_test

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/etcd-database/etcd-operator/internal/s3test"
	"github.com/etcd-database/etcd-operator/internal/storage"
)

// proxiedHost is a name no resolver knows: only the test's proxy reaches the S3 server by it, as
// only a cluster's proxy reaches object storage outside a locked-down network.
const proxiedHost = "objects.reached-only-through-the-proxy.invalid"

// Behind a proxy, OLM gives the operator HTTP_PROXY, HTTPS_PROXY and NO_PROXY, and the operator
// gives them to its Jobs: the agent's object storage traffic must take the proxy. The S3 server
// here is reachable only through the test's proxy, under a name that resolves nowhere. Go reads
// the proxy variables once per process: the agent's side runs in a child process.
func TestObjectStorageIsReachedThroughTheProxy(t *testing.T) {
	if os.Getenv("STORAGE_PROXY_CHILD_ENDPOINT") != "" {
		return // the child's side is TestObjectStorageIsReachedThroughTheProxyChild
	}
	srv := s3test.Start(t)
	bucket := srv.Bucket(t, "backups")
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var proxied atomic.Int32
	forward := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		proxied.Add(1)
		// The request keeps its Host header, which its signature covers.
		r.Out.URL.Scheme, r.Out.URL.Host = target.Scheme, target.Host
	}}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Hostname() != proxiedHost {
			http.Error(w, "this proxy reaches "+proxiedHost+" only", http.StatusForbidden)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	_, port, _ := net.SplitHostPort(target.Host)
	child := exec.Command(os.Args[0], "-test.run", "^TestObjectStorageIsReachedThroughTheProxyChild$", "-test.v")
	child.Env = append(os.Environ(), "STORAGE_PROXY_CHILD_ENDPOINT=http://"+net.JoinHostPort(proxiedHost, port),
		"STORAGE_PROXY_CHILD_BUCKET="+bucket, "HTTP_PROXY="+proxy.URL, "HTTPS_PROXY="+proxy.URL, "NO_PROXY=")
	out, err := child.CombinedOutput()
	if err != nil {
		t.Errorf("object storage behind the proxy: %v\n%s", err, out)
	}
	if proxied.Load() == 0 {
		t.Error("no request went through the proxy")
	}
}

func TestObjectStorageIsReachedThroughTheProxyChild(t *testing.T) {
	endpoint := os.Getenv("STORAGE_PROXY_CHILD_ENDPOINT")
	if endpoint == "" {
		t.Skip("run by TestObjectStorageIsReachedThroughTheProxy in a process of its own")
	}
	d, err := storage.OpenS3(t.Context(), storage.S3{
		Bucket: os.Getenv("STORAGE_PROXY_CHILD_BUCKET"), Prefix: "etcd/", Endpoint: endpoint, Region: "us-east-1",
		ForcePathStyle: true, AccessKeyID: s3test.AccessKey, SecretKey: s3test.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	key := "etcd/main-20260301T120000Z-r42.db"
	if err := d.Upload(t.Context(), key, bytes.NewReader([]byte("a snapshot"))); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Verify(t.Context(), key); err != nil {
		t.Fatal(err)
	}
}
