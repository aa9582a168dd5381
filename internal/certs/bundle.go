package certs

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// Fingerprint is the SHA-256 of a certificate's DER, in hexadecimal: how a CA is named in a
// rotation's record.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// ParseBundle reads every certificate of a PEM trust bundle, in order; one with none is an
// error.
func ParseBundle(bundle []byte) ([]*x509.Certificate, error) {
	out, err := parseAll(bundle)
	if err != nil {
		return nil, fmt.Errorf("a certificate of the bundle cannot be read: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate in the bundle")
	}
	return out, nil
}

// BundleFingerprints are the fingerprints of a PEM trust bundle's certificates; nil when it
// cannot be read.
func BundleFingerprints(bundle []byte) []string {
	cas, err := ParseBundle(bundle)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(cas))
	for _, ca := range cas {
		out = append(out, Fingerprint(ca))
	}
	return out
}

// JoinBundle is the PEM trust bundle of the given PEM certificates, each ending in a newline.
func JoinBundle(pems ...[]byte) []byte {
	var b bytes.Buffer
	for _, p := range pems {
		b.Write(bytes.TrimSpace(p))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// IssuerIn is the fingerprint of the CA among cas that signed the PEM certificate, or "" when
// none did (or it cannot be read).
func IssuerIn(certPEM []byte, cas []*x509.Certificate) string {
	cert, err := parseCert(certPEM)
	if err != nil {
		return ""
	}
	for _, ca := range cas {
		if cert.CheckSignatureFrom(ca) == nil {
			return Fingerprint(ca)
		}
	}
	return ""
}

// CAReplacementDue says whether the CA (PEM) is to be replaced now: once less than
// caRenewBefore of its life is left. A zero caRenewBefore stands for validity + renewBefore:
// the CA is replaced before a certificate issued from it would be cut short by its expiry (a
// leaf never outlives its CA).
func CAReplacementDue(caPEM []byte, validity, renewBefore, caRenewBefore time.Duration, now time.Time) (string, bool, error) {
	ca, err := parseCert(caPEM)
	if err != nil {
		return "", false, err
	}
	if caRenewBefore == 0 {
		caRenewBefore = validity + renewBefore
	}
	due := ca.NotAfter.Add(-caRenewBefore)
	if now.Before(due) {
		return "", false, nil
	}
	return fmt.Sprintf("the CA expires at %s; it is replaced from %s on", ca.NotAfter.UTC().Format(time.RFC3339), due.UTC().Format(time.RFC3339)), true, nil
}

// TrustRoots picks, from the ca.crt an issuer wrote beside a certificate, the CAs to trust: its
// self-signed certificates (the roots of the chain), or, when it holds none, the last
// certificate, the top of the chain the issuer gives. A self-signed or CA issuer of
// cert-manager writes its CA there.
func TrustRoots(caPEM []byte) ([]byte, error) {
	all, err := parseAll(caPEM)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, errors.New("no certificate")
	}
	var roots []*x509.Certificate
	for _, cert := range all {
		if bytes.Equal(cert.RawSubject, cert.RawIssuer) && cert.CheckSignatureFrom(cert) == nil {
			roots = append(roots, cert)
		}
	}
	if len(roots) == 0 {
		roots = all[len(all)-1:]
	}
	var out []byte
	for _, cert := range roots {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})...)
	}
	return out, nil
}

// VerifyChain says why the certificate in certPEM (a leaf, followed by any intermediates the
// issuer added) does not chain to a CA of trustPEM, or returns nil. Expiry is not judged here:
// the chain is checked as of now, or of the nearest moment inside the leaf's validity.
func VerifyChain(certPEM, trustPEM []byte, now time.Time) error {
	chain, err := parseAll(certPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", KeyCert, err)
	}
	if len(chain) == 0 {
		return fmt.Errorf("%s: no certificate", KeyCert)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(trustPEM) {
		return errors.New("no CA certificate to trust")
	}
	intermediates := x509.NewCertPool()
	for _, cert := range chain[1:] {
		intermediates.AddCert(cert)
	}
	leaf := chain[0]
	at := now
	if at.Before(leaf.NotBefore) {
		at = leaf.NotBefore
	}
	if at.After(leaf.NotAfter) {
		at = leaf.NotAfter
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// EarliestNotAfter is when the first of the PEM certificates expires.
func EarliestNotAfter(pemCerts []byte) (time.Time, error) {
	all, err := parseAll(pemCerts)
	if err != nil {
		return time.Time{}, err
	}
	if len(all) == 0 {
		return time.Time{}, errors.New("no certificate")
	}
	earliest := all[0].NotAfter
	for _, cert := range all[1:] {
		if cert.NotAfter.Before(earliest) {
			earliest = cert.NotAfter
		}
	}
	return earliest, nil
}

func parseAll(pemCerts []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := pemCerts; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, cert)
	}
}
