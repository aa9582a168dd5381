//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// certManagerRenewalTimeout bounds a forced renewal reaching every member: cert-manager issues
// in seconds, then the kubelet refreshes the projected volumes on its next sync of the pod
// (about a minute, plus its cache's TTL).
const certManagerRenewalTimeout = 4 * time.Minute

var issuerGVK = func(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: kind}
}

// A cluster with tls.provider CertManager, from a CA issuer of the real cert-manager (make
// test-cert-manager), serves over TLS with the CA of its issuer, and a renewal of its server and
// peer certificates reaches every member without a restart: each serves a certificate of a new
// serial, from the same pod, started at the same time, while a client writing all along sees no
// write fail. Skipped where cert-manager is not installed (CI).
func TestCertManager(t *testing.T) {
	ctx := context.Background()
	if _, err := k8sClient.RESTMapper().RESTMapping(resources.CertificateGVK.GroupKind(), "v1"); meta.IsNoMatchError(err) {
		t.Skip("cert-manager is not installed on this cluster (no cert-manager.io/v1 Certificate): run make test-cert-manager")
	} else if err != nil {
		t.Fatal(err)
	}
	ns := testNamespace(t, "e2e-cm-")

	// The issuer chain: a self-signed ClusterIssuer, a CA Certificate from it, a CA Issuer.
	selfSigned := ns + "-selfsigned"
	chain := []*unstructured.Unstructured{
		cmObject("ClusterIssuer", "", selfSigned, map[string]any{"selfSigned": map[string]any{}}),
		cmObject("Certificate", ns, "ca", map[string]any{
			"isCA": true, "commonName": "e2e-cert-manager-ca", "secretName": "ca", "duration": "24h",
			"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)},
			"issuerRef":  map[string]any{"kind": "ClusterIssuer", "name": selfSigned},
		}),
		cmObject("Issuer", ns, "ca", map[string]any{"ca": map[string]any{"secretName": "ca"}}),
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), chain[0]) })
	for _, obj := range chain {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		waitCertManagerReady(t, obj)
	}

	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "issued", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("128Mi"))},
			TLS: &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderCertManager,
				CertManager: &etcdv1alpha1.CertManagerTLS{IssuerRef: etcdv1alpha1.IssuerReference{Name: "ca", Kind: "Issuer"}}},
		},
	}
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the operator to take cert-manager's certificates", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d != nil && d.Reason == etcdv1alpha1.ReasonCertManagerNotInstalled {
			return false, fmt.Errorf("the operator started before cert-manager was installed; restart it (make test-cert-manager does): %s", d.Message)
		}
		return len(c.Status.Members) > 0, nil
	})
	waitAvailable(t, c, 3)

	// Members trust the issuer's CA, kept in the trust bundle.
	caSecret, bundle, clientSecret := &corev1.Secret{}, &corev1.Secret{}, &corev1.Secret{}
	for name, s := range map[string]*corev1.Secret{"ca": caSecret, resources.TrustBundleSecretName(c.Name): bundle, resources.TLSSecrets(c).Client: clientSecret} {
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(bundle.Data[certs.KeyCA], caSecret.Data[certs.KeyCert]) {
		t.Fatalf("the trust bundle holds\n%s\nwant the CA issuer's certificate\n%s", bundle.Data[certs.KeyCA], caSecret.Data[certs.KeyCert])
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(bundle.Data[certs.KeyCA])
	pair, err := tls.X509KeyPair(clientSecret.Data[certs.KeyCert], clientSecret.Data[certs.KeyKey])
	if err != nil {
		t.Fatal(err)
	}
	clientTLS := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}

	serviceName := resources.ClientServiceName(c.Name) + "." + ns + ".svc"
	w := startTLSWriter(t, serviceName+":2379", clientServiceEndpoint(t, c)[len("http://"):], clientTLS, "/e2e/cert-manager")
	podsBefore := memberPods(t, c)
	server, peer := resources.TLSSecrets(c).Server, resources.TLSSecrets(c).Peer
	// What each member serves on its client port (the server certificate) and its peer port
	// (the peer certificate): the serials of the Secrets, as they are before the renewal.
	expected := func() map[string]string {
		want := map[string]string{}
		for _, pod := range podsBefore {
			want[fmt.Sprintf("%s:%d", pod.Name, resources.ClientPort)] = secretSerial(t, ns, server)
			want[fmt.Sprintf("%s:%d", pod.Name, resources.PeerPort)] = secretSerial(t, ns, peer)
		}
		return want
	}
	servedBefore, wantBefore := servedSerials(t, podsBefore, c, clientTLS), expected()
	if !maps.Equal(servedBefore, wantBefore) {
		t.Fatalf("members serve %v, want the serials of their Secrets %v", servedBefore, wantBefore)
	}
	waitFor(t, "writes acknowledged before the renewal", func(context.Context) (bool, error) { return w.ackedCount() > 20, nil })

	// Renew the server and peer certificates, as cmctl renew does.
	for _, name := range []string{server, peer} {
		triggerRenewal(t, ns, name)
	}
	waitFor(t, "cert-manager to renew "+server+" and "+peer, func(context.Context) (bool, error) {
		now := expected()
		for k, before := range wantBefore {
			if now[k] == before {
				return false, nil
			}
		}
		return true, nil
	})
	wantAfter := expected()
	start := time.Now()
	if err := pollTolerant(t, "every member to serve its renewed certificates", 2*time.Second, certManagerRenewalTimeout, func(context.Context) (bool, error) {
		return maps.Equal(servedSerials(t, podsBefore, c, clientTLS), wantAfter), nil
	}); err != nil {
		t.Fatalf("members serve %v, want the renewed serials %v (before the renewal: %v): %v", servedSerials(t, podsBefore, c, clientTLS), wantAfter, servedBefore, err)
	}
	t.Logf("every member served its renewed certificates %v after the Secrets were renewed", time.Since(start).Round(time.Second))
	// New connections now meet the renewed certificates; keep writing through a few.
	acked := w.ackedCount()
	waitFor(t, "writes acknowledged after the renewal", func(context.Context) (bool, error) { return w.ackedCount() > acked+20, nil })

	for _, before := range podsBefore {
		pod := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(&before), pod); err != nil {
			t.Fatal(err)
		}
		if pod.UID != before.UID || !pod.Status.StartTime.Equal(before.Status.StartTime) ||
			pod.Status.ContainerStatuses[0].RestartCount != before.Status.ContainerStatuses[0].RestartCount {
			t.Errorf("member %s was restarted or replaced for the renewal: uid %s→%s, started %v→%v, restarts %d→%d", pod.Name,
				before.UID, pod.UID, before.Status.StartTime, pod.Status.StartTime,
				before.Status.ContainerStatuses[0].RestartCount, pod.Status.ContainerStatuses[0].RestartCount)
		}
	}
	if failed := w.failedCount(); failed != 0 {
		t.Errorf("%d writes failed during the renewal", failed)
	}
	w.verify(t)
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	if !isAvailable(c, 3) {
		t.Fatalf("not Available after the renewal: %+v", c.Status.Conditions)
	}
}

