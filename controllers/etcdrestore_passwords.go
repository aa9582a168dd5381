package controllers

import (
	"context"
	"fmt"
	"time"

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

// authOn: a backup recorded a as taken with authentication on.
func authOn(a *etcdv1alpha1.BackupArtifact) bool {
	return a.AuthEnabled != nil && *a.AuthEnabled
}

// authRequired refuses the restore of a snapshot recorded as taken with authentication on
// (src.withAuth) into a cluster without auth (targetAuth nil), before anything is made or
// staged: the restored etcd refuses every client without a user, the operator's too, and the
// cluster would never serve. missing says where auth is missing, fix begins the fix, which the
// refusal completes with what root's Secret must hold (passwordOfThen), and untouched says what
// was left as it was.
func (r *EtcdRestoreReconciler) authRequired(ctx context.Context, rs *etcdv1alpha1.EtcdRestore, src snapshotSource, targetAuth *etcdv1alpha1.AuthSpec, missing, fix, untouched string) error {
	if src.withAuth == nil || targetAuth != nil {
		return nil
	}
	var kept *resources.RootRecord
	record, err := getSecret(ctx, r.Client, rs.Namespace, resources.RootCredentialsSecretName(src.cluster))
	if err != nil {
		return err
	}
	if record != nil {
		rec, err := resources.ReadRootCredentials(record)
		if err != nil {
			return fmt.Errorf("read EtcdCluster %s's root passwords: %w", src.cluster, err)
		}
		kept = &rec
	}
	which := "the snapshot " + src.withAuth.URI
	if src.withAuth.URI != src.uri {
		which = fmt.Sprintf("snapshot %s, the older one this restore falls back to should %s no longer exist,", src.withAuth.URI, src.uri)
	}
	holds, because := passwordOfThen(src.withAuth.StartTime.Time, src.cluster, kept)
	return failed(etcdv1alpha1.ReasonAuthRequired,
		"%s was taken with etcd authentication on (EtcdBackup %s records it): restored, etcd would refuse every client without a user, the operator's too, and %s; %s. %s to a Secret whose %q key holds %s, and create the restore again. %s",
		which, src.backup, missing, untouched, fix, rootPasswordKey, holds, because)
}

// passwordOfThen says what root's Secret must hold for the operator to log in to data restored
// from a snapshot taken at taken of cluster, and why, given the record of root passwords the
// operator keeps for that cluster (nil: none). The restore carries that record's passwords to
// the cluster it restores into (carryRootPasswords), and the operator tries them all: when the
// oldest was set at or before the snapshot, the one in force then is among them, and the Secret
// may hold any password, which the operator sets once logged in. Passwords are never named.
func passwordOfThen(taken time.Time, cluster string, kept *resources.RootRecord) (holds, because string) {
	then := fmt.Sprintf("root's password when the snapshot was taken (%s)", taken.UTC().Format(time.RFC3339))
	if kept == nil || len(kept.History) == 0 {
		return then, fmt.Sprintf("The operator keeps no passwords of EtcdCluster %s to try: the cluster is gone, or the operator never set its password", cluster)
	}
	oldest := kept.History[len(kept.History)-1].At
	since := oldest.UTC().Format(time.RFC3339)
	if !oldest.After(taken) {
		return "a password of your choice", fmt.Sprintf("The operator logs in to the restored data with root's password of then, which it kept for EtcdCluster %s (the last %d it set on it, since %s), and then sets the Secret's",
			cluster, resources.RootPasswordHistoryLimit, since)
	}
	return then, fmt.Sprintf("The operator also tries the last %d passwords it set on EtcdCluster %s, kept since %s, which may not reach back that far",
		resources.RootPasswordHistoryLimit, cluster, since)
}
