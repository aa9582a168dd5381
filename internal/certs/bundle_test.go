package certs

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestTrustRootsTakesTheRootOfTheChainAndLeavesVerifyAgainstItOnly(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	root, err := NewCA("root", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := Issue(root, Request{Kind: Peer, CommonName: "peer", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}

	// A ca.crt with the issuer's chain, leaf first: only the self-signed root is kept.
	trust, err := TrustRoots(append(append([]byte{}, leaf.CertPEM...), root.CertPEM...))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(trust, root.CertPEM) {
		t.Fatalf("trust roots:\n%s\nwant the root alone:\n%s", trust, root.CertPEM)
	}
	// Without a self-signed certificate, the top of the chain as given.
	if top, err := TrustRoots(leaf.CertPEM); err != nil || !bytes.Equal(top, leaf.CertPEM) {
		t.Fatalf("without a root: %s, %v", top, err)
	}
	if _, err := TrustRoots(nil); err == nil {
		t.Fatal("an empty ca.crt gave trust roots")
	}

	if err := VerifyChain(leaf.CertPEM, trust, now); err != nil {
		t.Fatalf("a leaf of the root: %v", err)
	}
	// Checked inside its validity: an expired leaf of the right CA is not an untrusted one.
	if err := VerifyChain(leaf.CertPEM, trust, now.Add(48*time.Hour)); err != nil {
		t.Fatalf("an expired leaf of the root: %v", err)
	}
	replaced, err := Issue(other, Request{Kind: Peer, CommonName: "peer", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyChain(replaced.CertPEM, trust, now); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("a leaf of another CA: %v, want unknown authority", err)
	}
	if notAfter, err := EarliestNotAfter(append(append([]byte{}, root.CertPEM...), leaf.CertPEM...)); err != nil || !notAfter.Equal(now.Add(time.Hour).Truncate(time.Second)) {
		t.Fatalf("earliest expiry %v, %v", notAfter, err)
	}
}
