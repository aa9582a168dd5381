package controllers_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The envtest suite has cert-manager's CRDs but not cert-manager: these tests play its part,
// writing the Secrets and the conditions it would.

func certManagerSpec(c *etcdv1alpha1.EtcdCluster) {
	c.Spec.TLS = &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderCertManager,
		CertManager: &etcdv1alpha1.CertManagerTLS{IssuerRef: etcdv1alpha1.IssuerReference{Name: "ca"}}}
}

func getCertificate(t *testing.T, namespace, name string) (*unstructured.Unstructured, error) {
	t.Helper()
	cert := &unstructured.Unstructured{}
	cert.SetGroupVersionKind(resources.CertificateGVK)
	return cert, k8sClient.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, cert)
}

// setCertificateConditions sets a Certificate's status conditions as cert-manager would.
func setCertificateConditions(t *testing.T, namespace, name string, conditions ...map[string]any) {
	t.Helper()
	cert, err := getCertificate(t, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	list := make([]any, len(conditions))
	for i, cond := range conditions {
		cond["observedGeneration"] = cert.GetGeneration()
		cond["lastTransitionTime"] = time.Now().UTC().Format(time.RFC3339)
		list[i] = cond
	}
	if err := unstructured.SetNestedSlice(cert.Object, list, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Status().Update(t.Context(), cert); err != nil {
		t.Fatal(err)
	}
}

func condition(condType, status, reason, message string) map[string]any {
	return map[string]any{"type": condType, "status": status, "reason": reason, "message": message}
}

// issue writes the Secret of a Certificate as cert-manager does: the leaf, its key, and the
// issuer's CA in ca.crt.
func issue(t *testing.T, c *etcdv1alpha1.EtcdCluster, ic resources.IssuedCertificate, ca certs.KeyPair) {
	t.Helper()
	kind := ic.Kind
	if kind == resources.UserCertificate {
		kind = certs.Client
	}
	leaf, err := certs.Issue(ca, resources.CertificateRequest(c, kind), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ic.Name, Namespace: c.Namespace}}
	data := map[string][]byte{certs.KeyCert: leaf.CertPEM, certs.KeyKey: leaf.KeyPEM, certs.KeyCA: ca.CertPEM}
	if err = k8sClient.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err == nil {
		secret.Data = data
		err = k8sClient.Update(t.Context(), secret)
	} else {
		secret.Type, secret.Data = corev1.SecretTypeTLS, data
		err = k8sClient.Create(t.Context(), secret)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func newTestCA(t *testing.T, name string) certs.KeyPair {
	t.Helper()
	ca, err := certs.NewCA(name, 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func waitForCondition(t *testing.T, c *etcdv1alpha1.EtcdCluster, condType, status, reason string, says ...string) *metav1.Condition {
	t.Helper()
	var found *metav1.Condition
	eventually(t, 20*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		found = meta.FindStatusCondition(c.Status.Conditions, condType)
		if found == nil || string(found.Status) != status || found.Reason != reason {
			return fmt.Errorf("%s = %+v, want %s %s", condType, found, status, reason)
		}
		for _, s := range says {
			if !strings.Contains(found.Message, s) {
				return fmt.Errorf("%s's message %q does not say %q", condType, found.Message, s)
			}
		}
		return nil
	})
	return found
}

func waitForClusterEvent(t *testing.T, c *etcdv1alpha1.EtcdCluster, eventType, reason, says string) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		events := &eventsv1.EventList{}
		if err := k8sClient.List(t.Context(), events, client.InNamespace(c.Namespace)); err != nil {
			return err
		}
		var seen []string
		for _, e := range events.Items {
			if e.Regarding.Name == c.Name && e.Type == eventType && e.Reason == reason && strings.Contains(e.Note, says) {
				return nil
			}
			seen = append(seen, fmt.Sprintf("%s %s %q", e.Type, e.Reason, e.Note))
		}
		return fmt.Errorf("no %s event %s saying %q among %q", eventType, reason, says, seen)
	})
}

// The operator asks cert-manager for the certificates, starts nothing while they are not
// issued, says in cert-manager's words what holds them back, then, once all are issued, trusts
// the CA that signed them, in its trust bundle, and starts members that read the certificates
// and the bundle from projected volumes. A certificate later issued by a replaced CA is
// reported, not trusted.
func TestCertManagerCertificatesAreAwaitedThenTheirCAIsTheOnlyOneTrusted(t *testing.T) {
	c := newCluster(t, "cm", func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 1; certManagerSpec(c) })
	issued := resources.CertManagerCertificates(c)
	eventually(t, 20*time.Second, func() error {
		for _, ic := range issued {
			cert, err := getCertificate(t, c.Namespace, ic.Name)
			if err != nil {
				return err
			}
			if !metav1.IsControlledBy(cert, c) {
				return fmt.Errorf("Certificate %s is not owned by the cluster: %v", ic.Name, cert.GetOwnerReferences())
			}
			if ref, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef"); ref["name"] != "ca" || ref["kind"] != "Issuer" || ref["group"] != "cert-manager.io" {
				return fmt.Errorf("Certificate %s: issuerRef %v", ic.Name, ref)
			}
		}
		return nil
	})
	waitForCondition(t, c, etcdv1alpha1.ConditionProgressing, "True", etcdv1alpha1.ReasonCertificatesNotReady, "not issued yet")
	waitForCondition(t, c, etcdv1alpha1.ConditionAvailable, "False", etcdv1alpha1.ReasonCertificatesNotReady)
	waitForCondition(t, c, etcdv1alpha1.ConditionDegraded, "False", etcdv1alpha1.ReasonCertificatesNotReady)

	// The issuer does not exist: cert-manager's request says so, and so does the cluster.
	peer := issued[0]
	request := &unstructured.Unstructured{}
	request.SetGroupVersionKind(resources.CertificateRequestGVK)
	request.SetName(peer.Name + "-1")
	request.SetNamespace(c.Namespace)
	request.SetLabels(map[string]string{"cert-manager.io/certificate-name": peer.Name})
	request.SetAnnotations(map[string]string{"cert-manager.io/certificate-revision": "1"})
	_ = unstructured.SetNestedField(request.Object, map[string]any{"name": "ca", "kind": "Issuer", "group": "cert-manager.io"}, "spec", "issuerRef")
	_ = unstructured.SetNestedField(request.Object, "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K", "spec", "request")
	if err := k8sClient.Create(t.Context(), request); err != nil {
		t.Fatal(err)
	}
	notFound := `Referenced "Issuer" not found: issuer.cert-manager.io "ca" not found`
	_ = unstructured.SetNestedSlice(request.Object, []any{map[string]any{"type": "Ready", "status": "False", "reason": "Pending",
		"message": notFound, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}, "status", "conditions")
	if err := k8sClient.Status().Update(t.Context(), request); err != nil {
		t.Fatal(err)
	}
	setCertificateConditions(t, c.Namespace, peer.Name,
		condition("Ready", "False", "DoesNotExist", "Issuing certificate as Secret does not exist"),
		condition("Issuing", "True", "DoesNotExist", "Issuing certificate as Secret does not exist"))
	waitForCondition(t, c, etcdv1alpha1.ConditionDegraded, "True", etcdv1alpha1.ReasonCertificatesNotReady, peer.Name, notFound)
	waitForClusterEvent(t, c, corev1.EventTypeWarning, etcdv1alpha1.ReasonCertificatesNotReady, notFound)
	if pods, _ := membersOf(t, c); len(pods) != 0 {
		t.Fatalf("%d member pods started before the certificates were issued", len(pods))
	}

	// The issuer issues every certificate.
	ca := newTestCA(t, "issuer-ca")
	if err := k8sClient.Delete(t.Context(), request); err != nil {
		t.Fatal(err)
	}
	for _, ic := range issued {
		issue(t, c, ic, ca)
		setCertificateConditions(t, c.Namespace, ic.Name, condition("Ready", "True", "Ready", "Certificate is up to date and has not expired"))
	}
	bundle := &corev1.Secret{}
	eventually(t, 20*time.Second, func() error {
		return k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: resources.TrustBundleSecretName(c.Name)}, bundle)
	})
	if !bytes.Equal(bundle.Data[certs.KeyCA], ca.CertPEM) {
		t.Fatalf("trust bundle ca.crt:\n%s\nwant the issuer's CA:\n%s", bundle.Data[certs.KeyCA], ca.CertPEM)
	}
	if !metav1.IsControlledBy(bundle, c) {
		t.Errorf("the trust bundle is not owned by the cluster: %v", bundle.OwnerReferences)
	}
	waitForClusterEvent(t, c, corev1.EventTypeNormal, "TrustBundleCreated", bundle.Name)
	pod := waitForPods(t, c, 1)[0]
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			t.Errorf("member volume %s mounts Secret %s whole, ca.crt included", v.Name, v.Secret.SecretName)
		}
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			for _, item := range src.Secret.Items {
				if item.Key == certs.KeyCA && src.Secret.Name != bundle.Name {
					t.Errorf("member volume %s takes ca.crt from %s, not the trust bundle", v.Name, src.Secret.Name)
				}
			}
		}
	}
	eventually(t, 20*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		var names []string
		for _, cs := range c.Status.Certificates {
			names = append(names, cs.Name+"="+cs.SecretName)
		}
		want := "ca=cm-trust-bundle peer=cm-peer-tls server=cm-server-tls client=cm-client-tls user=cm-user-tls"
		if strings.Join(names, " ") != want {
			return fmt.Errorf("status.certificates %v, want %s", names, want)
		}
		return nil
	})

	// The Secrets cert-manager wrote, private keys and all, go with the cluster.
	eventually(t, 20*time.Second, func() error {
		for _, ic := range issued {
			s := &corev1.Secret{}
			if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: ic.Name}, s); err != nil {
				return err
			}
			owned := slices.ContainsFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool {
				return o.UID == c.UID && (o.Controller == nil || !*o.Controller)
			})
			if !owned {
				return fmt.Errorf("Secret %s: owners %v, want the cluster, not as controller", ic.Name, s.OwnerReferences)
			}
		}
		return nil
	})

	// The issuer's CA replaced in place: the next certificate it issues is not trusted, and is
	// reported by name; the bundle stays as it was.
	replaced := newTestCA(t, "replaced-ca")
	server := issued[1]
	issue(t, c, server, replaced)
	setCertificateConditions(t, c.Namespace, server.Name, condition("Ready", "True", "Ready", "Certificate is up to date and has not expired"),
		condition("Issuing", "True", "ManuallyTriggered", "Certificate re-issuance manually triggered"))
	waitForCondition(t, c, etcdv1alpha1.ConditionDegraded, "True", etcdv1alpha1.ReasonUntrustedIssuer, server.Name, bundle.Name)
	waitForClusterEvent(t, c, corev1.EventTypeWarning, etcdv1alpha1.ReasonUntrustedIssuer, server.Name)
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(bundle), bundle); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bundle.Data[certs.KeyCA], ca.CertPEM) {
		t.Fatal("the trust bundle changed with the issuer's CA")
	}

	// The issuer given its CA back and the certificate issued again: nothing to report.
	issue(t, c, server, ca)
	setCertificateConditions(t, c.Namespace, server.Name, condition("Ready", "True", "Ready", "Certificate is up to date and has not expired"))
	eventually(t, 20*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d == nil || d.Reason == etcdv1alpha1.ReasonUntrustedIssuer {
			return fmt.Errorf("Degraded = %+v after the issuer's CA was given back", d)
		}
		return nil
	})
}

