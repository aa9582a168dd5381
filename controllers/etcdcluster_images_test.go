package controllers

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-database/etcd-operator/internal/resources"
)

// With RELATED_IMAGE_ETCD pinned by digest, members of the default version run that image as it
// is, and the operator knows which version they run though the image does not say: idle
// reconciles leave them alone (an unknown version would be "upgraded" again and again). An
// upgrade to another version runs that version's tag, and the pod records its new version.
func TestMembersOnAPinnedImageAreUpgradedOnce(t *testing.T) {
	pinned := "registry.test/etcd@sha256:" + strings.Repeat("a", 64)
	a := newScriptedClusterWithImages(t, 3, resources.EtcdImagesOf(pinned, "3.6.16"), nil, nil)
	podsBefore, _ := memberObjects(t, a.k8s)
	for _, p := range memberPods(t, a) {
		if p.Spec.Containers[0].Image != pinned {
			t.Fatalf("member %s runs %s, want the pinned %s", p.Name, p.Spec.Containers[0].Image, pinned)
		}
	}

	a.reconcile(t, 3)
	if podsAfter, _ := memberObjects(t, a.k8s); !maps.Equal(podsBefore, podsAfter) {
		t.Fatalf("idle reconciles changed member pods on the pinned image: %v -> %v; events:\n%s", podsBefore, podsAfter, a.events())
	}

	c := a.reconcile(t, 0)
	c.Spec.Version = "3.7.3"
	if err := a.k8s.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	a.reconcile(t, 3)
	upgraded := 0
	for _, p := range memberPods(t, a) {
		switch image, version := p.Spec.Containers[0].Image, p.Annotations[resources.AnnotationEtcdVersion]; {
		case image == "registry.test/etcd:v3.7.3" && version == "3.7.3":
			upgraded++
		case image != pinned || version != "3.6.16":
			t.Errorf("member %s runs %s, recorded as version %q", p.Name, image, version)
		}
	}
	// The scripted members keep reporting 3.6.16, so the upgrade waits after its first step.
	if upgraded != 1 {
		t.Fatalf("%d members upgraded to registry.test/etcd:v3.7.3, want 1; events:\n%s", upgraded, a.events())
	}
}

func memberPods(t *testing.T, a *scriptedCluster) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := a.k8s.List(t.Context(), pods, client.InNamespace(a.cluster.Namespace)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != len(a.members) {
		t.Fatalf("%d pods, want %d", len(pods.Items), len(a.members))
	}
	return pods.Items
}
