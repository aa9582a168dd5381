package controllers

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A cluster made by an operator from before the client Service selected LabelServesClients: its
// member pods lack the label and its client Service selects every pod of the cluster. The
// operator labels the pods, then narrows the selector, and no serving member leaves the Service
// (nor is any pod restarted: a label is not part of the pod's spec hash).
func TestAClientServiceOfAnOlderOperatorKeepsEveryMember(t *testing.T) {
	a := newScriptedCluster(t, 3, nil, nil)
	old := resources.ClientService(a.cluster)
	old.Spec.Selector = resources.Selector(a.cluster)
	if err := a.k8s.Create(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, name := range a.members {
		pod, _ := a.pod(t, name)
		delete(pod.Labels, resources.LabelServesClients)
		if err := a.k8s.Update(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		uids[name] = string(pod.UID)
	}

	a.reconcile(t, 1)
	svc := &corev1.Service{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(old), svc); err != nil {
		t.Fatal(err)
	}
	if want := resources.ClientEndpointSelector(a.cluster); !maps.Equal(svc.Spec.Selector, want) {
		t.Errorf("client Service selector %v, want %v", svc.Spec.Selector, want)
	}
	for _, name := range a.members {
		pod, ok := a.pod(t, name)
		if !ok || string(pod.UID) != uids[name] {
			t.Fatalf("member %s's pod was replaced", name)
		}
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			t.Errorf("member %s (labels %v) is out of the client Service (selector %v)", name, pod.Labels, svc.Spec.Selector)
		}
	}
}
