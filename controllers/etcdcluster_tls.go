package controllers

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// tlsState is what the operator needs to talk TLS to a cluster, and what status reports.
type tlsState struct {
	clientConfig *tls.Config
	// fingerprint changes when the client certificate or CA does, so that the cached etcd
	// client is rebuilt then and only then.
	fingerprint  string
	certificates []etcdv1alpha1.CertificateStatus
	// trustedCAHash is resources.TrustedCAHash of the user's Secrets (tls.provider Secrets):
	// what members must have loaded; "" for the other providers.
	trustedCAHash string
	// problem is what the certificates of a running cluster need from the user (provider
	// CertManager), reported as Degraded; nil when none.
	problem *tlsProblem
}

// ensureCertificates makes sure a TLS cluster has its certificates — issuing and renewing the
// operator's own, checking the user's — and returns the operator's client configuration.
func (r *EtcdClusterReconciler) ensureCertificates(ctx context.Context, c *etcdv1alpha1.EtcdCluster, now time.Time) (*tlsState, error) {
	if c.Spec.TLS == nil {
		return nil, nil
	}
	if c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderCertManager {
		return r.ensureCertManagerTLS(ctx, c)
	}
	if c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderOperator {
		if err := r.issueCertificates(ctx, c, now); err != nil {
			return nil, err
		}
	}
	return r.loadTLSState(ctx, c)
}

// defaultRenewBefore is tls.renewBefore's default.
const defaultRenewBefore = 30 * 24 * time.Hour

// issueCertificates makes the cluster's CA if it has none, begins its replacement when one is
// asked for or due (status.caRotation; etcdcluster_carotation.go carries it out), and issues
// and renews the leaves from it.
func (r *EtcdClusterReconciler) issueCertificates(ctx context.Context, c *etcdv1alpha1.EtcdCluster, now time.Time) error {
	renewBefore := defaultRenewBefore
	if c.Spec.TLS.RenewBefore != nil {
		renewBefore = c.Spec.TLS.RenewBefore.Duration
	}
	caSecret, err := getSecret(ctx, r.Client, c.Namespace, resources.CASecretName(c.Name))
	if err != nil {
		return err
	}
	ca := certs.KeyPair{}
	if caSecret != nil {
		ca = certs.KeyPair{CertPEM: caSecret.Data[certs.KeyCert], KeyPEM: caSecret.Data[certs.KeyKey]}
	}
	caReq := certs.Request{Kind: certs.CA, Validity: 10 * resources.CertificateRequest(c, certs.Peer).Validity}
	reason, why, renew := certs.NeedsRenewal(ca, nil, caReq, renewBefore, now)
	switch {
	case caSecret == nil:
		if ca, err = certs.NewCA(c.Name+"-ca", caReq.Validity, now); err != nil {
			return err
		}
		if err := r.writeSecret(ctx, c, resources.CASecretName(c.Name), corev1.SecretTypeOpaque, ca, ca.CertPEM); err != nil {
			return err
		}
		postEvent(r.Recorder, c, corev1.EventTypeNormal, "CACreated", "IssueCertificate", "made the cluster's CA")
		// gofail: var caCreated struct{}
	case renew && (reason != certs.ReasonExpiring || caExpired(ca.CertPEM, now)):
		// A CA that cannot be read, or has expired, is not replaced: a rotation replaces one
		// without downtime only while members still accept each other's certificates, and
		// proves at each step which CA each member holds to; past that, every member must be
		// restarted on new certificates at once, which is the user's call.
		return fmt.Errorf("the CA in Secret %s must be replaced by hand (%s: %s)", resources.CASecretName(c.Name), reason, why)
	default:
		rotation, why, err := caRotationToBegin(c, ca.CertPEM, now)
		if err != nil {
			return err
		}
		if rotation != nil {
			c.Status.CARotation = rotation
			postEvent(r.Recorder, c, corev1.EventTypeNormal, "CARotationStarted", "RotateCA", "replacing the cluster's CA without downtime: %s", why)
		}
	}
	return r.issueLeaves(ctx, c, ca, renewBefore, now)
}

