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

// ParseBundle reads every certificate of a PEM trust bundle, in order.
func ParseBundle(bundle []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("a certificate of the bundle cannot be read: %w", err)
		}
		out = append(out, cert)
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