// A changed lifetime reaches the Certificates; the issuer cannot change (admission).
func TestCertManagerCertificatesFollowTheSpec(t *testing.T) {
	c := newCluster(t, "cmspec", func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 1; certManagerSpec(c) })
	name := resources.CertManagerCertificates(c)[0].Name
	eventually(t, 20*time.Second, func() error {
		_, err := getCertificate(t, c.Namespace, name)
		return err
	})
	// The reconciler writes status meanwhile: a conflict is a lost race, not a refusal.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		c.Spec.TLS.Validity = &metav1.Duration{Duration: 2 * time.Hour}
		c.Spec.TLS.RenewBefore = &metav1.Duration{Duration: 30 * time.Minute}
		return k8sClient.Update(t.Context(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		cert, err := getCertificate(t, c.Namespace, name)
		if err != nil {
			return err
		}
		d, _, _ := unstructured.NestedString(cert.Object, "spec", "duration")
		r, _, _ := unstructured.NestedString(cert.Object, "spec", "renewBefore")
		if d != "2h0m0s" || r != "30m0s" {
			return fmt.Errorf("Certificate %s: duration %q renewBefore %q", name, d, r)
		}
		return nil
	})

	for _, tc := range []struct {
		name   string
		mutate func(*etcdv1alpha1.TLSSpec)
		says   string
	}{
		{"under an hour", func(s *etcdv1alpha1.TLSSpec) { s.Validity = &metav1.Duration{Duration: 59 * time.Minute} }, "at least 1h"},
		{"renewal under 5m", func(s *etcdv1alpha1.TLSSpec) { s.RenewBefore = &metav1.Duration{Duration: 4 * time.Minute} }, "at least 5m"},
	} {
		changed := c.DeepCopy()
		tc.mutate(changed.Spec.TLS)
		if err := k8sClient.Update(t.Context(), changed); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want refused saying %q", tc.name, err, tc.says)
		}
	}
}

