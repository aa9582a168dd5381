package controllers_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/encryption"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Encrypted snapshots: a restore or a verification of a snapshot whose key no Secret given
// holds is refused before anything is made or changed, with a condition and a Warning event
// that name the key id it needs; a Secret of keys that is missing or malformed is named with
// the fix. No key ever reaches status or an event.

// ageSecretKey matches an age identity, or enough of one to matter.
var ageSecretKey = regexp.MustCompile(`AGE-SECRET-KEY-1[0-9A-Z]{8,}`)

func ageKey(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func keysSecret(t *testing.T, namespace, name string, entries map[string]string) {
	t.Helper()
	data := map[string][]byte{}
	for entry, value := range entries {
		data[entry] = []byte(value)
	}
	if err := k8sClient.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Data: data}); err != nil {
		t.Fatal(err)
	}
}

// backupWithEncryptedSnapshot is a one-shot EtcdBackup of cluster whose status records one
// completed snapshot, encrypted to keyID.
func backupWithEncryptedSnapshot(t *testing.T, namespace, cluster, keyID string, mutate func(*etcdv1alpha1.EtcdBackup)) *etcdv1alpha1.EtcdBackup {
	t.Helper()
	b := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: namespace},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: cluster,
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
	}
	mutate(b)
	if err := k8sClient.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	artifact := &etcdv1alpha1.BackupArtifact{
		URI: "pvc://backups/" + namespace + "/" + cluster + "/nightly_uid/20261127T010000Z-r10.db", SizeBytes: 1 << 20,
		SHA256: strings.Repeat("ab", 32), Revision: 10, EtcdVersion: "3.6.16", StartTime: now, CompletionTime: now,
		EncryptionKeyID: keyID,
	}
	// The backup controller may write status meanwhile: written on the latest, as often as that
	// conflicts.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Status = etcdv1alpha1.EtcdBackupStatus{Phase: etcdv1alpha1.BackupCompleted, LastBackup: artifact,
			History: []etcdv1alpha1.BackupRun{{Phase: etcdv1alpha1.BackupCompleted, Job: "nightly-20261127t010000", Artifact: artifact.DeepCopy()}}}
		return k8sClient.Status().Update(t.Context(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRestore(t *testing.T, namespace, name string, mutate func(*etcdv1alpha1.EtcdRestore)) *etcdv1alpha1.EtcdRestore {
	t.Helper()
	rs := &etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: etcdv1alpha1.EtcdRestoreSpec{Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "nightly"}}}}
	mutate(rs)
	if err := k8sClient.Create(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	return rs
}

// waitRestoreFailed waits for rs to fail with reason, and returns its condition's message.
func waitRestoreFailed(t *testing.T, rs *etcdv1alpha1.EtcdRestore, reason string) string {
	t.Helper()
	var message string
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(rs), rs); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
		if rs.Status.Phase != etcdv1alpha1.RestoreFailed || cond == nil || cond.Reason != reason {
			return fmt.Errorf("phase %q, condition %+v; want Failed with reason %s", rs.Status.Phase, cond, reason)
		}
		message = cond.Message
		return nil
	})
	return message
}

// expectWarning waits for a Warning event of reason about the object named regarding whose note
// holds every one of want, and checks that no event in the namespace quotes a key.
func expectWarning(t *testing.T, namespace, regarding, reason string, want ...string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		events := &eventsv1.EventList{}
		if err := k8sClient.List(t.Context(), events, client.InNamespace(namespace)); err != nil {
			return err
		}
		var seen []string
	next:
		for _, e := range events.Items {
			if ageSecretKey.MatchString(e.Note) {
				t.Fatalf("event %s quotes a key: %q", e.Reason, e.Note)
			}
			seen = append(seen, fmt.Sprintf("%s %s %q", e.Type, e.Reason, e.Note))
			if e.Regarding.Name != regarding || e.Type != corev1.EventTypeWarning || e.Reason != reason {
				continue
			}
			for _, w := range want {
				if !strings.Contains(e.Note, w) {
					continue next
				}
			}
			return nil
		}
		return fmt.Errorf("no Warning %s about %s naming %q among %q", reason, regarding, want, seen)
	})
}

