package etcd

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// TrustProbe is a client certificate of one CA, to ask a member whether it trusts that CA.
type TrustProbe struct {
	// CA names the CA (its fingerprint, in a rotation).
	CA          string
	Certificate tls.Certificate
}

// TrustSeen is what handshakes with a member's TLS endpoint show of the CAs it holds to: read
// live, since etcd reads its trusted CAs only when it starts, whatever its files say since.
type TrustSeen struct {
	// Trusts are the CAs whose probe certificate the member accepted, in the probes' order.
	Trusts []string
	// Presents is the CA, of those asked about, that signed the certificate the member
	// presents (etcd reads it from its file at each handshake).
	Presents string
}

// TrustOf asks the TLS endpoint addr (host:port; a member's client or peer port) which of the
// probes' CAs it accepts client certificates of, and which of cas signed the certificate it
// presents: one connection per probe, each a request for /version, which etcd answers on both
// ports. A member that refuses a probe's certificate fails the request, not the connection
// (with TLS 1.3 the server judges the client's certificate after the handshake): only an
// answered request counts as trusted. An error means addr could not be asked at all (it does
// not answer, or presents a certificate none of cas signed): nothing is known of its trust.
func TrustOf(ctx context.Context, addr string, cas map[string]*x509.Certificate, probes []TrustProbe) (TrustSeen, error) {
	var seen TrustSeen
	asked := false
	for _, p := range probes {
		presents, accepted, err := probeTrust(ctx, addr, cas, p)
		if err != nil {
			return TrustSeen{}, err
		}
		asked = true
		seen.Presents = presents
		if accepted {
			seen.Trusts = append(seen.Trusts, p.CA)
		}
	}
	if !asked {
		return TrustSeen{}, errors.New("no probe certificate to ask with")
	}
	return seen, nil
}

// probeTrust makes one request with p's certificate. It returns the CA of the certificate
// addr presents, and whether the request was answered.
func probeTrust(ctx context.Context, addr string, cas map[string]*x509.Certificate, p TrustProbe) (string, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var presents string
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{p.Certificate},
		// The server's name is not what is asked here, its issuer is: every chain is checked
		// by hand against each CA, so an endpoint presenting a certificate of no CA given is
		// refused, not trusted.
		InsecureSkipVerify: true, //nolint:gosec // verified below, against cas
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			ca, err := issuerOf(raw, cas)
			presents = ca
			return err
		},
	}
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		if presents == "" {
			if errors.Is(err, errNoCA) {
				return "", false, fmt.Errorf("%s presents a certificate of none of the CAs asked about: %w", addr, err)
			}
			return "", false, fmt.Errorf("%s does not answer: %w", addr, err)
		}
		// The handshake itself refused the probe's certificate (TLS 1.2).
		return presents, false, nil
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/version", nil)
	req.Close = true
	if err := req.Write(conn); err != nil {
		return presents, false, nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		// Refused after the handshake (TLS 1.3): a bad-certificate alert, or the connection
		// closed on us.
		return presents, false, nil
	}
	_ = resp.Body.Close()
	return presents, true, nil
}

// errNoCA is what issuerOf returns when no CA given signed the certificate.
var errNoCA = errors.New("signed by none of the CAs asked about")

// issuerOf is the name of the CA in cas that signed the leaf of raw (a server's chain, leaf
// first), for server authentication.
func issuerOf(raw [][]byte, cas map[string]*x509.Certificate) (string, error) {
	if len(raw) == 0 {
		return "", errNoCA
	}
	leaf, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(cas))
	for name := range cas {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		roots := x509.NewCertPool()
		roots.AddCert(cas[name])
		// As of the leaf's own validity: a rotation asks who signed it, not whether it expired.
		at := leaf.NotBefore.Add(time.Second)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			return name, nil
		}
	}
	return "", errNoCA
}
