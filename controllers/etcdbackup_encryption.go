package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// encryptionProblem: the Secret of keys spec.encryption names exists and every entry is an
// age key, so that the run's Job can encrypt to the newest.
func (r *EtcdBackupReconciler) encryptionProblem(ctx context.Context, b *etcdv1alpha1.EtcdBackup) (string, string) {
	if b.Spec.Encryption == nil {
		return "", ""
	}
	if _, problem := readEncryptionKeys(ctx, r.APIReader, b.Namespace, b.Spec.Encryption); problem != nil {
		return problem.reason, problem.message
	}
	return "", ""
}

// refuseVerificationWithoutKey records run's snapshot as not verified, without a Job, when it
// is encrypted to a key spec.encryption's Secret no longer holds (or the Secret is missing or
// malformed), and says so in the Verified condition and a Warning event naming the key. It
// returns whether it did. The next run's snapshot, encrypted to the newest key, is verified
// as usual.
func (r *EtcdBackupReconciler) refuseVerificationWithoutKey(ctx context.Context, b *etcdv1alpha1.EtcdBackup, run *etcdv1alpha1.BackupRun) bool {
	a := run.Artifact
	problem := snapshotKeyProblem(ctx, r.APIReader, b.Namespace, b.Spec.Encryption, a.EncryptionKeyID, a.URI, "spec.encryption.secretName", "no verify Job was started")
	if problem == nil {
		return false
	}
	v := etcdv1alpha1.SnapshotVerification{URI: a.URI, Result: etcdv1alpha1.SnapshotNotVerified, Time: metav1.NewTime(r.Now()), Message: problem.message}
	a.Verification = v.DeepCopy()
	if b.Status.LastBackup != nil && b.Status.LastBackup.URI == a.URI {
		b.Status.LastBackup.Verification = v.DeepCopy()
	}
	b.Status.LastVerified = v.DeepCopy()
	setBackupCondition(b, etcdv1alpha1.ConditionVerified, metav1.ConditionFalse, problem.reason, "%s", problem.message)
	postEvent(r.Recorder, b, corev1.EventTypeWarning, problem.reason, "Verify", "%s", problem.message)
	return true
}

// encryptedTo is what an event adds about a snapshot's encryption.
func encryptedTo(keyID string) string {
	if keyID == "" {
		return ""
	}
	return ", encrypted to key " + keyID
}
