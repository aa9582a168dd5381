package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// With provider CertManager the CA is the issuer's, and a cluster moves to another CA by moving
// to another issuer: a change of tls.certManager.issuerRef begins the same rotation as the
// Operator provider's (etcdcluster_carotation.go), with these differences. The Certificates keep
// the old issuer until every member trusts both CAs (resources.CertificateIssuer), then take
// the new one and cert-manager issues them again (Reissue). The new CA is the root of the chain
// cert-manager writes beside a client certificate from the new issuer (a probe Certificate),
// checked to sign it; the trust bundle is the Secret <cluster>-trust-bundle, whose ca.crt
// members mount. The probes that ask members which CA they trust are client certificates
// cert-manager issues from each issuer; the operator reads their keys to connect, as it reads
// its own client key, and writes none.

// caRotationTriggerIssuer: tls.certManager.issuerRef names another issuer.
const caRotationTriggerIssuer = "IssuerChanged"

// beginIssuerChange begins a rotation when spec.tls.certManager.issuerRef names another issuer
// than the cluster's Certificates do, once the cluster has its trust bundle (a cluster being
// made takes the CA of its first issuer) and no rotation is under way (one under way moves to
// the issuer it recorded; another change begins the next one after it).
func (r *EtcdClusterReconciler) beginIssuerChange(ctx context.Context, c *etcdv1alpha1.EtcdCluster) error {
	if caRotationUnderway(c) {
		return nil
	}
	bundle, err := getSecret(ctx, r.APIReader, c.Namespace, resources.TrustBundleSecretName(c.Name))
	if err != nil || bundle == nil {
		return err
	}
	peer := &unstructured.Unstructured{}
	peer.SetGroupVersionKind(resources.CertificateGVK)
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.TLSSecrets(c).Peer}, peer); err != nil {
		return client.IgnoreNotFound(err)
	}
	current := issuerOfCertificate(peer)
	wanted := c.Spec.TLS.CertManager.IssuerRef
	if current == wanted {
		return nil
	}
	cas, err := certs.ParseBundle(bundle.Data[certs.KeyCA])
	if err != nil {
		return fmt.Errorf("trust bundle Secret %s: %w", bundle.Name, err)
	}
	why := fmt.Sprintf("tls.certManager.issuerRef names %s %s; the certificates come from %s %s", wanted.Kind, wanted.Name, current.Kind, current.Name)
	c.Status.CARotation = &etcdv1alpha1.CARotationStatus{
		Phase: etcdv1alpha1.CARotationPhase(certs.RotationPrepare), OldCA: certs.Fingerprint(cas[0]),
		Trigger: caRotationTriggerIssuer, FromIssuer: &current, Annotation: c.Annotations[etcdv1alpha1.AnnotationRotateCA],
		StartTime: metav1.NewTime(r.now()), Message: why,
	}
	postEvent(r.Recorder, c, corev1.EventTypeNormal, "CARotationStarted", "RotateCA", "moving to another issuer's CA without downtime: %s", why)
	return nil
}

func issuerOfCertificate(cert *unstructured.Unstructured) etcdv1alpha1.IssuerReference {
	ref, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
	return etcdv1alpha1.IssuerReference{Name: ref["name"], Kind: ref["kind"], Group: ref["group"]}
}

// ensureCAProbes makes the probe Certificates of a rotation under way: one from the issuer it
// leaves, one from the issuer it moves to.
func (r *EtcdClusterReconciler) ensureCAProbes(ctx context.Context, c *etcdv1alpha1.EtcdCluster) error {
	rot := c.Status.CARotation
	if !caRotationUnderway(c) || rot.FromIssuer == nil {
		return nil
	}
	to := c.Spec.TLS.CertManager.IssuerRef
	if rot.ToIssuer != nil {
		to = *rot.ToIssuer
	}
	for which, issuer := range map[string]etcdv1alpha1.IssuerReference{"old": *rot.FromIssuer, "new": to} {
		desired := resources.CAProbeCertificate(c, which, issuer)
		current := &unstructured.Unstructured{}
		current.SetGroupVersionKind(resources.CertificateGVK)
		err := r.Get(ctx, client.ObjectKeyFromObject(desired), current)
		switch {
		case client.IgnoreNotFound(err) != nil:
			return fmt.Errorf("get Certificate %s: %w", desired.GetName(), err)
		case err != nil:
			if err := r.createOwned(ctx, c, desired); err != nil {
				return err
			}
		case syncCertificateSpec(current, desired):
			if err := r.Update(ctx, current); err != nil {
				return fmt.Errorf("update Certificate %s: %w", desired.GetName(), err)
			}
		}
	}
	return nil
}

