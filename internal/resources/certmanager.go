package resources

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
)

// CertificateGVK is cert-manager's Certificate. The operator makes them as unstructured
// objects: cert-manager is an optional dependency, not a Go module of the operator.
var CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// CertificateRequestGVK is the request cert-manager makes for each issuance of a Certificate,
// whose status says why an issuer did not sign.
var CertificateRequestGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "CertificateRequest"}

// UserCertificate is the kind of the client certificate issued for applications with provider
// CertManager (status.certificates and the Certificate's name): not the operator's, whose
// common name is root.
const UserCertificate certs.Kind = "user"

// userCommonName is the user certificate's common name: etcd takes it as the user's name when
// authentication is on and the client gives no password.
const userCommonName = "user"

// IssuedCertificate is one of the cert-manager Certificates of a cluster: the Certificate and
// the Secret cert-manager writes share the name.
type IssuedCertificate struct {
	Kind certs.Kind
	Name string
}

// CertManagerCertificates are a cluster's Certificates with provider CertManager, in the order
// they are made and reported: peer, server, the operator's client (root), the users' client.
func CertManagerCertificates(c *etcdv1alpha1.EtcdCluster) []IssuedCertificate {
	names := TLSSecrets(c)
	return []IssuedCertificate{
		{Kind: certs.Peer, Name: names.Peer},
		{Kind: certs.Server, Name: names.Server},
		{Kind: certs.Client, Name: names.Client},
		{Kind: UserCertificate, Name: UserTLSSecretName(c.Name)},
	}
}

// UserTLSSecretName is the Secret of the client certificate for applications (provider
// CertManager).
func UserTLSSecretName(cluster string) string { return cluster + "-user-tls" }

// TrustBundleSecretName is the Secret whose ca.crt members, the operator and its Jobs trust
// with provider CertManager: the CA of the first certificates cert-manager issued.
func TrustBundleSecretName(cluster string) string { return cluster + "-trust-bundle" }

// TrustBundle is the trust bundle Secret holding caPEM.
func TrustBundle(c *etcdv1alpha1.EtcdCluster, caPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: TrustBundleSecretName(c.Name), Namespace: c.Namespace, Labels: ClusterLabels(c)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{certs.KeyCA: caPEM},
	}
}

