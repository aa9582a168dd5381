package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
)

// DeleteOrphans lets the envtest suite, against a real API server, delete orphans as the
// reconciler does, from the pods and claims it is given as observed.
func (r *EtcdClusterReconciler) DeleteOrphans(ctx context.Context, c *etcdv1alpha1.EtcdCluster, pods map[string]*corev1.Pod, claims map[string]*corev1.PersistentVolumeClaim, names []string) error {
	return r.deleteOrphans(ctx, c, &observation{pods: pods, pvcs: claims}, membership.Step{}, names)
}
