package resources

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
)

func certManagerCluster() *etcdv1alpha1.EtcdCluster {
	c := testCluster()
	c.Spec.TLS = &etcdv1alpha1.TLSSpec{
		Provider:    etcdv1alpha1.TLSProviderCertManager,
		CertManager: &etcdv1alpha1.CertManagerTLS{IssuerRef: etcdv1alpha1.IssuerReference{Name: "ca", Kind: "ClusterIssuer", Group: "cert-manager.io"}},
		Validity:    &metav1.Duration{Duration: 48 * time.Hour},
		RenewBefore: &metav1.Duration{Duration: 12 * time.Hour},
	}
	return c
}

func stringsAt(t *testing.T, obj *unstructured.Unstructured, path ...string) []string {
	t.Helper()
	s, _, err := unstructured.NestedStringSlice(obj.Object, path...)
	if err != nil {
		t.Fatalf("%v: %v", path, err)
	}
	return s
}

func stringAt(t *testing.T, obj *unstructured.Unstructured, path ...string) string {
	t.Helper()
	s, _, err := unstructured.NestedString(obj.Object, path...)
	if err != nil {
		t.Fatalf("%v: %v", path, err)
	}
	return s
}

// The Certificates ask cert-manager for what the operator issues itself with provider Operator:
// the same names, addresses and common names, the lifetime of spec.tls, and a new P-256 key at
// every issuance, from the issuer the spec names.
func TestCertManagerCertificatesMatchTheOperatorsOwn(t *testing.T) {
	c := certManagerCluster()
	list := CertManagerCertificates(c)
	var kinds []certs.Kind
	for _, ic := range list {
		kinds = append(kinds, ic.Kind)
	}
	if !slices.Equal(kinds, []certs.Kind{certs.Peer, certs.Server, certs.Client, UserCertificate}) {
		t.Fatalf("certificates %v", kinds)
	}
	names := TLSSecrets(c)
	wantSecrets := []string{names.Peer, names.Server, names.Client, "prod-user-tls"}
	for i, ic := range list {
		obj := Certificate(c, ic)
		if obj.GroupVersionKind() != CertificateGVK || obj.GetName() != wantSecrets[i] || obj.GetNamespace() != "db" {
			t.Errorf("%s: %s %s/%s", ic.Kind, obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())
		}
		if got := stringAt(t, obj, "spec", "secretName"); got != wantSecrets[i] {
			t.Errorf("%s: secretName %q, want %q", ic.Kind, got, wantSecrets[i])
		}
		kind := ic.Kind
		if kind == UserCertificate {
			kind = certs.Client
		}
		req := CertificateRequest(c, kind)
		wantCN := req.CommonName
		if ic.Kind == UserCertificate {
			wantCN = "user"
		}
		if got := stringAt(t, obj, "spec", "commonName"); got != wantCN {
			t.Errorf("%s: commonName %q, want %q", ic.Kind, got, wantCN)
		}
		if got := stringsAt(t, obj, "spec", "dnsNames"); !slices.Equal(got, req.DNSNames) {
			t.Errorf("%s: dnsNames %v, want %v", ic.Kind, got, req.DNSNames)
		}
		var ips []string
		for _, ip := range req.IPs {
			ips = append(ips, ip.String())
		}
		if got := stringsAt(t, obj, "spec", "ipAddresses"); !slices.Equal(got, ips) {
			t.Errorf("%s: ipAddresses %v, want %v", ic.Kind, got, ips)
		}
		if d, r := stringAt(t, obj, "spec", "duration"), stringAt(t, obj, "spec", "renewBefore"); d != "48h0m0s" || r != "12h0m0s" {
			t.Errorf("%s: duration %q renewBefore %q", ic.Kind, d, r)
		}
		usages := stringsAt(t, obj, "spec", "usages")
		server := slices.Contains(usages, "server auth")
		if want := kind == certs.Peer || kind == certs.Server; server != want || !slices.Contains(usages, "client auth") {
			t.Errorf("%s: usages %v", ic.Kind, usages)
		}
		key, _, _ := unstructured.NestedMap(obj.Object, "spec", "privateKey")
		if key["algorithm"] != "ECDSA" || key["size"] != int64(256) || key["rotationPolicy"] != "Always" {
			t.Errorf("%s: privateKey %v", ic.Kind, key)
		}
		ref, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "issuerRef")
		if ref["name"] != "ca" || ref["kind"] != "ClusterIssuer" || ref["group"] != "cert-manager.io" {
			t.Errorf("%s: issuerRef %v", ic.Kind, ref)
		}
		labels, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "secretTemplate", "labels")
		if labels[LabelCluster] != c.Name || labels[LabelManagedBy] != "" {
			t.Errorf("%s: the Secret's labels %v: want the cluster's, without the operator's own", ic.Kind, labels)
		}
		if obj.GetLabels()[LabelManagedBy] != managerName {
			t.Errorf("%s: the Certificate's labels %v: the operator's cache holds only what is labelled its own", ic.Kind, obj.GetLabels())
		}
	}
	// Without renewBefore, cert-manager's own default applies.
	c.Spec.TLS.RenewBefore = nil
	if _, found, _ := unstructured.NestedString(Certificate(c, list[0]).Object, "spec", "renewBefore"); found {
		t.Error("renewBefore set although spec.tls has none")
	}
}