// Certificate is the cert-manager Certificate of one of the cluster's certificates: the names
// and usages the operator's own certificates of that kind have (CertificateRequest), the
// lifetime of spec.tls, and a new ECDSA P-256 key at every issuance. The Secret cert-manager
// writes carries the cluster's labels but the operator's (LabelManagedBy): it is cert-manager's.
func Certificate(c *etcdv1alpha1.EtcdCluster, ic IssuedCertificate) *unstructured.Unstructured {
	kind := ic.Kind
	if kind == UserCertificate {
		kind = certs.Client
	}
	req := CertificateRequest(c, kind)
	if ic.Kind == UserCertificate {
		req.CommonName = userCommonName
	}
	usages := []any{"digital signature", "client auth"}
	if kind == certs.Peer || kind == certs.Server {
		usages = []any{"digital signature", "server auth", "client auth"}
	}
	ref := CertificateIssuer(c)
	spec := map[string]any{
		"secretName":     ic.Name,
		"commonName":     req.CommonName,
		"duration":       req.Validity.String(),
		"usages":         usages,
		"privateKey":     map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
		"issuerRef":      map[string]any{"name": ref.Name, "kind": ref.Kind, "group": ref.Group},
		"secretTemplate": map[string]any{"labels": stringMap(secretLabels(c))},
	}
	if len(req.DNSNames) > 0 {
		spec["dnsNames"] = stringList(req.DNSNames)
	}
	if len(req.IPs) > 0 {
		ips := make([]string, len(req.IPs))
		for i, ip := range req.IPs {
			ips[i] = ip.String()
		}
		spec["ipAddresses"] = stringList(ips)
	}
	if rb := c.Spec.TLS.RenewBefore; rb != nil {
		spec["renewBefore"] = rb.Duration.String()
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	obj.SetGroupVersionKind(CertificateGVK)
	obj.SetName(ic.Name)
	obj.SetNamespace(c.Namespace)
	obj.SetLabels(ClusterLabels(c))
	return obj
}

// CertificateIssuer is the issuer the cluster's Certificates name: spec.tls.certManager.issuerRef,
// except while a CA rotation moves the cluster to it: the issuer it comes from until every
// member trusts the new CA too (Prepare, TrustBoth), the one whose CA it moves to from then on
// until Done.
func CertificateIssuer(c *etcdv1alpha1.EtcdCluster) etcdv1alpha1.IssuerReference {
	spec := c.Spec.TLS.CertManager.IssuerRef
	rot := c.Status.CARotation
	if rot == nil || rot.FromIssuer == nil {
		return spec
	}
	switch rot.Phase {
	case "Prepare", "TrustBoth":
		return *rot.FromIssuer
	case "Reissue", "DropOld":
		if rot.ToIssuer != nil {
			return *rot.ToIssuer
		}
	}
	return spec
}

// CAProbeName is the Certificate (and Secret) of a client certificate from the old or the new
// issuer (which "old" or "new"), made while a CA rotation runs (provider CertManager): with it
// the operator asks each member whether it trusts that issuer's CA.
func CAProbeName(cluster, which string) string { return cluster + "-ca-probe-" + which }

// CAProbeCertificate is the Certificate of the probe from issuer.
func CAProbeCertificate(c *etcdv1alpha1.EtcdCluster, which string, issuer etcdv1alpha1.IssuerReference) *unstructured.Unstructured {
	name := CAProbeName(c.Name, which)
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"secretName":     name,
		"commonName":     "etcd-operator-ca-probe",
		"duration":       "1h",
		"usages":         []any{"digital signature", "client auth"},
		"privateKey":     map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
		"issuerRef":      map[string]any{"name": issuer.Name, "kind": issuer.Kind, "group": issuer.Group},
		"secretTemplate": map[string]any{"labels": stringMap(secretLabels(c))},
	}}}
	obj.SetGroupVersionKind(CertificateGVK)
	obj.SetName(name)
	obj.SetNamespace(c.Namespace)
	obj.SetLabels(ClusterLabels(c))
	return obj
}

// secretLabels are the labels of the Secrets cert-manager writes: the cluster's, so that
// `kubectl get secret -l` finds them, but not LabelManagedBy, which would take them, private
// keys and all, into the operator's cache and have them read as the operator's own.
func secretLabels(c *etcdv1alpha1.EtcdCluster) map[string]string {
	labels := maps.Clone(ClusterLabels(c))
	delete(labels, LabelManagedBy)
	return labels
}

func stringList(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// tlsSecretVolume mounts a certificate Secret as a directory of tls.crt, tls.key and ca.crt,
// never by subPath, which the kubelet does not refresh. With provider CertManager the ca.crt
// is the trust bundle's, not the one cert-manager writes beside the certificate: cert-manager
// advises against trusting that one, which changes with the issuer's CA, so the members'
// trust would follow whatever CA the issuer is given.
func tlsSecretVolume(c *etcdv1alpha1.EtcdCluster, volume, secret string) corev1.Volume {
	if c.Spec.TLS == nil || c.Spec.TLS.Provider != etcdv1alpha1.TLSProviderCertManager {
		return corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
	}
	return corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret},
				Items:                []corev1.KeyToPath{{Key: certs.KeyCert, Path: certs.KeyCert}, {Key: certs.KeyKey, Path: certs.KeyKey}},
			}},
			{Secret: &corev1.SecretProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: TrustBundleSecretName(c.Name)},
				Items:                []corev1.KeyToPath{{Key: certs.KeyCA, Path: certs.KeyCA}},
			}},
		},
	}}}
}
