package etcd_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcdtest"
)

// What a CA rotation rests on, against a real etcd, on its client and its peer port: it trusts
// the CAs its trusted-CA file held when it started, whatever the file says later; it presents
// the certificate its certificate file holds at each handshake, so a new leaf is served without
// a restart; and handshakes show both. A probe certificate of a CA it does not trust is refused.
func TestTrustOfShowsWhatARunningMemberTrustsAndPresents(t *testing.T) {
	now := time.Now()
	caA, caB := newTestCA(t, "A", now), newTestCA(t, "B", now)
	dir := t.TempDir()
	write := func(name string, data ...[]byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), slices.Concat(data...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	serveLeafOf := func(ca certs.KeyPair) {
		t.Helper()
		leaf, err := certs.Issue(ca, certs.Request{Kind: certs.Server, CommonName: "etcd", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour}, now)
		if err != nil {
			t.Fatal(err)
		}
		write("server.crt", leaf.CertPEM)
		write("server.key", leaf.KeyPEM)
	}
	serveLeafOf(caA)
	write("trusted.crt", caA.CertPEM)

	s := etcdtest.NewServer(t, "m")
	s.ClientURL = strings.Replace(s.ClientURL, "http://", "https://", 1)
	s.PeerURL = strings.Replace(s.PeerURL, "http://", "https://", 1)
	s.ExtraArgs = []string{"--cert-file=" + filepath.Join(dir, "server.crt"), "--key-file=" + filepath.Join(dir, "server.key"),
		"--trusted-ca-file=" + filepath.Join(dir, "trusted.crt"), "--client-cert-auth",
		"--peer-cert-file=" + filepath.Join(dir, "server.crt"), "--peer-key-file=" + filepath.Join(dir, "server.key"),
		"--peer-trusted-ca-file=" + filepath.Join(dir, "trusted.crt"), "--peer-client-cert-auth"}
	start := func() {
		t.Helper()
		s.Start(t, "new", etcdtest.InitialCluster(s))
		waitAnswers(t, s.ClientURL)
	}
	start()

	cas := map[string]*x509.Certificate{"A": parse(t, caA), "B": parse(t, caB)}
	probes := []etcd.TrustProbe{probeOf(t, "A", caA, now), probeOf(t, "B", caB, now)}
	addr := strings.TrimPrefix(s.ClientURL, "https://")
	// The client port and the peer port alike.
	expect := func(what string, trusts []string, presents string) {
		t.Helper()
		for _, port := range []string{addr, strings.TrimPrefix(s.PeerURL, "https://")} {
			seen, err := etcd.TrustOf(t.Context(), port, cas, probes)
			if err != nil {
				t.Fatalf("%s, at %s: %v", what, port, err)
			}
			if !slices.Equal(seen.Trusts, trusts) || seen.Presents != presents {
				t.Fatalf("%s, at %s: trusts %v, presents %q; want %v, %q", what, port, seen.Trusts, seen.Presents, trusts, presents)
			}
		}
	}
	expect("started trusting A", []string{"A"}, "A")

	// Both CAs in the file: the running etcd still trusts A alone. A leaf of B in its file:
	// presented at once.
	write("trusted.crt", caA.CertPEM, caB.CertPEM)
	serveLeafOf(caB)
	expect("the files changed, no restart", []string{"A"}, "B")

	s.Stop()
	start()
	expect("restarted on both CAs", []string{"A", "B"}, "B")

	if _, err := etcd.TrustOf(t.Context(), addr, map[string]*x509.Certificate{"A": parse(t, caA)}, probes); err == nil {
		t.Error("an endpoint presenting a certificate of no CA asked about was taken for an answer")
	}
}

func newTestCA(t *testing.T, name string, now time.Time) certs.KeyPair {
	t.Helper()
	ca, err := certs.NewCA("test CA "+name, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func parse(t *testing.T, kp certs.KeyPair) *x509.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func probeOf(t *testing.T, name string, ca certs.KeyPair, now time.Time) etcd.TrustProbe {
	t.Helper()
	kp, err := certs.Issue(ca, certs.Request{Kind: certs.Client, CommonName: "trust-probe", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return etcd.TrustProbe{CA: name, Certificate: pair}
}

// waitAnswers waits until something accepts connections at url's address.
func waitAnswers(t *testing.T, url string) {
	t.Helper()
	addr := url[strings.Index(url, "://")+3:]
	deadline := time.Now().Add(10 * time.Second)
	for etcd.FirstAnswer(t.Context(), []string{addr}) == "" {
		if time.Now().After(deadline) {
			t.Fatalf("nothing answers at %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
