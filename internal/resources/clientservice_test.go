package resources

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The client Service takes spec.clientService's type and annotations, and the keys it took are
// recorded, so that a key that leaves the spec leaves the Service and nobody else's does.
func TestClientServiceFollowsTheSpecAndLeavesOthersAnnotations(t *testing.T) {
	c := testCluster()
	if svc := ClientService(c); svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Annotations != nil {
		t.Fatalf("default client Service: type %s, annotations %v; want ClusterIP and none", svc.Spec.Type, svc.Annotations)
	}

	c.Spec.ClientService.Type = corev1.ServiceTypeLoadBalancer
	c.Spec.ClientService.Annotations = map[string]string{"b.example/scheme": "internal", "a.example/owner": "team-a"}
	desired := ClientService(c)
	if desired.Spec.Type != corev1.ServiceTypeLoadBalancer || desired.Annotations[AnnotationUserAnnotations] != "a.example/owner,b.example/scheme" {
		t.Fatalf("client Service: type %s, annotations %v", desired.Spec.Type, desired.Annotations)
	}

	current := desired.DeepCopy()
	current.Spec.ClusterIP = "10.0.0.7"
	current.Spec.Ports[0].NodePort = 31000
	current.Annotations["cloud.example/id"] = "lb-1"
	if _, changed := ClientServiceUpdate(current, desired); changed {
		t.Error("a Service as the spec wants it, plus what the API server and a cloud controller added, is changed")
	}

	delete(c.Spec.ClientService.Annotations, "b.example/scheme")
	c.Spec.ClientService.Annotations["a.example/owner"] = "team-b"
	c.Spec.ClientService.Type = corev1.ServiceTypeNodePort
	updated, changed := ClientServiceUpdate(current, ClientService(c))
	want := map[string]string{"a.example/owner": "team-b", "cloud.example/id": "lb-1", AnnotationUserAnnotations: "a.example/owner"}
	if !changed || updated.Spec.Type != corev1.ServiceTypeNodePort || !maps.Equal(updated.Annotations, want) ||
		updated.Spec.ClusterIP != "10.0.0.7" || updated.Spec.Ports[0].NodePort != 31000 {
		t.Errorf("changed %t, type %s, annotations %v (want %v), cluster IP %s, node port %d",
			changed, updated.Spec.Type, updated.Annotations, want, updated.Spec.ClusterIP, updated.Spec.Ports[0].NodePort)
	}
	if current.Annotations["b.example/scheme"] != "internal" {
		t.Error("the update changed the Service it was given")
	}

	c.Spec.ClientService.Annotations = nil
	updated, _ = ClientServiceUpdate(updated, ClientService(c))
	if want := map[string]string{"cloud.example/id": "lb-1"}; !maps.Equal(updated.Annotations, want) {
		t.Errorf("with no annotations left in the spec: %v, want %v", updated.Annotations, want)
	}
}
