//go:build e2e

package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// proxiedHost is a name no resolver knows: object storage under it is reached only through the
// test's proxy, as a locked-down cluster reaches object storage outside only through its proxy.
const proxiedHost = "objects.reached-only-through-the-proxy.invalid"

// The networks of the local cluster (hack/cluster/lib.sh): services, pods, and the node.
const (
	clusterServiceCIDR = "10.96.0.0/12"
	clusterPodCIDR     = "10.244.0.0/16"
)

// Behind a proxy, OLM gives the operator HTTP_PROXY, HTTPS_PROXY and NO_PROXY, and the operator
// gives them to its Jobs. A backup then reaches object storage through the proxy, and no etcd
// traffic takes it.
//
// NO_PROXY lists the cluster's networks and its API server's address, as OpenShift's does, but
// not the cluster's DNS suffixes (.svc, .cluster.local), which OpenShift's also lists: etcd is
// dialled by .svc names, so only the operator's own choice (gRPC's WithNoProxy in internal/etcd)
// keeps that traffic off the proxy, and the proxy's record of what it was asked for can show
// otherwise.
//
// The cluster is made after the operator has the proxy, with three members: the members never
// get the variables (etcd's peer transport honours them, and with this NO_PROXY their peer
// traffic went to this proxy, which does not reach them: none became ready, before the operator
// stopped giving them), and the proxy's record shows no member's peer name either.
//
// Not parallel: it restarts the operator, in the suite's sequential phase.
func TestABackupReachesObjectStorageOnlyThroughTheProxy(t *testing.T) {
	ns := testNamespace(t, "e2e-proxy-")
	s3 := startS3Server(t, ns)
	s3.createBucket(t, backupBucket)
	nodeIP := nodeInternalIP(t)
	s3Target, err := url.Parse(s3.HostEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startForwardProxy(t, nodeIP, proxiedHost, s3Target.Host)
	start := time.Now()
	setOperatorEnv(t,
		corev1.EnvVar{Name: "HTTP_PROXY", Value: proxy.URL},
		corev1.EnvVar{Name: "HTTPS_PROXY", Value: proxy.URL},
		corev1.EnvVar{Name: "NO_PROXY", Value: strings.Join([]string{clusterServiceCIDR, clusterPodCIDR, nodeIP, "localhost", "127.0.0.1"}, ",")})
	t.Logf("the operator restarted with the proxy %s in %v", proxy.URL, time.Since(start).Round(time.Second))

	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "proxied", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("512Mi"))},
		},
	}
	create(t, cluster)
	waitAvailable(t, cluster, 3)
	for _, pod := range memberPods(t, cluster) {
		for _, env := range pod.Spec.Containers[0].Env {
			if strings.HasSuffix(env.Name, "_PROXY") {
				t.Errorf("member pod %s has %s=%s: etcd would send its peers' traffic to the proxy", pod.Name, env.Name, env.Value)
			}
		}
	}
	const keys = 20
	putDataset(t, clientServiceEndpoint(t, cluster), "proxied/", keys, 64)

	_, port, err := net.SplitHostPort(s3Target.Host)
	if err != nil {
		t.Fatal(err)
	}
	b := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "through-the-proxy", Namespace: ns}, Spec: etcdv1alpha1.EtcdBackupSpec{
		ClusterName: cluster.Name,
		Destination: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
			Bucket: backupBucket, Prefix: "proxied/", Endpoint: "http://" + net.JoinHostPort(proxiedHost, port),
			ForcePathStyle: true, AllowPlainHTTP: true, CredentialsSecretName: s3.CredentialsSecret,
		}},
	}}
	create(t, b)
	t.Cleanup(func() {
		if t.Failed() {
			logBackupState(t, b)
		}
	})
	waitBackupPhase(t, b, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
	if b.Status.Phase != etcdv1alpha1.BackupCompleted || b.Status.LastBackup == nil {
		t.Fatalf("the backup through the proxy: %+v", b.Status)
	}
	t.Logf("backed up through the proxy in %v: %s", time.Since(b.CreationTimestamp.Time).Round(time.Second), b.Status.LastBackup.URI)
	key := strings.TrimPrefix(b.Status.LastBackup.URI, "s3://"+backupBucket+"/")
	checkSnapshot(t, s3.getObject(t, backupBucket, key), b.Status.LastBackup, keys)

	asked := proxy.hostsAsked()
	t.Logf("the proxy was asked for %v", asked)
	if want := net.JoinHostPort(proxiedHost, port); !slices.Equal(asked, []string{want}) {
		t.Errorf("the proxy was asked for %v, want only %s: etcd's members (%s) and everything else in the cluster must be dialled directly",
			asked, want, resources.ClientEndpoint(cluster))
	}
}

// nodeInternalIP is the address pods reach this machine at: the local cluster's only node.
func nodeInternalIP(t *testing.T) string {
	t.Helper()
	nodes := &corev1.NodeList{}
	if err := k8sClient.List(context.Background(), nodes); err != nil {
		t.Fatal(err)
	}
	for _, node := range nodes.Items {
		for _, addr := range node.Status.Addresses {
			if addr.Type == corev1.NodeInternalIP {
				return addr.Address
			}
		}
	}
	t.Fatalf("no node has an InternalIP: %d nodes", len(nodes.Items))
	return ""
}

// forwardProxy is an HTTP forward proxy in the test process that reaches one host only, under
// a name it alone knows, and records every host it is asked for. It tunnels CONNECT (HTTPS)
// and forwards absolute-form requests (plain HTTP).
type forwardProxy struct {
	// URL is what HTTP_PROXY and HTTPS_PROXY name.
	URL string
	// host is the name it reaches target by; target is the address it dials for it.
	host, target string
	forward      *httputil.ReverseProxy

	mu    sync.Mutex
	asked map[string]bool
}

// startForwardProxy listens on ip, which pods must reach, until the test ends.
func startForwardProxy(t *testing.T, ip, host, target string) *forwardProxy {
	t.Helper()
	listener, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen for the proxy on %s: %v", ip, err)
	}
	p := &forwardProxy{URL: "http://" + listener.Addr().String(), host: host, target: target, asked: map[string]bool{}}
	p.forward = &httputil.ReverseProxy{
		// The request keeps its Host header, which its signature covers.
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", target },
		// Not the default transport: the test process's own proxy variables must not apply.
		Transport: &http.Transport{},
	}
	server := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(func() { _ = server.Close() })
	return p
}

func (p *forwardProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// CONNECT names host:port; an absolute-form request names its URL, the port implied.
	hostPort := r.URL.Host
	if r.Method != http.MethodConnect && r.URL.Port() == "" {
		hostPort = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	p.mu.Lock()
	p.asked[hostPort] = true
	p.mu.Unlock()
	host, _, _ := net.SplitHostPort(hostPort)
	switch {
	case host != p.host:
		http.Error(w, "this proxy reaches "+p.host+" only", http.StatusForbidden)
	case r.Method == http.MethodConnect:
		p.tunnel(w)
	default:
		p.forward.ServeHTTP(w, r)
	}
}

// tunnel joins the client's connection to the target's, both ways, until either side closes.
func (p *forwardProxy) tunnel(w http.ResponseWriter) {
	upstream, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	conn, buffered, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		upstream.Close()
		return
	}
	go func() {
		_, _ = io.Copy(upstream, buffered)
		upstream.Close()
	}()
	_, _ = io.Copy(conn, upstream)
	conn.Close()
}

// hostsAsked are the host:ports the proxy was asked for, sorted.
func (p *forwardProxy) hostsAsked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return sortedKeys(p.asked)
}
