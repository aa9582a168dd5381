//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A cluster with operator-issued TLS and root authentication serves only clients that present
// a certificate from its CA, and with auth on only the right credentials.
func TestTLSAndAuthClusterRefusesStrangers(t *testing.T) {
	inParallel(t, 55*time.Second) // its own namespace and cluster; most of its time is waiting on them
	ctx := context.Background()
	ns := testNamespace(t, "e2e-tls-")
	root := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-root", Namespace: ns},
		StringData: map[string]string{"password": tlsRootPassword},
	}
	if err := k8sClient.Create(ctx, root); err != nil {
		t.Fatal(err)
	}
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "secure", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size:    3,
			Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("128Mi"))},
			TLS:     &etcdv1alpha1.TLSSpec{},
			Auth:    &etcdv1alpha1.AuthSpec{RootSecretName: root.Name},
		},
	}
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, c, 3)
	if len(c.Status.Certificates) != 4 {
		t.Fatalf("status.certificates = %+v, want ca, peer, server and client", c.Status.Certificates)
	}

	clientSecret := &corev1.Secret{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.TLSSecrets(c).Client}, clientSecret); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(clientSecret.Data["ca.crt"])
	// The host cannot resolve cluster DNS: dial the Service's cluster IP under its DNS name,
	// which is the name the server certificate carries.
	endpoint := resources.ClientServiceName(c.Name) + "." + ns + ".svc:2379"
	serviceAddr := clientServiceEndpoint(t, c)[len("http://"):]
	withoutCert := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	pair, err := tls.X509KeyPair(clientSecret.Data["tls.crt"], clientSecret.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	withCert := withoutCert.Clone()
	withCert.Certificates = []tls.Certificate{pair}
	put := func(ctx context.Context, tlsConfig *tls.Config, password string) error {
		return putErr(ctx, endpoint, serviceAddr, tlsConfig, "root", password)
	}

	if err := put(ctx, withCert, tlsRootPassword); err != nil {
		t.Fatalf("root with its certificate and password was refused: %v", err)
	}
	// Auth is enabled once the cluster is complete and healthy: until then any password works.
	waitFor(t, "authentication enabled", func(ctx context.Context) (bool, error) {
		err := put(ctx, withCert, "wrong-password")
		return err != nil && strings.Contains(err.Error(), "authentication failed"), nil
	})
	// The same path and password without a client certificate: grpc retries the refused
	// handshake until the deadline, so only the failure itself is asserted.
	if err := put(ctx, withoutCert, tlsRootPassword); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if err := put(ctx, withCert, tlsRootPassword); err != nil {
		t.Fatalf("root with its certificate and password was refused once auth was on: %v", err)
	}

	// Rotating the password in the Secret changes it in etcd, and the operator, which must now
	// authenticate with the new one, is not locked out.
	root.StringData = map[string]string{"password": rotatedRootPassword}
	if err := k8sClient.Update(ctx, root); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rotated password accepted", func(ctx context.Context) (bool, error) {
		return put(ctx, withCert, rotatedRootPassword) == nil, nil
	})
	if err := put(ctx, withCert, tlsRootPassword); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("the old password after the rotation: %v, want authentication failed", err)
	}
	record := &corev1.Secret{}
	waitFor(t, "the operator's record of the root password", func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.RootCredentialsSecretName(c.Name)}, record)
		return err == nil && string(record.Data[resources.RootPasswordKey]) == rotatedRootPassword && len(record.Data[resources.RootPendingPasswordKey]) == 0, nil
	})
	// A fresh reconcile authenticates with the recorded password and still sees the cluster.
	touch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"e2e/rotated":"true"}}}`))
	if err := k8sClient.Patch(ctx, c, touch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Available, not locked out, after the rotation", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		degraded := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
		if degraded != nil && degraded.Reason == etcdv1alpha1.ReasonCredentialsRejected {
			return false, fmt.Errorf("the operator is locked out: %s", degraded.Message)
		}
		return isAvailable(c, 3), nil
	})
}

// putErr writes one key with the given TLS and credentials and returns why it failed.
// endpoint is the name TLS verifies; addr is where the connection really goes.
func putErr(ctx context.Context, endpoint, addr string, tlsConfig *tls.Config, user, password string) error {
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{"https://" + endpoint}, TLS: tlsConfig, Username: user, Password: password,
		DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dialer)},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = c.Put(ctx, "/e2e/tls", "ok")
	return err
}

// Operator-issued certificates are renewed before they expire, and the members take the new
// ones from their refreshed Secret volumes without a restart: long after the first
// certificates have expired, members still talk to each other and serve clients holding the
// renewed client certificate.
func TestCertificatesRenewWithoutRestart(t *testing.T) {
	inParallel(t, 210*time.Second) // with the backup and restore tests, after the cluster lifecycle tests
	ctx := context.Background()
	ns := testNamespace(t, "e2e-renew-")
	const validity, renewBefore = 3 * time.Minute, 2 * time.Minute
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "renewing", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("128Mi"))},
			TLS: &etcdv1alpha1.TLSSpec{
				Validity:    &metav1.Duration{Duration: validity},
				RenewBefore: &metav1.Duration{Duration: renewBefore},
			},
		},
	}
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, c, 3)
	firstExpiry := map[string]time.Time{}
	for _, cs := range c.Status.Certificates {
		if cs.Name != "ca" && cs.NotAfter != nil {
			firstExpiry[cs.Name] = cs.NotAfter.Time
		}
	}
	if len(firstExpiry) != 3 {
		t.Fatalf("status.certificates %+v: want peer, server and client with their expiry", c.Status.Certificates)
	}
	podsBefore := memberPods(t, c)

	// Past the first certificates' expiry, with a margin for the kubelet to refresh the
	// mounted Secrets (it syncs them about every minute).
	latest := time.Time{}
	for _, at := range firstExpiry {
		latest = later(latest, at)
	}
	waitUntil := latest.Add(30 * time.Second)
	t.Logf("waiting until %s, past the first certificates' expiry", waitUntil.Format(time.TimeOnly))
	time.Sleep(time.Until(waitUntil))

	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	for _, cs := range c.Status.Certificates {
		if first, ok := firstExpiry[cs.Name]; ok && (cs.NotAfter == nil || !cs.NotAfter.After(first)) {
			t.Errorf("certificate %s not renewed: expires %v, first expired %v", cs.Name, cs.NotAfter, first)
		}
	}
	if !isAvailable(c, 3) {
		t.Fatalf("cluster not Available with 3 members after the first certificates expired: %+v", c.Status.Conditions)
	}
	for _, before := range podsBefore {
		pod := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(&before), pod); err != nil {
			t.Fatal(err)
		}
		if pod.UID != before.UID || pod.Status.ContainerStatuses[0].RestartCount != before.Status.ContainerStatuses[0].RestartCount {
			t.Errorf("member %s was restarted for the renewal", pod.Name)
		}
	}

	clientSecret := &corev1.Secret{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.TLSSecrets(c).Client}, clientSecret); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(clientSecret.Data["ca.crt"])
	pair, err := tls.X509KeyPair(clientSecret.Data["tls.crt"], clientSecret.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	renewed := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	endpoint := resources.ClientServiceName(c.Name) + "." + ns + ".svc:2379"
	if err := putErr(ctx, endpoint, clientServiceEndpoint(t, c)[len("http://"):], renewed, "", ""); err != nil {
		t.Fatalf("a client with the renewed certificate was refused after the first ones expired: %v", err)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