// A restore of a snapshot encrypted to key A, given only a Secret holding key B, fails naming
// A's id and the keys the Secret holds, before anything is touched: in place, the cluster is
// not held, annotated nor staged for; into a new cluster, none is created. Without any Secret
// (the EtcdBackup's spec.encryption names one that does not exist), it fails naming that
// Secret and how to make it. Seen failing with the key check left out of resolveSource: the
// in-place restore held the cluster and staged a Job.
func TestRestoreWithoutTheSnapshotsKeyTouchesNothing(t *testing.T) {
	namespace := restrictedNamespace(t)
	a, b := ageKey(t), ageKey(t)
	idA, idB := encryption.KeyID(a.Recipient()), encryption.KeyID(b.Recipient())
	keysSecret(t, namespace, "restore-keys", map[string]string{"2026-12-01": b.String()})
	live := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "live", Namespace: namespace}}
	if err := k8sClient.Create(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	backupWithEncryptedSnapshot(t, namespace, live.Name, idA, func(b *etcdv1alpha1.EtcdBackup) {
		b.Spec.Encryption = &etcdv1alpha1.SnapshotEncryption{SecretName: "backup-keys"} // never made
	})

	inPlace := newRestore(t, namespace, "in-place", func(rs *etcdv1alpha1.EtcdRestore) {
		rs.Spec.Source.Encryption = &etcdv1alpha1.SnapshotEncryption{SecretName: "restore-keys"}
		rs.Spec.Target = etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: live.Name}
	})
	message := waitRestoreFailed(t, inPlace, etcdv1alpha1.ReasonEncryptionKeyMissing)
	for _, want := range []string{"key " + idA, "Secret restore-keys", "2026-12-01=" + idB, "nothing was restored"} {
		if !strings.Contains(message, want) {
			t.Errorf("the condition says %q, without %q", message, want)
		}
	}
	expectWarning(t, namespace, inPlace.Name, "RestoreFailed", idA)
	if inPlace.Status.Replaced != nil {
		t.Errorf("the restore recorded what it would replace (%+v): it got past its checks", inPlace.Status.Replaced)
	}
	after := &etcdv1alpha1.EtcdCluster{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(live), after); err != nil {
		t.Fatal(err)
	}
	for _, annotation := range []string{resources.AnnotationRestorePending, resources.AnnotationRestoreSeed} {
		if _, ok := after.Annotations[annotation]; ok {
			t.Errorf("EtcdCluster %s was annotated %s", live.Name, annotation)
		}
	}
	if len(after.Finalizers) > 0 && strings.Contains(strings.Join(after.Finalizers, ","), "restore") {
		t.Errorf("EtcdCluster %s was held: finalizers %v", live.Name, after.Finalizers)
	}

	toNew := newRestore(t, namespace, "to-new", func(rs *etcdv1alpha1.EtcdRestore) {
		rs.Spec.Target = etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: "copy",
			Cluster: &etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16"}}
	})
	message = waitRestoreFailed(t, toNew, etcdv1alpha1.ReasonEncryptionKeysNotFound)
	for _, want := range []string{"Secret backup-keys", "does not exist", "age-keygen", "nothing was restored"} {
		if !strings.Contains(message, want) {
			t.Errorf("the condition says %q, without %q", message, want)
		}
	}
	expectWarning(t, namespace, toNew.Name, "RestoreFailed", "backup-keys")
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: "copy"}, &etcdv1alpha1.EtcdCluster{}); err == nil {
		t.Error("EtcdCluster copy was created")
	}

	jobs := &batchv1.JobList{}
	if err := k8sClient.List(t.Context(), jobs, client.InNamespace(namespace), client.HasLabels{resources.LabelRestore}); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Errorf("%d restore Job(s) were made", len(jobs.Items))
	}
}

