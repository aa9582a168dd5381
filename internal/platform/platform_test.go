package platform

import (
	"path/filepath"
	"testing"

	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/etcd-database/etcd-operator/test/certmanager"
)

// Against a real kube-apiserver: plain Kubernetes first, then with the API groups the local
// cluster's OpenShift emulation serves (hack/cluster/openshift/apis.yaml, as OpenShift defines
// them). Only security.openshift.io makes it OpenShift.
func TestDetectTellsOpenShiftByItsSecurityContextConstraintsAPI(t *testing.T) {
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	detect := func() Platform {
		t.Helper()
		// A new client each time: discovery is not cached, as the manager reads it once at start.
		d, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Detect(d)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	if p := detect(); p != Kubernetes {
		t.Fatalf("plain kube-apiserver detected as %+v, want %+v", p, Kubernetes)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("..", "..", "hack", "cluster", "openshift", "apis.yaml")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatal(err)
	}
	if p := detect(); p != OpenShift || !p.AssignsPodIDs {
		t.Fatalf("with security.openshift.io served, detected %+v, want %+v", p, OpenShift)
	}
}

// cert-manager is found by its Certificates being served, and only then.
func TestCertManagerServedOnlyWithItsCertificates(t *testing.T) {
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	served := func() bool {
		t.Helper()
		d, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := CertManagerServed(d)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	if served() {
		t.Fatal("cert-manager found on a kube-apiserver without its CRDs")
	}
	crds, err := certmanager.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{crds}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	if !served() {
		t.Fatal("cert-manager not found with its CRDs installed")
	}
}