func cmObject(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	obj.SetGroupVersionKind(issuerGVK(kind))
	obj.SetNamespace(namespace)
	obj.SetName(name)
	return obj
}

// waitCertManagerReady waits for the Ready condition cert-manager sets on its objects.
func waitCertManagerReady(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	waitFor(t, obj.GetKind()+" "+obj.GetName()+" Ready", func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, item := range conditions {
			if cond, ok := item.(map[string]any); ok && cond["type"] == "Ready" && cond["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// triggerRenewal asks cert-manager to issue a Certificate anew, as cmctl renew does: its
// Issuing condition set to True.
func triggerRenewal(t *testing.T, namespace, name string) {
	t.Helper()
	cert := cmObject("Certificate", namespace, name, nil)
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(cert), cert); err != nil {
		t.Fatal(err)
	}
	conditions, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
	conditions = append(conditions, map[string]any{"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
		"message": "Certificate re-issuance manually triggered", "observedGeneration": cert.GetGeneration(),
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)})
	if err := unstructured.SetNestedSlice(cert.Object, conditions, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Status().Update(context.Background(), cert); err != nil {
		t.Fatal(err)
	}
}

func secretSerial(t *testing.T, namespace, name string) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	cert, err := parseFirstCert(s.Data[certs.KeyCert])
	if err != nil {
		t.Fatalf("Secret %s: %v", name, err)
	}
	return cert.SerialNumber.String()
}

func parseFirstCert(pemCert []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(pemCert)
	if block == nil {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// servedSerials is the serial of the certificate each member presents on a new connection,
// on its client port (the server certificate) and its peer port (the peer certificate), each
// verified against the trust bundle under the member's peer DNS name, which both carry.
func servedSerials(t *testing.T, pods []corev1.Pod, c *etcdv1alpha1.EtcdCluster, clientTLS *tls.Config) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, pod := range pods {
		peerName := pod.Name + "." + resources.PeerServiceName(c.Name) + "." + c.Namespace + ".svc"
		for _, port := range []int{resources.ClientPort, resources.PeerPort} {
			cfg := clientTLS.Clone()
			cfg.ServerName = peerName
			dialer := &net.Dialer{Timeout: 3 * time.Second}
			conn, err := tls.DialWithDialer(dialer, "tcp", net.JoinHostPort(pod.Status.PodIP, fmt.Sprint(port)), cfg)
			if err != nil {
				out[fmt.Sprintf("%s:%d", pod.Name, port)] = "unreachable: " + err.Error()
				continue
			}
			out[fmt.Sprintf("%s:%d", pod.Name, port)] = conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
			_ = conn.Close()
		}
	}
	return out
}

// startTLSWriter is startWriter over TLS: endpoint is the name TLS verifies, addr where the
// connection goes (the host cannot resolve cluster names).
func startTLSWriter(t *testing.T, endpoint, addr string, tlsConfig *tls.Config, prefix string) *writer {
	t.Helper()
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + endpoint}, TLS: tlsConfig,
		DialTimeout: 3 * time.Second, Logger: zap.NewNop(), DialOptions: []grpc.DialOption{grpc.WithContextDialer(dialer)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{client: c, prefix: prefix, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx)
	t.Cleanup(func() { w.stop(); _ = c.Close() })
	return w
}

// caIssuers makes, in ns, a self-signed ClusterIssuer and, for each name, a CA Certificate from
// it and a CA Issuer of that name signing with it; each CA's Secret is named after it too.
func caIssuers(t *testing.T, ns string, names ...string) {
	t.Helper()
	selfSigned := ns + "-selfsigned"
	objs := []*unstructured.Unstructured{cmObject("ClusterIssuer", "", selfSigned, map[string]any{"selfSigned": map[string]any{}})}
	for _, name := range names {
		objs = append(objs,
			cmObject("Certificate", ns, name, map[string]any{
				"isCA": true, "commonName": "e2e-" + name, "secretName": name, "duration": "24h",
				"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)},
				"issuerRef":  map[string]any{"kind": "ClusterIssuer", "name": selfSigned},
			}),
			cmObject("Issuer", ns, name, map[string]any{"ca": map[string]any{"secretName": name}}))
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), objs[0]) })
	for _, obj := range objs {
		if err := k8sClient.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
		waitCertManagerReady(t, obj)
	}
}