// readCertManagerRotationMaterial is the rotation's material with provider CertManager: the two
// CAs from the rotation's Secret (certificates only), the probes from the Secrets cert-manager
// wrote for the probe Certificates. nil while the rotation's Secret is not made; no probes while
// cert-manager has not issued them.
func (r *EtcdClusterReconciler) readCertManagerRotationMaterial(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*rotationMaterial, error) {
	secret, err := getSecret(ctx, r.Client, c.Namespace, resources.CARotationSecretName(c.Name))
	if err != nil || secret == nil {
		return nil, err
	}
	m := &rotationMaterial{secret: secret, oldPEM: secret.Data[rotationOldCACert], newPEM: secret.Data[rotationNewCACert], cas: map[string]*x509.Certificate{}}
	var fps []string
	for _, key := range []string{rotationOldCACert, rotationNewCACert} {
		cas, err := certs.ParseBundle(secret.Data[key])
		if err != nil {
			return nil, fmt.Errorf("Secret %s, key %s: %w", secret.Name, key, err)
		}
		fp := certs.Fingerprint(cas[0])
		m.cas[fp], fps = cas[0], append(fps, fp)
	}
	if rot := c.Status.CARotation; rot != nil && fps[0] != rot.OldCA {
		return nil, nil
	}
	for i, which := range []string{"old", "new"} {
		probe, err := getSecret(ctx, r.APIReader, c.Namespace, resources.CAProbeName(c.Name, which))
		if err != nil {
			return nil, err
		}
		if probe == nil {
			return m, nil
		}
		pair, err := tls.X509KeyPair(probe.Data[certs.KeyCert], probe.Data[certs.KeyKey])
		if err != nil {
			return m, nil //nolint:nilerr // being written by cert-manager: asked again
		}
		m.probes = append(m.probes, etcd.TrustProbe{CA: fps[i], Certificate: pair})
	}
	return m, nil
}

// obtainNewIssuerCA records the CA of the issuer the rotation moves to: the root of the chain
// cert-manager wrote beside the new probe, which must sign the probe. An issuer whose CA is the
// one members trust already needs no rotation: it ends at once, the Certificates moving to it.
func (r *EtcdClusterReconciler) obtainNewIssuerCA(ctx context.Context, c *etcdv1alpha1.EtcdCluster) (*rotationMaterial, bool, error) {
	rot := c.Status.CARotation
	probe, err := getSecret(ctx, r.APIReader, c.Namespace, resources.CAProbeName(c.Name, "new"))
	if err != nil || probe == nil {
		return nil, false, err
	}
	issuer := etcdv1alpha1.IssuerReference{Name: probe.Annotations["cert-manager.io/issuer-name"],
		Kind: probe.Annotations["cert-manager.io/issuer-kind"], Group: probe.Annotations["cert-manager.io/issuer-group"]}
	wanted := c.Spec.TLS.CertManager.IssuerRef
	if issuer != wanted {
		return nil, false, nil // not yet issued from the issuer the spec names
	}
	root, err := certs.TrustRoots(probe.Data[certs.KeyCA])
	if err != nil {
		return nil, false, fmt.Errorf("Secret %s: %s: %w: the issuer does not give the CA that signs its certificates; use a CA or self-signed issuer", probe.Name, certs.KeyCA, err)
	}
	if err := certs.VerifyChain(probe.Data[certs.KeyCert], root, r.now()); err != nil {
		return nil, false, fmt.Errorf("the certificate in Secret %s does not chain to the CA in its %s: %w", probe.Name, certs.KeyCA, err)
	}
	roots, err := certs.ParseBundle(root)
	if err != nil {
		return nil, false, err
	}
	rot.ToIssuer = &issuer
	if certs.Fingerprint(roots[0]) == rot.OldCA {
		return nil, true, nil
	}
	bundle, err := getSecret(ctx, r.APIReader, c.Namespace, resources.TrustBundleSecretName(c.Name))
	if err != nil {
		return nil, false, err
	}
	if bundle == nil {
		return nil, false, fmt.Errorf("trust bundle Secret %s not found", resources.TrustBundleSecretName(c.Name))
	}
	oldPEM, err := caPEMOf(bundle.Data[certs.KeyCA], rot.OldCA)
	if err != nil {
		return nil, false, fmt.Errorf("trust bundle Secret %s: %w", bundle.Name, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: resources.CARotationSecretName(c.Name), Namespace: c.Namespace, Labels: resources.ClusterLabels(c)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{rotationOldCACert: oldPEM, rotationNewCACert: certs.JoinBundle(root)},
	}
	if err := r.writeRotationSecret(ctx, c, secret); err != nil {
		return nil, false, err
	}
	return &rotationMaterial{secret: secret, oldPEM: oldPEM, newPEM: secret.Data[rotationNewCACert]}, false, nil
}

// caPEMOf is the PEM certificate of the CA with that fingerprint in bundle.
func caPEMOf(bundle []byte, fingerprint string) ([]byte, error) {
	cas, err := certs.ParseBundle(bundle)
	if err != nil {
		return nil, err
	}
	for _, ca := range cas {
		if certs.Fingerprint(ca) == fingerprint {
			return certs.JoinBundle(pemOf(ca)), nil
		}
	}
	return nil, fmt.Errorf("no CA %s in it", fingerprint)
}

// finishCertManagerRotation deletes what a rotation made and no longer needs: the probe
// Certificates and the Secrets cert-manager wrote for them (client certificates members accept).
func (r *EtcdClusterReconciler) finishCertManagerRotation(ctx context.Context, c *etcdv1alpha1.EtcdCluster) error {
	for _, which := range []string{"old", "new"} {
		name := resources.CAProbeName(c.Name, which)
		cert := &unstructured.Unstructured{}
		cert.SetGroupVersionKind(resources.CertificateGVK)
		cert.SetNamespace(c.Namespace)
		cert.SetName(name)
		if err := r.Delete(ctx, cert); ignoreGone(err) != nil {
			return fmt.Errorf("delete Certificate %s: %w", name, err)
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
		if err := r.Delete(ctx, secret); ignoreGone(err) != nil {
			return fmt.Errorf("delete Secret %s: %w", name, err)
		}
	}
	return nil
}

func pemOf(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}