// caExpired: the PEM CA's validity is over.
func caExpired(caPEM []byte, now time.Time) bool {
	notAfter, err := certs.NotAfter(caPEM)
	return err == nil && now.After(notAfter)
}

// issueLeaves issues and renews the peer, server and client certificates from ca, each with
// the trust bundle as its ca.crt.
func (r *EtcdClusterReconciler) issueLeaves(ctx context.Context, c *etcdv1alpha1.EtcdCluster, ca certs.KeyPair, renewBefore time.Duration, now time.Time) error {
	caNotAfter, err := certs.NotAfter(ca.CertPEM)
	if err != nil {
		return fmt.Errorf("the CA in Secret %s: %w", resources.CASecretName(c.Name), err)
	}
	names := resources.TLSSecrets(c)
	// In a fixed order, so that events and a failure part-way read the same on every run.
	for _, issue := range []struct {
		kind certs.Kind
		name string
	}{{certs.Peer, names.Peer}, {certs.Server, names.Server}, {certs.Client, names.Client}} {
		kind, name := issue.kind, issue.name
		secret, err := getSecret(ctx, r.Client, c.Namespace, name)
		if err != nil {
			return err
		}
		current := certs.KeyPair{}
		if secret != nil {
			current = certs.KeyPair{CertPEM: secret.Data[certs.KeyCert], KeyPEM: secret.Data[certs.KeyKey]}
		}
		req := resources.CertificateRequest(c, kind)
		reason, why, renew := certs.NeedsRenewal(current, ca.CertPEM, req, renewBefore, now)
		if !renew {
			continue
		}
		if notAfter, err := certs.NotAfter(current.CertPEM); reason == certs.ReasonExpiring && err == nil && !notAfter.Before(caNotAfter) {
			// It already lives as long as its CA: one issued now would too, and be renewed at
			// once, again and again. The CA's replacement (status.caRotation) renews it.
			continue
		}
		bundle, err := r.trustBundle(ctx, c, ca.CertPEM)
		if err != nil {
			return err
		}
		issued, err := certs.Issue(ca, req, now)
		if err != nil {
			return err
		}
		if err := r.writeSecret(ctx, c, name, corev1.SecretTypeTLS, issued, bundle); err != nil {
			return err
		}
		postEvent(r.Recorder, c, corev1.EventTypeNormal, "CertificateIssued", "IssueCertificate", "issued the %s certificate (Secret %s): %s: %s", kind, name, reason, why)
		// gofail: var certificateIssued struct{}
	}
	return nil
}

// loadTLSState reads the client certificate and the CA, and the expiry of every certificate.
// The operator's own Secrets are in the cache; the user's (provider Secrets) are not, and are
// read from the API server.
func (r *EtcdClusterReconciler) loadTLSState(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*tlsState, error) {
	if c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderCertManager {
		return r.loadCertManagerTLSState(ctx, c, nil)
	}
	names := resources.TLSSecrets(c)
	state := &tlsState{}
	var from client.Reader = r.Client
	if c.Spec.TLS.Provider != etcdv1alpha1.TLSProviderOperator {
		from = r.APIReader
	}
	kinds := []struct {
		kind certs.Kind
		name string
	}{{certs.Peer, names.Peer}, {certs.Server, names.Server}, {certs.Client, names.Client}}
	if c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderOperator {
		kinds = append([]struct {
			kind certs.Kind
			name string
		}{{certs.CA, resources.CASecretName(c.Name)}}, kinds...)
	}
	trust := map[certs.Kind]certs.SecretData{}
	for _, k := range kinds {
		secret, err := getSecret(ctx, from, c.Namespace, k.name)
		if err != nil {
			return nil, err
		}
		if secret == nil {
			return nil, fmt.Errorf("TLS Secret %s (%s certificate) not found", k.name, k.kind)
		}
		notAfter, err := certs.NotAfter(secret.Data[certs.KeyCert])
		if err != nil {
			return nil, fmt.Errorf("TLS Secret %s: %s: %w", k.name, certs.KeyCert, err)
		}
		cs := etcdv1alpha1.CertificateStatus{Name: string(k.kind), SecretName: k.name, NotAfter: &metav1.Time{Time: notAfter}}
		if c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderOperator && k.kind != certs.CA && c.Spec.TLS.RenewBefore != nil {
			cs.RenewalTime = &metav1.Time{Time: certs.RenewalTime(notAfter, c.Spec.TLS.RenewBefore.Duration)}
		}
		state.certificates = append(state.certificates, cs)
		if k.kind == certs.Client {
			if state.clientConfig, err = clientTLSConfig(secret); err != nil {
				return nil, fmt.Errorf("TLS Secret %s: %w", k.name, err)
			}
			state.fingerprint = k.name + "@" + secret.ResourceVersion
		}
		trust[k.kind] = certs.SecretData{Name: k.name, Cert: secret.Data[certs.KeyCert], CA: secret.Data[certs.KeyCA]}
	}
	// The operator's own certificates come from one CA and are reissued when they do not chain
	// to it; the user's may come from a CA per kind, and must trust each other.
	if c.Spec.TLS.Provider == etcdv1alpha1.TLSProviderSecrets {
		if err := certs.CheckTrust(trust[certs.Peer], trust[certs.Server], trust[certs.Client], r.now()); err != nil {
			return nil, err
		}
		state.trustedCAHash = resources.TrustedCAHash(trust[certs.Peer].CA, trust[certs.Server].CA)
	}
	return state, nil
}

