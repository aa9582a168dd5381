package etcd_test

import (
	"cmp"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// OLM gives the operator, and through it the Jobs, the cluster's HTTP_PROXY, HTTPS_PROXY and
// NO_PROXY. gRPC honours them: a member whose address NO_PROXY does not list (a pod IP, a name
// under a cluster domain the user did not think of) would be reached through the proxy, which
// cannot reach it or should never see etcd's traffic. Traffic to etcd stays in the cluster,
// so the client never takes a proxy. Go reads the proxy variables once per process, and never
// proxies a loopback address: the check runs in a child process, against a member reached at a
// non-loopback address of this machine.
func TestEtcdTrafficNeverTakesTheProxy(t *testing.T) {
	if os.Getenv("ETCD_PROXY_CHILD_ENDPOINT") != "" {
		return // the child's side is TestEtcdTrafficNeverTakesTheProxyChild
	}
	hostIP := nonLoopbackAddress(t)
	servers := etcdtest.StartCluster(t, 1)
	member := forward(t, hostIP, servers[0].ClientURL[len("http://"):])

	var proxied atomic.Int32
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	go func() {
		for {
			conn, err := proxy.Accept()
			if err != nil {
				return
			}
			proxied.Add(1)
			_ = conn.Close()
		}
	}()

	child := exec.Command(os.Args[0], "-test.run", "^TestEtcdTrafficNeverTakesTheProxyChild$", "-test.v")
	child.Env = append(os.Environ(), "ETCD_PROXY_CHILD_ENDPOINT=http://"+member,
		"HTTPS_PROXY=http://"+proxy.Addr().String(), "HTTP_PROXY=http://"+proxy.Addr().String(), "NO_PROXY=")
	out, err := child.CombinedOutput()
	if err != nil {
		t.Errorf("the client did not reach the member with a proxy set: %v\n%s", err, out)
	}
	if n := proxied.Load(); n > 0 {
		t.Errorf("the client went through the proxy %d times to reach a member", n)
	}
}

func TestEtcdTrafficNeverTakesTheProxyChild(t *testing.T) {
	endpoint := os.Getenv("ETCD_PROXY_CHILD_ENDPOINT")
	if endpoint == "" {
		t.Skip("run by TestEtcdTrafficNeverTakesTheProxy in a process of its own")
	}
	c, err := etcd.New(etcd.Config{Endpoints: []string{endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, _, err := c.Members(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// nonLoopbackAddress is an IPv4 address of this machine that is not a loopback one.
func nonLoopbackAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
			return ip.IP.String()
		}
	}
	t.Skip("this machine has no IPv4 address but loopback ones")
	return ""
}

// forward accepts connections at ip and copies them to target; it returns its address.
func forward(t *testing.T, ip, target string) string {
	t.Helper()
	return forwardWith(t, ip, target, forwarding{})
}

// forwardCounting is forward, counting the connections it accepts in accepted.
func forwardCounting(t *testing.T, ip, target string, accepted *atomic.Int32) string {
	t.Helper()
	return forwardWith(t, ip, target, forwarding{accepted: accepted})
}

// forwarding is what a forwarder measures and does besides copying: the connections it
// accepts, the bytes it forwards from the target, and a delay it adds to every byte each way
// (a network's latency, without limiting its bandwidth).
type forwarding struct {
	accepted   *atomic.Int32
	fromTarget *atomic.Int64
	delay      time.Duration
}

func forwardWith(t *testing.T, ip, target string, f forwarding) string {
	t.Helper()
	f.accepted, f.fromTarget = cmp.Or(f.accepted, new(atomic.Int32)), cmp.Or(f.fromTarget, new(atomic.Int64))
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			go func() {
				defer func() { _ = in.Close() }()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer func() { _ = out.Close() }()
				go func() { copyDelayed(out, in, f.delay) }()
				copyDelayed(countingWriter{in, f.fromTarget}, out, f.delay)
			}()
		}
	}()
	return l.Addr().String()
}

// copyDelayed copies src to dst, each byte written delay after it was read.
func copyDelayed(dst io.Writer, src io.Reader, delay time.Duration) {
	if delay == 0 {
		_, _ = io.Copy(dst, src)
		return
	}
	type chunk struct {
		data []byte
		at   time.Time
	}
	line := make(chan chunk, 4096)
	go func() {
		defer close(line)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				line <- chunk{buf[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range line {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

// countingWriter adds the bytes written through it to n.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