// A cluster of provider CertManager moved to another issuer (another CA) by a change of
// tls.certManager.issuerRef, under load, with no downtime: as TestCARotationWithoutDowntime
// checks it, with an application's client following the user certificate and the trust
// bundle. At the end the Certificates name the new issuer, the bundle holds its CA alone, and
// the probe Certificates are gone.
func TestCertManagerCARotation(t *testing.T) {
	ctx := context.Background()
	if _, err := k8sClient.RESTMapper().RESTMapping(resources.CertificateGVK.GroupKind(), "v1"); meta.IsNoMatchError(err) {
		t.Skip("cert-manager is not installed on this cluster (no cert-manager.io/v1 Certificate): run make test-cert-manager")
	} else if err != nil {
		t.Fatal(err)
	}
	ns := testNamespace(t, "e2e-cm-rotation-")
	caIssuers(t, ns, "ca", "next-ca")
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "moving", Namespace: ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("128Mi"))},
			TLS: &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderCertManager,
				CertManager: &etcdv1alpha1.CertManagerTLS{IssuerRef: etcdv1alpha1.IssuerReference{Name: "ca", Kind: "Issuer"}}},
		},
	}
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, c, 3)
	rotateUnderLoad(t, c, resources.UserTLSSecretName(c.Name), resources.TrustBundleSecretName(c.Name), func() {
		patchSpec(t, c, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.TLS.CertManager.IssuerRef.Name = "next-ca" })
	})

	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	if rot := c.Status.CARotation; rot.Trigger != "IssuerChanged" || rot.FromIssuer == nil || rot.FromIssuer.Name != "ca" || rot.ToIssuer == nil || rot.ToIssuer.Name != "next-ca" {
		t.Errorf("status.caRotation %+v, want IssuerChanged from ca to next-ca", rot)
	}
	next, bundle := &corev1.Secret{}, &corev1.Secret{}
	for name, s := range map[string]*corev1.Secret{"next-ca": next, resources.TrustBundleSecretName(c.Name): bundle} {
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(bytes.TrimSpace(bundle.Data[certs.KeyCA]), bytes.TrimSpace(next.Data[certs.KeyCert])) {
		t.Errorf("the trust bundle holds\n%s\nwant the new issuer's CA alone\n%s", bundle.Data[certs.KeyCA], next.Data[certs.KeyCert])
	}
	for _, ic := range resources.CertManagerCertificates(c) {
		cert := &unstructured.Unstructured{}
		cert.SetGroupVersionKind(resources.CertificateGVK)
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: ic.Name}, cert); err != nil {
			t.Fatal(err)
		}
		if ref, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef"); ref["name"] != "next-ca" {
			t.Errorf("Certificate %s names issuer %v, want next-ca", ic.Name, ref)
		}
	}
	waitFor(t, "the probe Certificates deleted", func(ctx context.Context) (bool, error) {
		for _, which := range []string{"old", "new"} {
			probe := &unstructured.Unstructured{}
			probe.SetGroupVersionKind(resources.CertificateGVK)
			err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.CAProbeName(c.Name, which)}, probe)
			if ignoreNotFound(err) != nil {
				return false, err
			}
			if err == nil {
				return false, nil
			}
		}
		return true, nil
	})
}
