package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-database/etcd-operator/internal/resources"
)

// plainNamespace is a namespace with no Pod Security profile, for objects that are not the
// operator's.
func plainNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "users-"}}
	if err := k8sClient.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// usersObjects are one object of each kind the operator also makes, as a user would make
// them: without the operator's label.
func usersObjects(namespace, name string) []client.Object {
	meta := metav1.ObjectMeta{Name: name, Namespace: namespace}
	container := corev1.Container{Name: "app", Image: "registry.test/app:1"}
	return []client.Object{
		&corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"blob": []byte(strings.Repeat("x", 10<<10))}},
		&corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{Containers: []corev1.Container{container}}},
		&corev1.PersistentVolumeClaim{ObjectMeta: meta, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}},
		&corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		&policyv1.PodDisruptionBudget{ObjectMeta: meta, Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		}},
		&batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{container},
		}}}},
	}
}

// The manager caches, of the kinds the operator makes, only what it made: the users' Secrets,
// Pods, claims, Services, disruption budgets and Jobs in the namespaces it watches are not held
// in its memory. Before, every object of those kinds in the cluster was, so the operator's
// memory grew with everything else running there.
func TestCacheHoldsOnlyWhatTheOperatorMade(t *testing.T) {
	namespace := plainNamespace(t)
	users := usersObjects(namespace, "users")
	// The same objects labelled as the operator labels what it makes, created after the users':
	// an informer delivers a kind's events in order, so once one of these is in the cache, the
	// user's object before it would be too, were it cached.
	made := usersObjects(namespace, "made")
	for i, obj := range users {
		if err := k8sClient.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		made[i].SetLabels(resources.ManagedBy())
		if err := k8sClient.Create(t.Context(), made[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i, obj := range users {
		kind := fmt.Sprintf("%T", obj)
		eventually(t, 10*time.Second, func() error {
			return managerCache.Get(t.Context(), client.ObjectKeyFromObject(made[i]), made[i].DeepCopyObject().(client.Object))
		})
		err := managerCache.Get(t.Context(), client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s %s, not the operator's, is in the manager's cache (get: %v)", kind, obj.GetName(), err)
		}
	}
}
