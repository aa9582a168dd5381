package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

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
