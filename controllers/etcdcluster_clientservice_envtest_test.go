package controllers

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-database/etcd-operator/internal/resources"
)

// spec.clientService exposes the cluster outside Kubernetes: the client Service takes its type
// and annotations, and follows them when they change, against a real kube-apiserver (which
// allocates node ports for a LoadBalancer and drops them again for ClusterIP). Annotations
// someone else puts on the Service (a cloud controller's) stay; those the spec no longer lists
// go. A reconcile with nothing to change writes nothing.
func TestTheClientServiceTakesItsTypeAndAnnotationsFromTheSpec(t *testing.T) {
	f := newEnvCluster(t, "client-service")
	service := func() *corev1.Service {
		t.Helper()
		svc := &corev1.Service{}
		key := client.ObjectKey{Namespace: f.cluster.Namespace, Name: resources.ClientServiceName(f.cluster.Name)}
		if err := f.k8s.Get(t.Context(), key, svc); err != nil {
			t.Fatal(err)
		}
		return svc
	}
	if svc := service(); svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Fatalf("by default the client Service is %s, want ClusterIP", svc.Spec.Type)
	}

	c := f.get(t)
	c.Spec.ClientService.Type = corev1.ServiceTypeLoadBalancer
	c.Spec.ClientService.Annotations = map[string]string{
		"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
		"example.com/owner": "team-a",
	}
	if err := f.k8s.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	svc := service()
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("client Service %s, node port %d: want a LoadBalancer with its node port allocated", svc.Spec.Type, svc.Spec.Ports[0].NodePort)
	}
	for k, v := range c.Spec.ClientService.Annotations {
		if svc.Annotations[k] != v {
			t.Errorf("annotation %s is %q, want %q: annotations %v", k, svc.Annotations[k], v, svc.Annotations)
		}
	}
	clusterIP := svc.Spec.ClusterIP

	// A cloud controller annotates the Service; the user drops one annotation and goes back to
	// ClusterIP.
	svc.Annotations["cloud.example.com/load-balancer-id"] = "lb-1"
	if err := f.k8s.Update(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	c = f.get(t)
	c.Spec.ClientService.Type = corev1.ServiceTypeClusterIP
	delete(c.Spec.ClientService.Annotations, "service.beta.kubernetes.io/aws-load-balancer-scheme")
	if err := f.k8s.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	svc = service()
	want := map[string]string{
		"example.com/owner":                  "team-a",
		"cloud.example.com/load-balancer-id": "lb-1",
		resources.AnnotationUserAnnotations:  "example.com/owner",
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].NodePort != 0 || svc.Spec.ClusterIP != clusterIP {
		t.Errorf("client Service %s, node port %d, cluster IP %s: want ClusterIP, no node port, cluster IP %s still",
			svc.Spec.Type, svc.Spec.Ports[0].NodePort, svc.Spec.ClusterIP, clusterIP)
	}
	if !maps.Equal(svc.Annotations, want) {
		t.Errorf("annotations %v, want %v", svc.Annotations, want)
	}

	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if again := service(); again.ResourceVersion != svc.ResourceVersion {
		t.Errorf("a reconcile with nothing to change rewrote the client Service (resourceVersion %s -> %s)", svc.ResourceVersion, again.ResourceVersion)
	}
}
