package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The Secrets a user makes and a spec names carry no label of the operator's, so the manager's
// cache does not hold them (TestCacheHoldsOnlyWhatTheOperatorMade). The operator must still
// find them: read through the cache, each would be reported missing and the cluster never
// started (members start only once the operator has what it needs to reach them).

func createUsersSecret(t *testing.T, namespace, name string, secretType corev1.SecretType, data map[string][]byte) {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Type: secretType, Data: data}
	if err := k8sClient.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
}

func TestUsersRootPasswordSecretIsFound(t *testing.T) {
	namespace := restrictedNamespace(t)
	createUsersSecret(t, namespace, "root", corev1.SecretTypeOpaque, map[string][]byte{"password": []byte("s3cret")})
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "auth", Namespace: namespace},
		Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 1, Auth: &etcdv1alpha1.AuthSpec{RootSecretName: "root"}},
	}
	if err := k8sClient.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	waitForPods(t, c, 1)
}

func TestUsersTLSSecretsAreFound(t *testing.T) {
	namespace := restrictedNamespace(t)
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "own-tls", Namespace: namespace},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 1, TLS: &etcdv1alpha1.TLSSpec{
			Provider: etcdv1alpha1.TLSProviderSecrets,
			Secrets:  &etcdv1alpha1.TLSSecrets{Peer: "users-peer", Server: "users-server", Client: "users-client"},
		}},
	}
	ca := newUsersCA(t)
	createUsersTLSSecrets(t, c, map[certs.Kind]certs.KeyPair{certs.Peer: ca, certs.Server: ca, certs.Client: ca},
		map[certs.Kind][]byte{certs.Peer: ca.CertPEM, certs.Server: ca.CertPEM, certs.Client: ca.CertPEM})
	if err := k8sClient.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	waitForPods(t, c, 1)
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if len(c.Status.Certificates) != 3 {
			return fmt.Errorf("status.certificates = %+v, want the peer, server and client certificates of the user's Secrets", c.Status.Certificates)
		}
		return nil
	})
}

// A CA per kind of certificate, each Secret's ca.crt holding its own issuer (as cert-manager
// writes it): members would refuse the operator's client certificate, and the operator theirs.
// The cluster is not started, and status names the Secret to fix. Seen failing before the
// check (pods started; status said only that the members did not answer).
func TestUsersTLSSecretsThatDoNotTrustEachOtherAreNamed(t *testing.T) {
	namespace := restrictedNamespace(t)
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "own-cas", Namespace: namespace},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 1, TLS: &etcdv1alpha1.TLSSpec{
			Provider: etcdv1alpha1.TLSProviderSecrets,
			Secrets:  &etcdv1alpha1.TLSSecrets{Peer: "users-peer", Server: "users-server", Client: "users-client"},
		}},
	}
	peerCA, serverCA, clientCA := newUsersCA(t), newUsersCA(t), newUsersCA(t)
	createUsersTLSSecrets(t, c, map[certs.Kind]certs.KeyPair{certs.Peer: peerCA, certs.Server: serverCA, certs.Client: clientCA},
		map[certs.Kind][]byte{certs.Peer: peerCA.CertPEM, certs.Server: serverCA.CertPEM, certs.Client: clientCA.CertPEM})
	if err := k8sClient.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		degraded := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		if degraded == nil || degraded.Reason != etcdv1alpha1.ReasonCertificateError ||
			!strings.Contains(degraded.Message, "the certificate in Secret users-client is not trusted by the ca.crt of Secret users-server") {
			return fmt.Errorf("Degraded = %+v, want CertificateError naming the client certificate and the server Secret's ca.crt", degraded)
		}
		return nil
	})
	pods := &corev1.PodList{}
	if err := k8sClient.List(t.Context(), pods, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods started for a cluster the operator could not reach", len(pods.Items))
	}

	// Each ca.crt holding the other end's CA: the cluster starts.
	createUsersTLSSecrets(t, c, nil, map[certs.Kind][]byte{certs.Server: clientCA.CertPEM, certs.Client: serverCA.CertPEM})
	waitForPods(t, c, 1)
}

func newUsersCA(t *testing.T) certs.KeyPair {
	t.Helper()
	ca, err := certs.NewCA("users-ca", 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// createUsersTLSSecrets makes the Secrets c names, each kind's certificate issued by issuers[kind]
// and with trusted[kind] as its ca.crt. With issuers nil, it replaces only the ca.crt of the
// Secrets trusted names.
func createUsersTLSSecrets(t *testing.T, c *etcdv1alpha1.EtcdCluster, issuers map[certs.Kind]certs.KeyPair, trusted map[certs.Kind][]byte) {
	t.Helper()
	names := resources.TLSSecrets(c)
	name := map[certs.Kind]string{certs.Peer: names.Peer, certs.Server: names.Server, certs.Client: names.Client}
	if issuers == nil {
		for kind, ca := range trusted {
			secret := &corev1.Secret{}
			if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: name[kind]}, secret); err != nil {
				t.Fatal(err)
			}
			secret.Data[certs.KeyCA] = ca
			if err := k8sClient.Update(t.Context(), secret); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	for kind, ca := range issuers {
		req := resources.CertificateRequest(c, kind)
		req.Validity = time.Hour
		kp, err := certs.Issue(ca, req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		createUsersSecret(t, c.Namespace, name[kind], corev1.SecretTypeTLS,
			map[string][]byte{certs.KeyCert: kp.CertPEM, certs.KeyKey: kp.KeyPEM, certs.KeyCA: trusted[kind]})
	}
}
