//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Encrypted backups on the real cluster: a snapshot encrypted to the Secret's newest key lands
// in S3 as ciphertext, passes its verification drill, and restores into a new cluster; a
// restore given only another key is refused before the live cluster is touched, naming the key
// it needs; after a rotation, the older snapshot still restores while the newer is encrypted to
// the new key.
func TestEncryptedBackup(t *testing.T) {
	inParallel(t, 50*time.Second)
	f := newBackupFixture(t, "e2e-encrypt-")
	ctx := context.Background()
	keyA, keyB := newAgeKey(t), newAgeKey(t)
	idA, idB := encryption.KeyID(keyA.Recipient()), encryption.KeyID(keyB.Recipient())
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "backup-keys", Namespace: f.ns},
		StringData: map[string]string{"2026-01-01": keyA.String()}}
	create(t, keys)
	encrypted := etcdv1alpha1.EtcdBackupSpec{
		Destination: f.s3Destination("encrypted/", f.s3.CredentialsSecret),
		Encryption:  &etcdv1alpha1.SnapshotEncryption{SecretName: keys.Name},
		Verify:      &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyAlways},
	}

	before := f.createBackup(t, "key-a", encrypted)
	waitBackupPhase(t, before, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
	if before.Status.Phase != etcdv1alpha1.BackupCompleted {
		t.Fatalf("backup failed: %+v", before.Status)
	}
	art := before.Status.LastBackup

	t.Run("stored as ciphertext, verified by its drill", func(t *testing.T) {
		if art.EncryptionKeyID != idA {
			t.Errorf("status.lastBackup.encryptionKeyID %q, want %q", art.EncryptionKeyID, idA)
		}
		key := strings.TrimPrefix(art.URI, "s3://"+backupBucket+"/")
		stored := f.s3.getObject(t, backupBucket, key)
		if bytes.Contains(stored, []byte(datasetValue("dataset/0000", 64))) || bytes.Contains(stored, []byte("dataset/0")) {
			t.Error("the stored snapshot holds the dataset in plain")
		}
		sum := sha256.Sum256(stored)
		if hex.EncodeToString(sum[:]) != art.SHA256 || int64(len(stored)) != art.SizeBytes {
			t.Errorf("status records %d bytes sha256 %s; the bucket holds %d bytes sha256 %x", art.SizeBytes, art.SHA256, len(stored), sum)
		}
		head, err := f.s3.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(backupBucket), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		if got := head.Metadata[encryption.MetadataKeyID]; got != idA {
			t.Errorf("the object's metadata names key %q, want %q (all: %v)", got, idA, head.Metadata)
		}
		waitFor(t, "the snapshot verified", func(ctx context.Context) (bool, error) {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(before), before); err != nil {
				return false, err
			}
			v := before.Status.LastVerified
			if v != nil && v.Result != etcdv1alpha1.SnapshotVerified {
				return false, fmt.Errorf("verification %s: %s", v.Result, v.Message)
			}
			return v != nil, nil
		})
	})

	t.Run("restored into a new cluster", func(t *testing.T) {
		rs := f.createRestore(t, "decrypted", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: before.Name}},
			Target: f.newTarget("decrypted", 1),
		})
		waitRestorePhase(t, rs, restoreTimeout)
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted || rs.Status.SnapshotSHA256 != art.SHA256 {
			t.Fatalf("restore %s: %+v", rs.Status.Phase, rs.Status)
		}
		restored := &etcdv1alpha1.EtcdCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "decrypted"}, restored); err != nil {
			t.Fatal(err)
		}
		expectData(t, clientServiceEndpoint(t, restored), 0, map[string]int{"dataset/": datasetKeys})
	})

	t.Run("another key refused before anything is touched", func(t *testing.T) {
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other-keys", Namespace: f.ns},
			StringData: map[string]string{"2026-12-01": keyB.String()}})
		live := &etcdv1alpha1.EtcdCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f.cluster), live); err != nil {
			t.Fatal(err)
		}
		rs := f.createRestore(t, "wrong-key", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: before.Name},
				Encryption: &etcdv1alpha1.SnapshotEncryption{SecretName: "other-keys"}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: f.cluster.Name},
		})
		expectRestoreFailed(t, rs, "key "+idA)
		if cond := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); cond.Reason != etcdv1alpha1.ReasonEncryptionKeyMissing {
			t.Errorf("reason %s, want %s", cond.Reason, etcdv1alpha1.ReasonEncryptionKeyMissing)
		}
		if rs.Status.Replaced != nil {
			t.Errorf("the restore got as far as recording what it would replace: %+v", rs.Status.Replaced)
		}
		expectWarningEvent(t, f.ns, rs.Name, "RestoreFailed", idA)
		after := &etcdv1alpha1.EtcdCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(f.cluster), after); err != nil {
			t.Fatal(err)
		}
		if after.Status.ClusterID != live.Status.ClusterID || after.Annotations[resources.AnnotationRestorePending] != "" || after.Annotations[resources.AnnotationRestoreSeed] != "" {
			t.Errorf("EtcdCluster %s was touched: cluster ID %s (was %s), annotations %v", f.cluster.Name, after.Status.ClusterID, live.Status.ClusterID, after.Annotations)
		}
		jobs := &batchv1.JobList{}
		if err := k8sClient.List(ctx, jobs, client.InNamespace(f.ns), client.MatchingLabels{resources.LabelRestore: rs.Name}); err != nil {
			t.Fatal(err)
		}
		if len(jobs.Items) > 0 {
			t.Errorf("%d restore Job(s) were made", len(jobs.Items))
		}
		expectData(t, clientServiceEndpoint(t, f.cluster), 0, map[string]int{"dataset/": datasetKeys})
	})

	t.Run("rotated: the older snapshot still restores", func(t *testing.T) {
		current := &corev1.Secret{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(keys), current); err != nil {
			t.Fatal(err)
		}
		current.Data["2026-06-01"] = []byte(keyB.String())
		if err := k8sClient.Update(ctx, current); err != nil {
			t.Fatal(err)
		}
		after := f.createBackup(t, "key-b", encrypted)
		waitBackupPhase(t, after, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
		if after.Status.Phase != etcdv1alpha1.BackupCompleted || after.Status.LastBackup.EncryptionKeyID != idB {
			t.Fatalf("backup after the rotation: %+v; want it encrypted to the newest key %s", after.Status, idB)
		}
		rs := f.createRestore(t, "rotated", etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: before.Name}},
			Target: f.newTarget("rotated", 1),
		})
		waitRestorePhase(t, rs, restoreTimeout)
		if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
			t.Fatalf("restore of the snapshot encrypted to %s after the rotation: %+v", idA, rs.Status)
		}
		restored := &etcdv1alpha1.EtcdCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "rotated"}, restored); err != nil {
			t.Fatal(err)
		}
		expectData(t, clientServiceEndpoint(t, restored), 0, map[string]int{"dataset/": datasetKeys})
	})
}

func newAgeKey(t *testing.T) *age.X25519Identity {
	t.Helper()
	key, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	giveSecret(key.String()) // never to be found in the operator's or its Jobs' logs
	return key
}

// expectWarningEvent waits for a Warning event of reason about the object named regarding
// whose note names what; no event in the namespace may quote an age key.
func expectWarningEvent(t *testing.T, namespace, regarding, reason, what string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a Warning %s event about %s naming %s", reason, regarding, what), func(ctx context.Context) (bool, error) {
		events := &eventsv1.EventList{}
		if err := k8sClient.List(ctx, events, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if strings.Contains(e.Note, "AGE-SECRET-KEY-1") {
				return false, fmt.Errorf("event %s quotes an age key", e.Reason)
			}
			if e.Regarding.Name == regarding && e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Note, what) {
				return true, nil
			}
		}
		return false, nil
	})
}
