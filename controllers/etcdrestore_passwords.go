package controllers

import (
	"context"
	"fmt"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// carryRootPasswords gives the cluster a snapshot is restored into the root passwords the
// operator has set on the cluster the snapshot was taken of, before the cluster runs on the
// restored data. The snapshot holds the password in force when it was taken, which the user's
// Secret may no longer have; the cluster's reconciler logs in with it from the cluster's own
// record, and sets the Secret's. Nothing is carried when the snapshot is of the cluster itself
// (its record has its passwords already), of an unknown cluster (a snapshot named by its
// location) or of one whose record is gone (a deleted cluster): if etcd then refuses the
// Secret's password, the cluster reports CredentialsRejected, naming the Secret to fix.
func (r *EtcdRestoreReconciler) carryRootPasswords(ctx context.Context, c *etcdv1alpha1.EtcdCluster, src snapshotSource) error {
	if c.Spec.Auth == nil || src.cluster == "" || src.cluster == c.Name {
		return nil
	}
	source, err := getSecret(ctx, r.Client, c.Namespace, resources.RootCredentialsSecretName(src.cluster))
	if err != nil || source == nil {
		return err
	}
	carried, err := resources.ReadRootCredentials(source)
	if err != nil {
		return fmt.Errorf("read EtcdCluster %s's root passwords: %w", src.cluster, err)
	}
	current, err := getSecret(ctx, r.Client, c.Namespace, resources.RootCredentialsSecretName(c.Name))
	if err != nil {
		return err
	}
	known, err := resources.ReadRootCredentials(current)
	if err != nil {
		return fmt.Errorf("read EtcdCluster %s's root passwords: %w", c.Name, err)
	}
	if _, err := writeRootRecord(ctx, r.Client, c, current, known.WithPasswordsSet(carried.History...)); err != nil {
		return fmt.Errorf("carry EtcdCluster %s's root passwords to EtcdCluster %s: %w", src.cluster, c.Name, err)
	}
	return nil
}
