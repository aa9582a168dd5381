package agent

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// verifyTLSValidity is how long the verify pod's certificates are valid: longer than the Job
// may run.
const verifyTLSValidity = 24 * time.Hour

// WriteVerifyTLS makes, in dir, the TLS material of a verify pod's restored member
// (jobspec.VerifyEtcdTLSArgs): a CA made for this pod alone, the member's server certificate
// for the loopback address, and a client certificate whose common name is root. The keys are
// written only here, in the pod's scratch directory, readable by the pod's user alone, and go
// with the pod; the CA signs nothing else.
func WriteVerifyTLS(dir string, now time.Time) error {
	ca, err := certs.NewCA("etcd-operator-verify", verifyTLSValidity, now)
	if err != nil {
		return err
	}
	server, err := certs.Issue(ca, certs.Request{Kind: certs.Server, CommonName: jobspec.VerifyMember,
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: verifyTLSValidity}, now)
	if err != nil {
		return err
	}
	client, err := certs.Issue(ca, certs.Request{Kind: certs.Client, CommonName: jobspec.VerifyClientUser, Validity: verifyTLSValidity}, now)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("TLS directory: %w", err)
	}
	for name, data := range map[string][]byte{
		jobspec.VerifyCAFile:         ca.CertPEM,
		jobspec.VerifyServerCertFile: server.CertPEM,
		jobspec.VerifyServerKeyFile:  server.KeyPEM,
		jobspec.VerifyClientCertFile: client.CertPEM,
		jobspec.VerifyClientKeyFile:  client.KeyPEM,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// VerifyClientTLS is the verifier's TLS configuration from the material WriteVerifyTLS made in
// dir: root's client certificate, and the pod's CA as the only one trusted.
func VerifyClientTLS(dir string) (*tls.Config, error) {
	return loadClientTLS(dir, jobspec.VerifyClientCertFile, jobspec.VerifyClientKeyFile, jobspec.VerifyCAFile)
}