// trustedFrom checks that a volume gives tls.crt and tls.key from secret and ca.crt from the
// trust bundle alone, as a projected volume (never subPath, which the kubelet does not refresh).
func trustedFrom(t *testing.T, what string, v corev1.Volume, secret string) {
	t.Helper()
	if v.Projected == nil || v.Secret != nil {
		t.Fatalf("%s: volume %+v, want a projected volume", what, v.VolumeSource)
	}
	from := map[string]string{}
	for _, src := range v.Projected.Sources {
		if src.Secret == nil {
			t.Fatalf("%s: a source that is not a Secret: %+v", what, src)
		}
		for _, item := range src.Secret.Items {
			if item.Key != item.Path {
				t.Errorf("%s: key %s mounted as %s", what, item.Key, item.Path)
			}
			from[item.Path] = src.Secret.Name
		}
	}
	want := map[string]string{certs.KeyCert: secret, certs.KeyKey: secret, certs.KeyCA: "prod-trust-bundle"}
	if len(from) != len(want) {
		t.Errorf("%s: files %v, want %v", what, from, want)
	}
	for file, name := range want {
		if from[file] != name {
			t.Errorf("%s: %s from Secret %q, want %q", what, file, from[file], name)
		}
	}
}

func TestCertManagerMembersAndJobsTrustTheBundleOnly(t *testing.T) {
	c := certManagerCluster()
	names := TLSSecrets(c)
	pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa"}, EtcdImages{Repository: "etcd"}, PodSettings{})
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	trustedFrom(t, "member peer volume", volumes[peerTLSVolume], names.Peer)
	trustedFrom(t, "member server volume", volumes[serverTLSVolume], names.Server)
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.SubPath != "" {
			t.Errorf("mount %s uses subPath %q", m.Name, m.SubPath)
		}
	}

	job, err := BackupJob(testBackup(etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "b", Endpoint: "https://s3.example"}}),
		c, "registry/etcd-operator:v1", time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC), PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	trustedFrom(t, "backup Job", jobVolume(t, job, "etcd-tls"), names.Client)

	// The other providers keep their Secrets as they are, each with its own ca.crt.
	c.Spec.TLS = &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderOperator}
	if v := tlsSecretVolume(c, "v", "s"); v.Secret == nil || v.Secret.SecretName != "s" || v.Projected != nil {
		t.Errorf("provider Operator: volume %+v", v.VolumeSource)
	}
}

func jobVolume(t *testing.T, job *batchv1.Job, name string) corev1.Volume {
	t.Helper()
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("Job has no volume %s", name)
	return corev1.Volume{}
}
