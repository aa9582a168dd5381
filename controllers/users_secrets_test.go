package controllers_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	now := time.Now()
	ca, err := certs.NewCA("users-ca", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	for kind, name := range map[certs.Kind]string{certs.Peer: "users-peer", certs.Server: "users-server", certs.Client: "users-client"} {
		req := resources.CertificateRequest(c, kind)
		req.Validity = time.Hour
		kp, err := certs.Issue(ca, req, now)
		if err != nil {
			t.Fatal(err)
		}
		createUsersSecret(t, namespace, name, corev1.SecretTypeTLS,
			map[string][]byte{certs.KeyCert: kp.CertPEM, certs.KeyKey: kp.KeyPEM, certs.KeyCA: ca.CertPEM})
	}
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
