package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
)

// Where the member pods mount their certificates.
const (
	tlsMount        = "/etc/etcd/tls"
	peerTLSVolume   = "peer-tls"
	serverTLSVolume = "server-tls"
)

// TLSSecretNames are the Secrets holding a cluster's peer, server and client certificates.
type TLSSecretNames struct {
	Peer, Server, Client string
}

// TLSSecrets names the cluster's certificate Secrets: the user's (provider Secrets) or the
// operator's own.
func TLSSecrets(c *etcdv1alpha1.EtcdCluster) TLSSecretNames {
	if c.Spec.TLS != nil && c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderSecrets && c.Spec.TLS.Secrets != nil {
		s := c.Spec.TLS.Secrets
		return TLSSecretNames{Peer: s.Peer, Server: s.Server, Client: s.Client}
	}
	return TLSSecretNames{Peer: c.Name + "-peer-tls", Server: c.Name + "-server-tls", Client: c.Name + "-client-tls"}
}

// CASecretName is the Secret of the CA the operator makes for a cluster.
func CASecretName(cluster string) string { return cluster + "-ca" }

// TrustedCAHash identifies what a member trusts: the ca.crt of its peer and server Secrets,
// which etcd reads only at start (--peer-trusted-ca-file, --trusted-ca-file).
func TrustedCAHash(peerCA, serverCA []byte) string {
	sum := sha256.Sum256(slices.Concat([]byte("peer\n"), peerCA, []byte("\nserver\n"), serverCA))
	return hex.EncodeToString(sum[:8])
}

// CARotationSecretName is the Secret of a CA rotation under way: the new CA, and a client
// certificate of each CA to ask members which they trust.
func CARotationSecretName(cluster string) string { return cluster + "-ca-rotation" }

// CertificateRequest says what the operator-issued certificate of kind must be valid for.
func CertificateRequest(c *etcdv1alpha1.EtcdCluster, kind certs.Kind) certs.Request {
	validity := 365 * 24 * time.Hour
	if c.Spec.TLS != nil && c.Spec.TLS.Validity != nil {
		validity = c.Spec.TLS.Validity.Duration
	}
	peer := PeerServiceName(c.Name)
	members := []string{
		fmt.Sprintf("*.%s.%s.svc", peer, c.Namespace),
		fmt.Sprintf("*.%s.%s.svc.cluster.local", peer, c.Namespace),
	}
	req := certs.Request{Kind: kind, Validity: validity}
	switch kind {
	case certs.Peer:
		req.CommonName, req.DNSNames = c.Name+"-peer", members
	case certs.Server:
		client := ClientServiceName(c.Name)
		req.CommonName = c.Name + "-server"
		req.DNSNames = slices.Concat(members, []string{
			client, client + "." + c.Namespace, client + "." + c.Namespace + ".svc", client + "." + c.Namespace + ".svc.cluster.local", "localhost"})
		req.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
	case certs.Client:
		// With authentication on, etcd takes a client certificate's common name as the user.
		req.CommonName = "root"
	}
	return req
}

func tlsArgs(c *etcdv1alpha1.EtcdCluster) []string {
	if c.Spec.TLS == nil {
		return nil
	}
	peer, server := tlsMount+"/peer/", tlsMount+"/server/"
	return []string{
		"--peer-cert-file=" + peer + certs.KeyCert,
		"--peer-key-file=" + peer + certs.KeyKey,
		"--peer-trusted-ca-file=" + peer + certs.KeyCA,
		"--peer-client-cert-auth=true",
		"--cert-file=" + server + certs.KeyCert,
		"--key-file=" + server + certs.KeyKey,
		"--trusted-ca-file=" + server + certs.KeyCA,
		"--client-cert-auth=true",
	}
}

func tlsVolumes(c *etcdv1alpha1.EtcdCluster) ([]corev1.Volume, []corev1.VolumeMount) {
	if c.Spec.TLS == nil {
		return nil, nil
	}
	names := TLSSecrets(c)
	return []corev1.Volume{tlsSecretVolume(c, peerTLSVolume, names.Peer), tlsSecretVolume(c, serverTLSVolume, names.Server)},
		[]corev1.VolumeMount{
			{Name: peerTLSVolume, MountPath: tlsMount + "/peer", ReadOnly: true},
			{Name: serverTLSVolume, MountPath: tlsMount + "/server", ReadOnly: true},
		}
}
