package controllers

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The operator's client verifies members against the trust bundle, never the ca.crt
// cert-manager wrote beside its key, and is made anew when its certificate is renewed or the
// bundle changes: both are in the fingerprint.
func TestCertManagerClientTrustsTheBundleAndFollowsRenewals(t *testing.T) {
	now := time.Now()
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1"},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 1, TLS: &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderCertManager,
			CertManager: &etcdv1alpha1.CertManagerTLS{IssuerRef: etcdv1alpha1.IssuerReference{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"}}}}}
	trusted, err := certs.NewCA("trusted", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	written, err := certs.NewCA("written-beside", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	objects := []*corev1.Secret{resources.TrustBundle(c, trusted.CertPEM)}
	for _, ic := range resources.CertManagerCertificates(c) {
		leaf, err := certs.Issue(trusted, certs.Request{Kind: certs.Client, CommonName: "root", Validity: time.Hour}, now)
		if err != nil {
			t.Fatal(err)
		}
		objects = append(objects, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ic.Name, Namespace: c.Namespace},
			Data: map[string][]byte{certs.KeyCert: leaf.CertPEM, certs.KeyKey: leaf.KeyPEM, certs.KeyCA: written.CertPEM}})
	}
	builder := fake.NewClientBuilder().WithScheme(testScheme(t))
	for _, o := range objects {
		builder = builder.WithObjects(o)
	}
	k8s := builder.Build()
	r := &EtcdClusterReconciler{Client: k8s, APIReader: k8s, CertManager: true}
	load := func() *tlsState {
		t.Helper()
		state, err := r.loadTLSState(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		return state
	}

	first := load()
	if first.problem != nil {
		t.Fatalf("problem %+v with every certificate from the trusted CA", first.problem)
	}
	want := x509.NewCertPool()
	want.AppendCertsFromPEM(trusted.CertPEM)
	if !first.clientConfig.RootCAs.Equal(want) {
		t.Fatal("the operator's client does not trust the bundle's CA alone")
	}

	update := func(name string, change func(*corev1.Secret)) {
		t.Helper()
		s := &corev1.Secret{}
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		change(s)
		if err := k8s.Update(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	update(resources.TLSSecrets(c).Client, func(s *corev1.Secret) { s.Data[certs.KeyCA] = trusted.CertPEM })
	renewed := load()
	if renewed.fingerprint == first.fingerprint {
		t.Errorf("fingerprint %q unchanged after the client Secret changed", renewed.fingerprint)
	}
	update(resources.TrustBundleSecretName(c.Name), func(s *corev1.Secret) { s.Labels = map[string]string{"touched": "yes"} })
	if rebundled := load(); rebundled.fingerprint == renewed.fingerprint {
		t.Errorf("fingerprint %q unchanged after the trust bundle changed", rebundled.fingerprint)
	}
}

func certificateWith(generation int64, conditions ...map[string]any) *unstructured.Unstructured {
	cert := &unstructured.Unstructured{Object: map[string]any{}}
	cert.SetName("c-peer-tls")
	cert.SetGeneration(generation)
	list := make([]any, len(conditions))
	for i, cond := range conditions {
		list[i] = cond
	}
	_ = unstructured.SetNestedSlice(cert.Object, list, "status", "conditions")
	return cert
}

func cond(condType, status, reason, message string, observed int64) map[string]any {
	return map[string]any{"type": condType, "status": status, "reason": reason, "message": message, "observedGeneration": observed}
}

// What cert-manager says of a Certificate and of its latest request, read as: ready or not,
// failing or still under way, and its own words for either.
func TestCertificateReadinessInCertManagersWords(t *testing.T) {
	pending := &unstructured.Unstructured{Object: map[string]any{}}
	pending.SetName("c-peer-tls-1")
	_ = unstructured.SetNestedSlice(pending.Object, []any{map[string]any{"type": "Ready", "status": "False", "reason": "Pending",
		"message": `Referenced "Issuer" not found`}}, "status", "conditions")
	denied := &unstructured.Unstructured{Object: map[string]any{}}
	denied.SetName("c-peer-tls-2")
	_ = unstructured.SetNestedSlice(denied.Object, []any{map[string]any{"type": "Denied", "status": "True", "reason": "Policy",
		"message": "not allowed"}}, "status", "conditions")
	for _, tc := range []struct {
		name          string
		cert, request *unstructured.Unstructured
		ready, failed bool
		says          string
	}{
		{"new", certificateWith(1), nil, false, false, "not issued yet"},
		{"issuing", certificateWith(1, cond("Ready", "False", "DoesNotExist", "Issuing certificate as Secret does not exist", 1)), nil, false, false, "DoesNotExist"},
		{"issuer not found", certificateWith(1, cond("Ready", "False", "DoesNotExist", "", 1)), pending, false, true, `Referenced "Issuer" not found`},
		{"denied", certificateWith(1, cond("Ready", "False", "DoesNotExist", "", 1)), denied, false, true, "Denied, Policy: not allowed"},
		{"ready", certificateWith(2, cond("Ready", "True", "Ready", "up to date", 2)), nil, true, false, ""},
		{"changed spec not seen", certificateWith(3, cond("Ready", "True", "Ready", "up to date", 2)), nil, false, false, "changed spec"},
		{"renewal failing", certificateWith(2, cond("Ready", "True", "Ready", "up to date", 2), cond("Issuing", "False", "Failed", "issuer refused", 2)), nil, true, true, "issuer refused"},
	} {
		ready, message, failed := certificateReadiness(tc.cert, tc.request)
		if ready != tc.ready || failed != tc.failed || !strings.Contains(message, tc.says) || (tc.says == "") != (message == "") {
			t.Errorf("%s: ready %v failed %v %q; want %v %v saying %q", tc.name, ready, failed, message, tc.ready, tc.failed, tc.says)
		}
	}
}

// Only the fields the operator sets are put back, and only when they differ.
func TestSyncCertificateSpecChangesOnlyWhatTheOperatorSets(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
		Spec: etcdv1alpha1.EtcdClusterSpec{TLS: &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderCertManager,
			Validity:    &metav1.Duration{Duration: 8760 * time.Hour},
			CertManager: &etcdv1alpha1.CertManagerTLS{IssuerRef: etcdv1alpha1.IssuerReference{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"}}}}}
	ic := resources.CertManagerCertificates(c)[0]
	current := resources.Certificate(c, ic)
	_ = unstructured.SetNestedField(current.Object, "added by hand", "spec", "literalSubject")
	if syncCertificateSpec(current, resources.Certificate(c, ic)) {
		t.Fatal("an unchanged Certificate was changed")
	}
	c.Spec.TLS.RenewBefore = &metav1.Duration{Duration: time.Hour}
	if !syncCertificateSpec(current, resources.Certificate(c, ic)) {
		t.Fatal("a new renewBefore did not change the Certificate")
	}
	if rb, _, _ := unstructured.NestedString(current.Object, "spec", "renewBefore"); rb != "1h0m0s" {
		t.Errorf("renewBefore %q", rb)
	}
	if s, _, _ := unstructured.NestedString(current.Object, "spec", "literalSubject"); s != "added by hand" {
		t.Error("a field the operator does not set was removed")
	}
	c.Spec.TLS.RenewBefore = nil
	if !syncCertificateSpec(current, resources.Certificate(c, ic)) {
		t.Fatal("renewBefore removed from the spec stayed on the Certificate")
	}
	if _, found, _ := unstructured.NestedString(current.Object, "spec", "renewBefore"); found {
		t.Error("renewBefore still set")
	}
}
