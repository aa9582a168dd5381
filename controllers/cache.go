package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-database/etcd-operator/internal/resources"
)

// CacheOptions are what the manager's informers hold: the watched namespaces (none given:
// every namespace), and, of the kinds the operator makes, only what it made — the objects
// labelled resources.ManagedBy. Without that, every Pod, Secret, claim, Service, Job and
// disruption budget of those namespaces would be cached, and the operator's memory would grow
// with whatever else runs there.
//
// Objects of those kinds that users make and a spec names (a root password or TLS Secret, S3
// credentials and CA, a backup's claim) are therefore not in the cache: they are read through
// the manager's API reader, never through the cached client, which would say they do not exist.
func CacheOptions(namespaces []string) cache.Options {
	made := cache.ByObject{Label: labels.SelectorFromSet(resources.ManagedBy())}
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   made,
		&corev1.PersistentVolumeClaim{}: made,
		&corev1.Service{}:               made,
		&corev1.Secret{}:                made,
		&policyv1.PodDisruptionBudget{}: made,
		&batchv1.Job{}:                  made,
		&appsv1.Deployment{}:            made,
	}}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = make(map[string]cache.Config, len(namespaces))
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}
