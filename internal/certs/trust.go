package certs

import (
	"crypto/x509"
	"fmt"
	"time"
)

// SecretData is what a kubernetes.io/tls Secret of provider Secrets holds: a certificate, and
// in ca.crt the CAs trusted on the connections that Secret serves (one PEM certificate or more).
type SecretData struct {
	Name string
	Cert []byte
	CA   []byte
}

// CheckTrust says why the certificates of a cluster's own Secrets cannot reach each other, or
// returns nil. Each Secret's ca.crt is what one end of a connection trusts, as etcd's flags
// take it:
//   - members verify each other's peer certificate against the peer Secret's ca.crt
//     (--peer-trusted-ca-file);
//   - members accept client certificates signed by a CA in the server Secret's ca.crt
//     (--trusted-ca-file), so it holds the CA of the client certificate;
//   - the operator and its Jobs verify the members' server certificate against the client
//     Secret's ca.crt, so it holds the CA of the server certificate.
//
// With one CA for everything this always holds; with a CA per kind, each ca.crt must hold the
// other end's CA. A mismatch would show as TLS handshakes failing with the members "not
// answering"; found here, it names the Secret to fix. Expiry is not judged here (it is
// status.certificates' and the alerts' matter): each certificate is checked as of now, or of
// the nearest moment inside its validity.
func CheckTrust(peer, server, client SecretData, now time.Time) error {
	for _, c := range []struct {
		cert    SecretData
		trusted SecretData
		usage   x509.ExtKeyUsage
		what    string
	}{
		{peer, peer, x509.ExtKeyUsageServerAuth, "members verify each other's peer certificate against it"},
		{peer, peer, x509.ExtKeyUsageClientAuth, "members verify each other's peer certificate against it"},
		{client, server, x509.ExtKeyUsageClientAuth, "members accept only client certificates signed by a CA in it"},
		{server, client, x509.ExtKeyUsageServerAuth, "the operator and its Jobs verify the members' server certificate against it"},
	} {
		if err := chains(c.cert, c.trusted, c.usage, now); err != nil {
			return fmt.Errorf("the certificate in Secret %s is not trusted by the ca.crt of Secret %s (%s): %w; "+
				"put the CA that signed it in %s's ca.crt, or issue it from a CA that is there",
				c.cert.Name, c.trusted.Name, c.what, err, c.trusted.Name)
		}
	}
	return nil
}

func chains(leaf, trusted SecretData, usage x509.ExtKeyUsage, now time.Time) error {
	cert, err := parseCert(leaf.Cert)
	if err != nil {
		return fmt.Errorf("%s: %w", KeyCert, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(trusted.CA) {
		return fmt.Errorf("no CA certificate under %s", KeyCA)
	}
	at := now
	if at.Before(cert.NotBefore) {
		at = cert.NotBefore
	}
	if at.After(cert.NotAfter) {
		at = cert.NotAfter
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}
