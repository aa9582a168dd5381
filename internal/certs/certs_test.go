package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

func TestIssuedCertificatesChainToTheCAAndServeTheirNames(t *testing.T) {
	ca, err := NewCA("prod-ca", 10*365*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Kind: Server, CommonName: "prod", DNSNames: []string{"*.prod-peer.db.svc", "prod-client.db.svc"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: 365 * 24 * time.Hour}
	server, err := Issue(ca, req, now)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM)
	if err != nil {
		t.Fatalf("issued pair does not load: %v", err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	for _, name := range []string{"prod-abcde.prod-peer.db.svc", "prod-client.db.svc", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: now}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if reason, message, renew := NeedsRenewal(server, ca.CertPEM, req, 30*24*time.Hour, now); renew {
		t.Errorf("a fresh certificate needs renewal: %s: %s", reason, message)
	}
}

// Each cause of renewal is told apart, with a message that names what is wrong.
func TestRenewalDecision(t *testing.T) {
	ca, _ := NewCA("ca", 10*365*24*time.Hour, now)
	otherCA, _ := NewCA("other", 10*365*24*time.Hour, now)
	req := Request{Kind: Peer, CommonName: "p", DNSNames: []string{"*.c-peer.ns.svc"}, Validity: 90 * 24 * time.Hour}
	cert, _ := Issue(ca, req, now)
	renewBefore := 30 * 24 * time.Hour

	cases := []struct {
		name        string
		kp          KeyPair
		ca          []byte
		req         Request
		at          time.Time
		wantReason  string
		wantMessage string
	}{
		{"fresh", cert, ca.CertPEM, req, now, "", ""},
		{"just before the renewal window", cert, ca.CertPEM, req, now.Add(59 * 24 * time.Hour), "", ""},
		{"inside the renewal window", cert, ca.CertPEM, req, now.Add(61 * 24 * time.Hour), ReasonExpiring, "inside the renewal window"},
		{"expired", cert, ca.CertPEM, req, now.Add(100 * 24 * time.Hour), ReasonExpiring, "expired at"},
		{"missing", KeyPair{}, ca.CertPEM, req, now, ReasonMissing, "no certificate"},
		{"key missing", KeyPair{CertPEM: cert.CertPEM}, ca.CertPEM, req, now, ReasonMissing, "no private key"},
		{"unreadable", KeyPair{CertPEM: []byte("not PEM"), KeyPEM: cert.KeyPEM}, ca.CertPEM, req, now, ReasonUnreadable, "cannot be read"},
		{"signed by another CA", cert, otherCA.CertPEM, req, now, ReasonIssuerMismatch, "does not chain to the cluster's CA"},
		{"CA unreadable", cert, []byte("not PEM"), req, now, ReasonIssuerMismatch, "CA certificate cannot be read"},
		{"a name it must now serve", cert, ca.CertPEM, Request{Kind: Peer, DNSNames: []string{"x.other.svc"}}, now, ReasonNamesMismatch, "not valid for x.other.svc"},
		// The CA itself is checked with no CA: only presence and validity count.
		{"a CA's own check", ca, nil, Request{Kind: CA}, now, "", ""},
	}
	for _, tc := range cases {
		reason, message, renew := NeedsRenewal(tc.kp, tc.ca, tc.req, renewBefore, tc.at)
		if renew != (tc.wantReason != "") || reason != tc.wantReason || !strings.Contains(message, tc.wantMessage) {
			t.Errorf("%s: NeedsRenewal = %q, %q, %t; want %q with a message containing %q", tc.name, reason, message, renew, tc.wantReason, tc.wantMessage)
		}
	}
}

func TestLeafNeverOutlivesItsCA(t *testing.T) {
	ca, _ := NewCA("ca", 24*time.Hour, now)
	leaf, err := Issue(ca, Request{Kind: Client, CommonName: "op", Validity: 365 * 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	caEnd, _ := NotAfter(ca.CertPEM)
	leafEnd, _ := NotAfter(leaf.CertPEM)
	if leafEnd.After(caEnd) {
		t.Fatalf("leaf expires %v after its CA %v", leafEnd, caEnd)
	}
}
