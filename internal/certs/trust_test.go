package certs

import (
	"strings"
	"testing"
	"time"
)

// Certificates of provider Secrets, each kind from its own CA, with ca.crt bundles as a test
// chooses.
type trustWorld struct {
	peerCA, serverCA, clientCA KeyPair
	peer, server, client       KeyPair
}

func newTrustWorld(t *testing.T) trustWorld {
	t.Helper()
	var w trustWorld
	for _, ca := range []*KeyPair{&w.peerCA, &w.serverCA, &w.clientCA} {
		var err error
		if *ca, err = NewCA("ca", 24*time.Hour, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, leaf := range []struct {
		kp   *KeyPair
		ca   KeyPair
		kind Kind
	}{{&w.peer, w.peerCA, Peer}, {&w.server, w.serverCA, Server}, {&w.client, w.clientCA, Client}} {
		var err error
		if *leaf.kp, err = Issue(leaf.ca, Request{Kind: leaf.kind, CommonName: string(leaf.kind), Validity: time.Hour}, now); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func bundle(cas ...KeyPair) []byte {
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.CertPEM...)
	}
	return b
}

func TestCheckTrust(t *testing.T) {
	w := newTrustWorld(t)
	shared, err := NewCA("shared", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	one := func(kind Kind) KeyPair {
		kp, err := Issue(shared, Request{Kind: kind, CommonName: string(kind), Validity: time.Hour}, now)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	for _, tc := range []struct {
		name                 string
		peer, server, client SecretData
		wantNaming           string // "" for trusted
	}{
		{name: "one CA for everything",
			peer:   SecretData{"p", one(Peer).CertPEM, shared.CertPEM},
			server: SecretData{"s", one(Server).CertPEM, shared.CertPEM},
			client: SecretData{"c", one(Client).CertPEM, shared.CertPEM}},
		{name: "a CA per kind, each ca.crt holding the other end's CA",
			peer:   SecretData{"p", w.peer.CertPEM, w.peerCA.CertPEM},
			server: SecretData{"s", w.server.CertPEM, w.clientCA.CertPEM},
			client: SecretData{"c", w.client.CertPEM, w.serverCA.CertPEM}},
		{name: "bundles of both CAs",
			peer:   SecretData{"p", w.peer.CertPEM, bundle(w.serverCA, w.peerCA)},
			server: SecretData{"s", w.server.CertPEM, bundle(w.serverCA, w.clientCA)},
			client: SecretData{"c", w.client.CertPEM, bundle(w.clientCA, w.serverCA)}},
		{name: "each ca.crt its own issuer: members refuse the client certificate",
			peer:       SecretData{"p", w.peer.CertPEM, w.peerCA.CertPEM},
			server:     SecretData{"s", w.server.CertPEM, w.serverCA.CertPEM},
			client:     SecretData{"c", w.client.CertPEM, w.clientCA.CertPEM},
			wantNaming: "the certificate in Secret c is not trusted by the ca.crt of Secret s (members accept only client certificates"},
		{name: "the client does not trust the server's CA",
			peer:       SecretData{"p", w.peer.CertPEM, w.peerCA.CertPEM},
			server:     SecretData{"s", w.server.CertPEM, w.clientCA.CertPEM},
			client:     SecretData{"c", w.client.CertPEM, w.clientCA.CertPEM},
			wantNaming: "the certificate in Secret s is not trusted by the ca.crt of Secret c (the operator and its Jobs verify"},
		{name: "a peer certificate from another CA",
			peer:       SecretData{"p", w.peer.CertPEM, w.serverCA.CertPEM},
			server:     SecretData{"s", w.server.CertPEM, w.clientCA.CertPEM},
			client:     SecretData{"c", w.client.CertPEM, w.serverCA.CertPEM},
			wantNaming: "the certificate in Secret p is not trusted by the ca.crt of Secret p"},
		{name: "a client certificate used as peer lacks server use",
			peer:       SecretData{"p", w.client.CertPEM, w.clientCA.CertPEM},
			server:     SecretData{"s", w.server.CertPEM, w.clientCA.CertPEM},
			client:     SecretData{"c", w.client.CertPEM, w.serverCA.CertPEM},
			wantNaming: "the certificate in Secret p is not trusted by the ca.crt of Secret p"},
		{name: "no CA in ca.crt",
			peer:       SecretData{"p", w.peer.CertPEM, w.peerCA.CertPEM},
			server:     SecretData{"s", w.server.CertPEM, nil},
			client:     SecretData{"c", w.client.CertPEM, w.serverCA.CertPEM},
			wantNaming: "no CA certificate under ca.crt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTrust(tc.peer, tc.server, tc.client, now)
			switch {
			case tc.wantNaming == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantNaming != "" && err == nil:
				t.Fatalf("trusted; want an error naming %q", tc.wantNaming)
			case tc.wantNaming != "" && !strings.Contains(err.Error(), tc.wantNaming):
				t.Fatalf("error %q does not name %q", err, tc.wantNaming)
			}
		})
	}
	// An expired certificate is judged by its chain, not its expiry.
	if err := CheckTrust(SecretData{"p", w.peer.CertPEM, w.peerCA.CertPEM}, SecretData{"s", w.server.CertPEM, w.clientCA.CertPEM},
		SecretData{"c", w.client.CertPEM, w.serverCA.CertPEM}, now.Add(30*time.Hour)); err != nil {
		t.Errorf("expired certificates with a fitting trust: %v", err)
	}
}