// userTrustedCAHash is resources.TrustedCAHash of the user's Secrets, read from the API server,
// for a cluster with tls.provider Secrets; "" for any other.
func (r *EtcdClusterReconciler) userTrustedCAHash(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (string, error) {
	if c.Spec.TLS == nil || c.Spec.TLS.Provider != etcdv1alpha1.TLSProviderSecrets {
		return "", nil
	}
	names := resources.TLSSecrets(c)
	var cas [][]byte
	for _, name := range []string{names.Peer, names.Server} {
		secret, err := getSecret(ctx, r.APIReader, c.Namespace, name)
		if err != nil {
			return "", err
		}
		if secret == nil {
			return "", fmt.Errorf("TLS Secret %s not found", name)
		}
		cas = append(cas, secret.Data[certs.KeyCA])
	}
	return resources.TrustedCAHash(cas[0], cas[1]), nil
}

func clientTLSConfig(secret *corev1.Secret) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(secret.Data[certs.KeyCert], secret.Data[certs.KeyKey])
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data[certs.KeyCA]) {
		return nil, fmt.Errorf("no CA certificate under %s", certs.KeyCA)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// getSecret reads a Secret, or nil if there is none. from is the cached client for the
// operator's own Secrets, the API reader for the user's: the cache holds only the operator's
// (CacheOptions), and would report any other as missing.
func getSecret(ctx context.Context, from client.Reader, namespace, name string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	if err := from.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("get Secret %s: %w", name, err)
	}
	return secret, nil
}

// writeSecret creates or replaces an operator-owned certificate Secret.
func (r *EtcdClusterReconciler) writeSecret(ctx context.Context, c *etcdv1alpha1.EtcdCluster, name string, secretType corev1.SecretType, kp certs.KeyPair, caPEM []byte) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	existing, err := getSecret(ctx, r.Client, c.Namespace, name)
	if err != nil {
		return err
	}
	data := map[string][]byte{certs.KeyCert: kp.CertPEM, certs.KeyKey: kp.KeyPEM, certs.KeyCA: caPEM}
	if existing != nil {
		if maps.EqualFunc(existing.Data, data, bytes.Equal) {
			return nil // written already: a step taken again after a crash, or on a stale cache
		}
		existing.Data = data
		if err := r.Update(ctx, existing); err != nil {
			return fmt.Errorf("update Secret %s: %w", name, err)
		}
		// gofail: var certificateRenewed struct{}
		return nil
	}
	secret.Type, secret.Data, secret.Labels = secretType, data, resources.ClusterLabels(c)
	return r.createOwned(ctx, c, secret)
}