// A verification drill of a snapshot encrypted to a key the EtcdBackup's Secret no longer
// holds starts no Job: the snapshot is recorded as not verified, the Verified condition and a
// Warning event name the key id. Seen failing without refuseVerificationWithoutKey: a verify
// Job was made, whose fetch would have failed only once it ran.
func TestVerificationWithoutTheSnapshotsKeyStartsNoJob(t *testing.T) {
	namespace := restrictedNamespace(t)
	a, b := ageKey(t), ageKey(t)
	idA := encryption.KeyID(a.Recipient())
	keysSecret(t, namespace, "backup-keys", map[string]string{"2026-12-01": b.String()})
	cluster := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "live", Namespace: namespace}}
	if err := k8sClient.Create(t.Context(), cluster); err != nil {
		t.Fatal(err)
	}
	backup := backupWithEncryptedSnapshot(t, namespace, cluster.Name, idA, func(b *etcdv1alpha1.EtcdBackup) {
		b.Spec.Encryption = &etcdv1alpha1.SnapshotEncryption{SecretName: "backup-keys"}
		b.Spec.Verify = &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyAlways}
	})
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(backup), backup); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(backup.Status.Conditions, etcdv1alpha1.ConditionVerified)
		if cond == nil || cond.Reason != etcdv1alpha1.ReasonEncryptionKeyMissing || !strings.Contains(cond.Message, "key "+idA) {
			return fmt.Errorf("Verified condition %+v; want reason %s naming key %s", cond, etcdv1alpha1.ReasonEncryptionKeyMissing, idA)
		}
		return nil
	})
	if v := backup.Status.LastVerified; v == nil || v.Result != etcdv1alpha1.SnapshotNotVerified || v.URI != backup.Status.LastBackup.URI {
		t.Errorf("lastVerified %+v; want NotRun for %s", v, backup.Status.LastBackup.URI)
	}
	if v := backup.Status.History[0].Artifact.Verification; v == nil || v.Result != etcdv1alpha1.SnapshotNotVerified {
		t.Errorf("the run's snapshot records verification %+v; want NotRun, so that it is not tried again", v)
	}
	expectWarning(t, namespace, backup.Name, etcdv1alpha1.ReasonEncryptionKeyMissing, idA, "no verify Job was started")
	expectNoJobs(t, backup)
}

// A backup whose Secret of keys is missing, or malformed, waits with Ready=False naming the
// Secret and how to make it, or the entry and what it must hold, and starts no Job; the
// message never quotes the entry's value.
func TestBackupWithUnusableKeysWaitsAndSaysWhy(t *testing.T) {
	namespace := restrictedNamespace(t)
	missing := newBackup(t, namespace, "nowhere", func(b *etcdv1alpha1.EtcdBackup) {
		b.Spec.Encryption = &etcdv1alpha1.SnapshotEncryption{SecretName: "backup-keys"}
	})
	waitBackupCondition(t, missing, etcdv1alpha1.ConditionReady, etcdv1alpha1.ReasonEncryptionKeysNotFound, etcdv1alpha1.BackupPending)
	expectWarning(t, namespace, missing.Name, etcdv1alpha1.ReasonEncryptionKeysNotFound, "Secret backup-keys", "age-keygen")
	expectNoJobs(t, missing)

	notAKey := "AGE-SECRET-KEY-1NOTAKEY" + strings.Repeat("Q", 40)
	keysSecret(t, namespace, "malformed-keys", map[string]string{"2026-11-27": notAKey})
	malformed := newBackup(t, namespace, "nowhere", func(b *etcdv1alpha1.EtcdBackup) {
		b.Name = "malformed"
		b.Spec.Encryption = &etcdv1alpha1.SnapshotEncryption{SecretName: "malformed-keys"}
	})
	waitBackupCondition(t, malformed, etcdv1alpha1.ConditionReady, etcdv1alpha1.ReasonEncryptionKeysInvalid, etcdv1alpha1.BackupPending)
	cond := meta.FindStatusCondition(malformed.Status.Conditions, etcdv1alpha1.ConditionReady)
	if !strings.Contains(cond.Message, "entry 2026-11-27 of Secret malformed-keys") || strings.Contains(cond.Message, "NOTAKEY") {
		t.Errorf("Ready says %q: want the entry named, its value never quoted", cond.Message)
	}
	expectWarning(t, namespace, malformed.Name, etcdv1alpha1.ReasonEncryptionKeysInvalid, "entry 2026-11-27")
	expectNoJobs(t, malformed)
}