// Another issuer in the spec begins a CA rotation (status.caRotation, trigger IssuerChanged)
// and the Certificates keep the issuer they came from: issued from the new one before every
// member trusts its CA, the members' certificates would be refused by their peers. A probe
// Certificate is asked of each issuer, to ask members which CA they trust. Seen failing with
// the Certificates brought to the spec's issuer at once.
func TestCertManagerAnotherIssuerKeepsTheOldOneUntilMembersTrustBoth(t *testing.T) {
	c := newCluster(t, "cm-move", func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 1; certManagerSpec(c) })
	issued := resources.CertManagerCertificates(c)
	ca := newTestCA(t, "issuer-ca")
	eventually(t, 20*time.Second, func() error {
		for _, ic := range issued {
			if _, err := getCertificate(t, c.Namespace, ic.Name); err != nil {
				return err
			}
		}
		return nil
	})
	for _, ic := range issued {
		issue(t, c, ic, ca)
		setCertificateConditions(t, c.Namespace, ic.Name, condition("Ready", "True", "Ready", "Certificate is up to date and has not expired"))
	}
	eventually(t, 20*time.Second, func() error {
		return k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: resources.TrustBundleSecretName(c.Name)}, &corev1.Secret{})
	})

	// The reconciler writes status meanwhile: a conflict is a lost race, not a refusal.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		c.Spec.TLS.CertManager.IssuerRef.Name = "next-ca"
		return k8sClient.Update(t.Context(), c)
	})
	if err != nil {
		t.Fatalf("another issuer refused: %v", err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		rot := c.Status.CARotation
		if rot == nil || rot.Phase != "Prepare" || rot.Trigger != "IssuerChanged" || rot.FromIssuer == nil || rot.FromIssuer.Name != "ca" || rot.OldCA == "" {
			return fmt.Errorf("status.caRotation %+v, want Prepare from issuer ca", rot)
		}
		for which, issuer := range map[string]string{"old": "ca", "new": "next-ca"} {
			probe, err := getCertificate(t, c.Namespace, resources.CAProbeName(c.Name, which))
			if err != nil {
				return err
			}
			if ref, _, _ := unstructured.NestedStringMap(probe.Object, "spec", "issuerRef"); ref["name"] != issuer {
				return fmt.Errorf("probe %s from %v, want %s", which, ref, issuer)
			}
		}
		return nil
	})
	// A few reconciles later, the cluster's Certificates still name the issuer they came from.
	time.Sleep(2 * time.Second)
	for _, ic := range issued {
		cert, err := getCertificate(t, c.Namespace, ic.Name)
		if err != nil {
			t.Fatal(err)
		}
		if ref, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef"); ref["name"] != "ca" {
			t.Errorf("Certificate %s moved to issuer %v before members trust its CA", ic.Name, ref)
		}
	}
}
