// Package certs issues and renews the certificates of a cluster whose TLS provider is Operator:
// one CA per cluster, and from it the peer, server and client certificates. Pure functions of
// the cluster and the clock, so that issuance and the renewal decision are unit-tested.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Secret keys, as in kubernetes.io/tls Secrets and cert-manager's.
const (
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	KeyCA   = "ca.crt"
)

// Kind is one of the certificates a cluster uses.
type Kind string

const (
	CA     Kind = "ca"
	Peer   Kind = "peer"
	Server Kind = "server"
	Client Kind = "client"
)

// Leaves are the certificates issued from the CA.
var Leaves = []Kind{Peer, Server, Client}

// Request describes a certificate to issue.
type Request struct {
	Kind       Kind
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	Validity   time.Duration
}

// KeyPair is a certificate and its key, PEM-encoded.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed CA.
func NewCA(commonName string, validity time.Duration, now time.Time) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"etcd-operator"}},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew between nodes
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("create CA: %w", err)
	}
	return encode(der, key)
}

// Issue signs a leaf certificate with the CA. Peer certificates serve and dial, so they carry
// both usages; server certificates serve clients; client certificates only dial.
func Issue(ca KeyPair, req Request, now time.Time) (KeyPair, error) {
	caCert, caKey, err := parse(ca)
	if err != nil {
		return KeyPair{}, fmt.Errorf("CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, err
	}
	usages := map[Kind][]x509.ExtKeyUsage{
		Peer:   {x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		Server: {x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		Client: {x509.ExtKeyUsageClientAuth},
	}[req.Kind]
	if usages == nil {
		return KeyPair{}, fmt.Errorf("cannot issue a %q certificate", req.Kind)
	}
	notAfter := now.Add(req.Validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: []string{"etcd-operator"}},
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return KeyPair{}, fmt.Errorf("issue %s certificate: %w", req.Kind, err)
	}
	return encode(der, key)
}

// NotAfter is when the PEM certificate expires.
func NotAfter(certPEM []byte) (time.Time, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return time.Time{}, err
	}
	return cert.NotAfter, nil
}

// Why a certificate is (re)issued: the reason each renewal check gives.
const (
	ReasonMissing        = "Missing"
	ReasonUnreadable     = "Unreadable"
	ReasonExpiring       = "Expiring"
	ReasonIssuerMismatch = "IssuerMismatch"
	ReasonNamesMismatch  = "NamesMismatch"
)

// RenewalInput is what the renewal checks look at: the certificate held now, the CA that must
// have signed it (nil for the CA itself), the request it must satisfy, and the renewal window.
type RenewalInput struct {
	Current     KeyPair
	CAPEM       []byte
	Request     Request
	RenewBefore time.Duration
	Now         time.Time

	cert *x509.Certificate // parsed by the first check, for the others
}

// A RenewalCheck says why the certificate must be (re)issued now, or renew false.
type RenewalCheck func(in *RenewalInput) (reason, message string, renew bool)

// RenewalChain runs its checks in order; the first that asks for renewal says why. A check may
// rely on the ones before it having passed (after cert-manager's policies.Chain).
type RenewalChain []RenewalCheck

// Evaluate is the first check's verdict that asks for renewal, or renew false.
func (c RenewalChain) Evaluate(in RenewalInput) (reason, message string, renew bool) {
	for _, check := range c {
		if reason, message, renew := check(&in); renew {
			return reason, message, true
		}
	}
	return "", "", false
}

// RenewalChecks are the causes for (re)issuing a certificate, in the order they are looked at.
var RenewalChecks = RenewalChain{present, withinValidity, signedByCA, servesItsNames}

// NeedsRenewal says whether, and why, the certificate must be (re)issued now: it is missing,
// unreadable, within renewBefore of its expiry, not signed by ca, or no longer valid for the
// names it must serve.
func NeedsRenewal(kp KeyPair, caPEM []byte, req Request, renewBefore time.Duration, now time.Time) (reason, message string, renew bool) {
	return RenewalChecks.Evaluate(RenewalInput{Current: kp, CAPEM: caPEM, Request: req, RenewBefore: renewBefore, Now: now})
}

func present(in *RenewalInput) (string, string, bool) {
	if len(in.Current.CertPEM) == 0 {
		return ReasonMissing, "there is no certificate", true
	}
	if len(in.Current.KeyPEM) == 0 {
		return ReasonMissing, "there is no private key", true
	}
	cert, err := parseCert(in.Current.CertPEM)
	if err != nil {
		return ReasonUnreadable, fmt.Sprintf("the certificate cannot be read: %v", err), true
	}
	in.cert = cert
	return "", "", false
}

func withinValidity(in *RenewalInput) (string, string, bool) {
	notAfter, renewal := in.cert.NotAfter, RenewalTime(in.cert.NotAfter, in.RenewBefore)
	switch {
	case in.Now.After(notAfter):
		return ReasonExpiring, fmt.Sprintf("the certificate expired at %s", notAfter.UTC().Format(time.RFC3339)), true
	case in.Now.After(renewal):
		return ReasonExpiring, fmt.Sprintf("the certificate expires at %s, inside the renewal window that began at %s",
			notAfter.UTC().Format(time.RFC3339), renewal.UTC().Format(time.RFC3339)), true
	}
	return "", "", false
}

func signedByCA(in *RenewalInput) (string, string, bool) {
	if in.CAPEM == nil {
		return "", "", false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(in.CAPEM) {
		return ReasonIssuerMismatch, "the CA certificate cannot be read", true
	}
	if _, err := in.cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: in.Now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return ReasonIssuerMismatch, fmt.Sprintf("the certificate does not chain to the cluster's CA: %v", err), true
	}
	return "", "", false
}

func servesItsNames(in *RenewalInput) (string, string, bool) {
	for _, name := range in.Request.DNSNames {
		if in.cert.VerifyHostname(name) != nil {
			return ReasonNamesMismatch, fmt.Sprintf("the certificate is not valid for %s", name), true
		}
	}
	return "", "", false
}

// RenewalTime is when a certificate expiring at notAfter is renewed.
func RenewalTime(notAfter time.Time, renewBefore time.Duration) time.Time {
	return notAfter.Add(-renewBefore)
}

func encode(der []byte, key *ecdsa.PrivateKey) (KeyPair, error) {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func parse(kp KeyPair) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cert, err := parseCert(kp.CertPEM)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(kp.KeyPEM)
	if block == nil {
		return nil, nil, errors.New("no PEM key")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return n
}
