//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// etcdutl of the cluster's etcd version, built by the Makefile, inspects downloaded snapshots.
var etcdutl = envOr("E2E_ETCDUTL", "../../bin/etcd/v"+etcdVersion+"/etcdutl")

const (
	backupBucket = "backups"
	datasetKeys  = 500
	// A run includes pulling nothing (the image is local), a pod start and the snapshot.
	backupTimeout = 3 * time.Minute
)

// backupFixture is a namespace with an Available 3-member cluster holding a known dataset and a
// real S3 server in the cluster with an empty bucket.
type backupFixture struct {
	ns      string
	s3      *s3Server
	cluster *etcdv1alpha1.EtcdCluster
}

func newBackupFixture(t *testing.T, prefix string) *backupFixture {
	t.Helper()
	f := &backupFixture{ns: testNamespace(t, prefix)}
	f.s3 = startS3Server(t, f.ns)
	f.s3.createBucket(t, backupBucket)
	f.cluster = &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: f.ns},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: etcdVersion,
			Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("512Mi"))},
		},
	}
	if err := k8sClient.Create(context.Background(), f.cluster); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, f.cluster, 3)
	putDataset(t, clientServiceEndpoint(t, f.cluster), "dataset/", datasetKeys, 64)
	return f
}

// putDataset writes n keys prefix0000... with values of size bytes.
func putDataset(t *testing.T, endpoint, prefix string, n, size int) {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		key := fmt.Sprintf("%s%04d", prefix, i)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cl.Put(ctx, key, datasetValue(key, size))
		cancel()
		if err != nil {
			t.Fatalf("put %s%04d: %v", prefix, i, err)
		}
	}
}

// datasetValue is the value putDataset writes at key: the key itself, then filler up to size
// bytes, so that a value read back says which key it belongs to.
func datasetValue(key string, size int) string {
	v := key + ":" + strings.Repeat("v", max(size-len(key)-1, 0))
	return v[:max(size, len(key)+1)]
}

func (f *backupFixture) s3Destination(prefix, credentialsSecret string) etcdv1alpha1.StorageLocation {
	return etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
		Bucket: backupBucket, Prefix: prefix, Endpoint: f.s3.Endpoint, ForcePathStyle: true, AllowPlainHTTP: true,
		CredentialsSecretName: credentialsSecret,
	}}
}

func (f *backupFixture) createBackup(t *testing.T, name string, spec etcdv1alpha1.EtcdBackupSpec) *etcdv1alpha1.EtcdBackup {
	t.Helper()
	spec.ClusterName = f.cluster.Name
	b := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: spec}
	if err := k8sClient.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logBackupState(t, b)
		}
	})
	return b
}

// expectRecoveryTimeExceeded checks that the verification v of b, bounded by a
// maxRecoveryTime no restore meets, measured the snapshot's recovery time and its steps, and
// that the RecoveryTimeWithinBound condition and a Warning event say it is over the bound.
func expectRecoveryTimeExceeded(t *testing.T, b *etcdv1alpha1.EtcdBackup, v *etcdv1alpha1.SnapshotVerification) {
	t.Helper()
	bound := b.Spec.Verify.MaxRecoveryTime.Duration
	if v.RecoveryTime == nil || v.RecoveryTime.Duration <= bound || v.RecoverySteps == nil || v.RecoverySteps.Fetch == nil || v.RecoverySteps.Restore == nil ||
		v.RecoverySteps.StartUp == nil || v.SizeBytes != b.Status.LastBackup.SizeBytes {
		t.Fatalf("lastVerified %+v, steps %+v: want a recovery time above %s, its fetch, restore and start-up, and the snapshot's %d bytes",
			*v, v.RecoverySteps, bound, b.Status.LastBackup.SizeBytes)
	}
	t.Logf("%s: %d bytes served again in %s (fetch %s, restore %s, start-up %s)", b.Name, v.SizeBytes, v.RecoveryTime.Duration,
		v.RecoverySteps.Fetch.Duration, v.RecoverySteps.Restore.Duration, v.RecoverySteps.StartUp.Duration)
	cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionRecoveryTimeWithinBound)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != etcdv1alpha1.ReasonRecoveryTimeExceeded || !strings.Contains(cond.Message, v.URI) {
		t.Errorf("RecoveryTimeWithinBound condition %+v, want False %s naming %s", cond, etcdv1alpha1.ReasonRecoveryTimeExceeded, v.URI)
	}
	waitForWithin(t, "a Warning event "+etcdv1alpha1.ReasonRecoveryTimeExceeded+" about "+b.Name, time.Minute, func(ctx context.Context) (bool, error) {
		events := &corev1.EventList{}
		if err := k8sClient.List(ctx, events, client.InNamespace(b.Namespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.InvolvedObject.Name == b.Name && e.Type == corev1.EventTypeWarning && e.Reason == etcdv1alpha1.ReasonRecoveryTimeExceeded &&
				strings.Contains(e.Message, v.RecoveryTime.Duration.String()) && strings.Contains(e.Message, "maxRecoveryTime "+bound.String())
		}), nil
	})
}

// The one-shot backup of a known dataset lands in the bucket as a valid snapshot whose
// sha256, size and revision are what status says; then the PVC destination does the same.
func TestEtcdBackup(t *testing.T) {
	inParallel(t, 440*time.Second) // with the restore tests, after the cluster lifecycle tests
	f := newBackupFixture(t, "e2e-backup-")

	t.Run("to S3, verified", func(t *testing.T) {
		b := f.createBackup(t, "once", etcdv1alpha1.EtcdBackupSpec{Destination: f.s3Destination("prod/", f.s3.CredentialsSecret)})
		waitBackupPhase(t, b, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
		if b.Status.Phase != etcdv1alpha1.BackupCompleted {
			t.Fatalf("backup failed: %+v", b.Status)
		}
		art := b.Status.LastBackup
		wantPrefix := "s3://" + backupBucket + "/prod/" + f.ns + "/" + f.cluster.Name + "/" + b.Name + "_" + string(b.UID) + "/"
		if art == nil || !strings.HasPrefix(art.URI, wantPrefix) || !strings.HasSuffix(art.URI, fmt.Sprintf("-r%d.db", art.Revision)) {
			t.Fatalf("lastBackup %+v: URI should be %s<time>-r<revision>.db", art, wantPrefix)
		}
		if art.EtcdVersion != etcdVersion || art.Member == "" || art.ClusterID == "" {
			t.Errorf("lastBackup %+v: want etcd version %s, the member and cluster IDs", art, etcdVersion)
		}
		key := strings.TrimPrefix(art.URI, "s3://"+backupBucket+"/")
		snapshot := f.s3.getObject(t, backupBucket, key)
		checkSnapshot(t, snapshot, art, datasetKeys)

		if len(b.Status.History) != 1 || b.Status.History[0].Phase != etcdv1alpha1.BackupCompleted {
			t.Errorf("history %+v, want the one completed run", b.Status.History)
		}
		if cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionSucceeded); cond == nil || cond.Status != metav1.ConditionTrue {
			t.Errorf("Succeeded condition %+v, want True", cond)
		}
		waitJobsGone(t, b)
		logPrinterColumns(t, f.ns)
	})

	// spec.verify: a Job restores the snapshot in a pod of its own with the cluster's etcdutl,
	// starts etcd on it and compares it with what the backup recorded, timing how long the
	// snapshot took to serve again: held to a bound of 1ms, that time is over it, which the
	// RecoveryTimeWithinBound condition and a Warning event say while the snapshot stays
	// verified. A snapshot corrupted in the bucket after its upload fails verification, and no
	// restore takes it: one that names it is refused, one that names none restores the newest
	// older snapshot.
	t.Run("proven restorable by a verify Job, its recovery time measured; a snapshot corrupted in the bucket is caught and skipped by a later restore", func(t *testing.T) {
		always := &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyAlways}
		bounded := &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyAlways, MaxRecoveryTime: &metav1.Duration{Duration: time.Millisecond}}
		proven := f.createBackup(t, "proven", etcdv1alpha1.EtcdBackupSpec{Destination: f.s3Destination("verified/", f.s3.CredentialsSecret), Verify: bounded})
		waitBackupPhase(t, proven, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
		lastVerified := func(b *etcdv1alpha1.EtcdBackup) *etcdv1alpha1.SnapshotVerification {
			waitForWithin(t, "the snapshot of "+b.Name+" verified", backupTimeout, func(ctx context.Context) (bool, error) {
				err := k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b)
				return err == nil && b.Status.LastVerified != nil, err
			})
			t.Logf("%s: lastVerified %+v", b.Name, *b.Status.LastVerified)
			return b.Status.LastVerified
		}
		v := lastVerified(proven)
		art := proven.Status.LastBackup
		if v.Result != etcdv1alpha1.SnapshotVerified || art == nil || v.URI != art.URI || v.Revision < art.Revision || v.Duration == nil {
			t.Fatalf("lastVerified %+v of snapshot %+v: want it Verified, at its revision or later, with a duration", *v, art)
		}
		if cond := meta.FindStatusCondition(proven.Status.Conditions, etcdv1alpha1.ConditionVerified); cond == nil || cond.Status != metav1.ConditionTrue {
			t.Errorf("Verified condition %+v, want True: a snapshot slower to restore than its bound still restores", cond)
		}
		expectRecoveryTimeExceeded(t, proven, v)

		// Scheduled, unverified: its second run's snapshot is corrupted in the bucket, then
		// verification is turned on and the next run put off, so that it is that snapshot the
		// verify Job reads. (A one-shot EtcdBackup's spec cannot change.)
		corrupted := f.createBackup(t, "corrupted", etcdv1alpha1.EtcdBackupSpec{Destination: f.s3Destination("corrupted/", f.s3.CredentialsSecret),
			Schedule: "* * * * *", Verify: &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyNever}})
		var older *etcdv1alpha1.BackupArtifact
		waitForWithin(t, "two scheduled runs of corrupted", backupTimeout+2*time.Minute, func(ctx context.Context) (bool, error) {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(corrupted), corrupted); err != nil || corrupted.Status.LastBackup == nil || corrupted.Status.ActiveJob != "" {
				return false, err
			}
			if older == nil {
				older = corrupted.Status.LastBackup.DeepCopy()
			}
			return corrupted.Status.LastBackup.URI != older.URI, nil
		})
		patch := client.MergeFrom(corrupted.DeepCopy())
		corrupted.Spec.Schedule = "0 0 1 1 *"
		if err := k8sClient.Patch(context.Background(), corrupted, patch); err != nil {
			t.Fatal(err)
		}
		// A third run may have started between the wait and the patch (seen in a full e2e run
		// whose operator was restarted mid-run, slowing the runs to a minute each): it ends
		// first, and the restore below must then pick the newest snapshot other than newer.
		waitForWithin(t, "no run of corrupted under way", backupTimeout, func(ctx context.Context) (bool, error) {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(corrupted), corrupted)
			return err == nil && corrupted.Status.ActiveJob == "", err
		})
		newer := corrupted.Status.LastBackup.URI
		for _, run := range corrupted.Status.History {
			if a := run.Artifact; a != nil && a.URI != newer && a.StartTime.After(older.StartTime.Time) {
				older = a.DeepCopy()
			}
		}
		key := strings.TrimPrefix(newer, "s3://"+backupBucket+"/")
		whole := f.s3.getObject(t, backupBucket, key)
		f.s3.putObject(t, backupBucket, key, append(whole[:len(whole)/2], bytes.Repeat([]byte{0xff}, len(whole)-len(whole)/2)...))
		patch = client.MergeFrom(corrupted.DeepCopy())
		corrupted.Spec.Verify = always
		if err := k8sClient.Patch(context.Background(), corrupted, patch); err != nil {
			t.Fatal(err)
		}
		if v := lastVerified(corrupted); v.Result != etcdv1alpha1.SnapshotFailed || v.URI != newer {
			t.Fatalf("lastVerified %+v, want snapshot %s, corrupted in the bucket, Failed", *v, newer)
		}
		if cond := meta.FindStatusCondition(corrupted.Status.Conditions, etcdv1alpha1.ConditionVerified); cond == nil || cond.Status != metav1.ConditionFalse {
			t.Errorf("Verified condition %+v, want False", cond)
		}
		restoreOf := func(name, uri string) *etcdv1alpha1.EtcdRestore {
			rs := &etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: etcdv1alpha1.EtcdRestoreSpec{
				Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: corrupted.Name, URI: uri}},
				Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: name, Cluster: &etcdv1alpha1.EtcdClusterSpec{
					Size: 1, Version: etcdVersion, Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("512Mi"))}}},
			}}
			if err := k8sClient.Create(context.Background(), rs); err != nil {
				t.Fatal(err)
			}
			waitRestorePhase(t, rs, restoreTimeout)
			return rs
		}
		// Named, the failed snapshot is refused with nothing made.
		if rs := restoreOf("from-corrupted", newer); rs.Status.Phase != etcdv1alpha1.RestoreFailed {
			t.Fatalf("a restore naming the snapshot that failed verification: %+v", rs.Status)
		} else {
			t.Logf("refused: %+v", meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
		}
		expectNoCluster(t, f.ns, "from-corrupted")
		// Not named, the newest snapshot that did not fail is restored: the older one.
		if rs := restoreOf("skips-corrupted", ""); rs.Status.Phase != etcdv1alpha1.RestoreCompleted || rs.Status.SnapshotURI != older.URI || deref(rs.Status.RestoredRevision) != older.Revision {
			t.Fatalf("a restore of the backup without a snapshot named: %+v; want %s (revision %d), the newest that did not fail verification, restored",
				rs.Status, older.URI, older.Revision)
		}
	})

	t.Run("to a PVC, verified", func(t *testing.T) {
		claim := createClaim(t, f.ns, "backups")
		b := f.createBackup(t, "to-claim", etcdv1alpha1.EtcdBackupSpec{Destination: etcdv1alpha1.StorageLocation{
			PVC: &etcdv1alpha1.PVCLocation{ClaimName: claim.Name, SubPath: "etcd/nightly"},
		}})
		waitBackupPhase(t, b, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
		if b.Status.Phase != etcdv1alpha1.BackupCompleted {
			t.Fatalf("backup failed: %+v", b.Status)
		}
		art := b.Status.LastBackup
		base := "pvc://" + claim.Name + "/etcd/nightly/"
		if !strings.HasPrefix(art.URI, base) {
			t.Fatalf("URI %s, want it under %s", art.URI, base)
		}
		// The file as another pod mounting the claim sees it.
		out := runPod(t, f.ns, "sha-", claim.Name, "sha256sum", "/claim/etcd/nightly/"+strings.TrimPrefix(art.URI, base))
		if fields := strings.Fields(out); len(fields) == 0 || fields[0] != art.SHA256 {
			t.Fatalf("sha256sum in the claim: %q, status says %s", out, art.SHA256)
		}
	})

	t.Run("wrong credentials fail at once and leave nothing", func(t *testing.T) {
		wrong := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "wrong-credentials", Namespace: f.ns},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3AccessKey, "AWS_SECRET_ACCESS_KEY": "not-the-secret"},
		}
		if err := k8sClient.Create(context.Background(), wrong); err != nil {
			t.Fatal(err)
		}
		b := f.createBackup(t, "wrong-credentials", etcdv1alpha1.EtcdBackupSpec{Destination: f.s3Destination("wrong/", wrong.Name)})
		waitBackupPhase(t, b, backupTimeout, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
		if b.Status.Phase != etcdv1alpha1.BackupFailed {
			t.Fatalf("phase %s with a wrong secret key, want Failed", b.Status.Phase)
		}
		cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
		if cond == nil || cond.Reason != etcdv1alpha1.ReasonPermanentFailure || !strings.Contains(strings.ToLower(cond.Message), "signature") {
			t.Errorf("Succeeded condition %+v: want PermanentFailure saying the signature (the secret key) was refused", cond)
		}
		if b.Status.LastBackup != nil {
			t.Errorf("lastBackup %+v after a failed run", b.Status.LastBackup)
		}
		if keys := f.s3.listObjects(t, backupBucket, "wrong/"); len(keys) != 0 {
			t.Errorf("objects left by the failed run: %v", keys)
		}
	})

	t.Run("missing secret is reported, not run", func(t *testing.T) {
		b := f.createBackup(t, "no-secret", etcdv1alpha1.EtcdBackupSpec{Destination: f.s3Destination("none/", "does-not-exist")})
		waitFor(t, "Ready=False SecretNotFound", func(ctx context.Context) (bool, error) {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				return false, err
			}
			cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionReady)
			return cond != nil && cond.Reason == etcdv1alpha1.ReasonSecretNotFound && b.Status.Phase == etcdv1alpha1.BackupPending, nil
		})
		if jobs := backupJobs(t, b); len(jobs) != 0 {
			t.Errorf("Jobs started without their Secret: %v", jobs)
		}
	})

	t.Run("scheduled every minute keeps maxCount snapshots", func(t *testing.T) {
		b := f.createBackup(t, "every-minute", etcdv1alpha1.EtcdBackupSpec{
			Destination: f.s3Destination("scheduled/", f.s3.CredentialsSecret),
			Schedule:    "* * * * *",
			Retention:   &etcdv1alpha1.BackupRetention{MaxCount: ptrTo(int32(2))},
		})
		waitFor3 := 4*time.Minute + backupTimeout
		deadline := time.Now().Add(waitFor3)
		for {
			if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
				t.Fatal(err)
			}
			if completed(b.Status.History) >= 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %v: %d completed runs, want 3; status %+v", waitFor3, completed(b.Status.History), b.Status)
			}
			time.Sleep(2 * time.Second)
		}
		keys := f.s3.listSnapshots(t, backupBucket, "scheduled/")
		if len(keys) != 2 {
			t.Fatalf("bucket holds %v after 3 runs, want exactly maxCount=2", keys)
		}
		if newest := "s3://" + backupBucket + "/" + keys[len(keys)-1]; b.Status.LastBackup == nil || b.Status.LastBackup.URI != newest {
			t.Errorf("lastBackup %+v, want the newest object %s", b.Status.LastBackup, newest)
		}
		if b.Status.NextScheduleTime == nil || !b.Status.NextScheduleTime.After(b.Status.LastScheduleTime.Time) {
			t.Errorf("nextScheduleTime %v should follow lastScheduleTime %v", b.Status.NextScheduleTime, b.Status.LastScheduleTime)
		}

		patch := client.MergeFrom(b.DeepCopy())
		b.Spec.Suspend = true
		if err := k8sClient.Patch(context.Background(), b, patch); err != nil {
			t.Fatal(err)
		}
		waitBackupPhase(t, b, backupTimeout, etcdv1alpha1.BackupSuspended)
		runs := len(b.Status.History)
		// Past the next minute's schedule.
		holdsFor(t, 70*time.Second, "a suspended backup", func(ctx context.Context) (string, error) {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				return "", err
			}
			if len(b.Status.History) != runs || b.Status.Phase != etcdv1alpha1.BackupSuspended || b.Status.ActiveJob != "" {
				return fmt.Sprintf("went on: %d runs before, %d now, phase %s, active Job %q", runs, len(b.Status.History), b.Status.Phase, b.Status.ActiveJob), nil
			}
			return "", nil
		})
	})

	// Last, as it stops the shared server.
	t.Run("server stopped mid-upload leaves no Completed backup and no object", func(t *testing.T) {
		// Enough data that the upload takes a while: 96 values of 1 MiB, about 3 s to upload on
		// an idle machine. The server is killed (no grace period) as soon as the upload is under
		// way, seen as a multipart upload the server lists. Should the upload finish first all
		// the same, there is nothing to check in that run: it is tried again, under a new prefix.
		putDataset(t, clientServiceEndpoint(t, f.cluster), "bulk/", 96, 1<<20)
		for attempt := 1; ; attempt++ {
			prefix := fmt.Sprintf("interrupted-%d/", attempt)
			b := f.createBackup(t, fmt.Sprintf("interrupted-%d", attempt), etcdv1alpha1.EtcdBackupSpec{Destination: f.s3Destination(prefix, f.s3.CredentialsSecret)})
			// Looked at every 200 ms: the upload is under way for about 3 s.
			if err := pollUntil(context.Background(), backupTimeout, func(ctx context.Context) (bool, error) {
				if f.s3.uploadUnderWay(ctx, backupBucket, prefix) {
					return true, nil
				}
				err := k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b)
				return err == nil && (b.Status.LastBackup != nil || b.Status.Phase == etcdv1alpha1.BackupFailed), err
			}); err != nil {
				t.Fatalf("the upload under way, or the run finished: %v", err)
			}
			f.s3.kill(t)
			// Each of the Job's three attempts fails within about 25 s (connect timeouts), with
			// backoff of 10 and 20 s in between.
			waitBackupPhase(t, b, 6*time.Minute, etcdv1alpha1.BackupCompleted, etcdv1alpha1.BackupFailed)
			f.s3.start(t)
			if b.Status.Phase == etcdv1alpha1.BackupCompleted && attempt < 3 {
				t.Logf("attempt %d: the upload completed before the server went away; trying again", attempt)
				continue
			}
			if b.Status.Phase != etcdv1alpha1.BackupFailed || b.Status.LastBackup != nil {
				t.Errorf("phase %s, lastBackup %+v with the server gone mid-upload, want Failed and none", b.Status.Phase, b.Status.LastBackup)
			}
			if keys := f.s3.listSnapshots(t, backupBucket, prefix); len(keys) != 0 {
				t.Errorf("objects left by the interrupted run: %v", keys)
			}
			return
		}
	})
}

func completed(runs []etcdv1alpha1.BackupRun) int {
	n := 0
	for _, r := range runs {
		if r.Phase == etcdv1alpha1.BackupCompleted {
			n++
		}
	}
	return n
}

// checkSnapshot checks a downloaded snapshot against its record, with etcd's own tool.
func checkSnapshot(t *testing.T, snapshot []byte, art *etcdv1alpha1.BackupArtifact, minKeys int) {
	t.Helper()
	sum := sha256.Sum256(snapshot)
	if got := hex.EncodeToString(sum[:]); got != art.SHA256 || int64(len(snapshot)) != art.SizeBytes {
		t.Fatalf("downloaded %d bytes with sha256 %s; status says %d bytes, sha256 %s", len(snapshot), got, art.SizeBytes, art.SHA256)
	}
	file := filepath.Join(t.TempDir(), "snapshot.db")
	if err := os.WriteFile(file, snapshot, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(etcdutl, "snapshot", "status", file, "-w", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl snapshot status: %v\n%s", err, out)
	}
	var status struct {
		Revision int64 `json:"revision"`
		TotalKey int   `json:"totalKey"`
	}
	if err := json.Unmarshal(out, &status); err != nil {
		t.Fatalf("etcdutl output %s: %v", out, err)
	}
	// Nothing writes while the test backs up, so the snapshot holds exactly the revision
	// status recorded.
	if status.Revision != art.Revision || status.TotalKey < minKeys {
		t.Fatalf("etcdutl snapshot status: revision %d, %d keys; status says revision %d, want at least %d keys", status.Revision, status.TotalKey, art.Revision, minKeys)
	}
}

func backupJobs(t *testing.T, b *etcdv1alpha1.EtcdBackup) []string {
	t.Helper()
	jobs := &batchv1.JobList{}
	if err := k8sClient.List(context.Background(), jobs, client.InNamespace(b.Namespace), client.MatchingLabels{resources.LabelBackup: b.Name}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range jobs.Items {
		if j.DeletionTimestamp.IsZero() {
			names = append(names, j.Name)
		}
	}
	return names
}

// waitJobsGone: a recorded run's Job is deleted, and its pod with it.
func waitJobsGone(t *testing.T, b *etcdv1alpha1.EtcdBackup) {
	t.Helper()
	waitFor(t, "EtcdBackup "+b.Name+"'s Jobs deleted", func(ctx context.Context) (bool, error) {
		jobs := &batchv1.JobList{}
		err := k8sClient.List(ctx, jobs, client.InNamespace(b.Namespace), client.MatchingLabels{resources.LabelBackup: b.Name})
		return err == nil && len(jobs.Items) == 0, err
	})
}

func logBackupState(t *testing.T, b *etcdv1alpha1.EtcdBackup) {
	ctx := context.Background()
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b); err == nil {
		t.Logf("EtcdBackup %s status: %+v", b.Name, b.Status)
	}
	pods := &corev1.PodList{}
	if err := k8sClient.List(ctx, pods, client.InNamespace(b.Namespace), client.MatchingLabels{resources.LabelBackup: b.Name}); err == nil {
		for _, p := range pods.Items {
			t.Logf("agent pod %s: %s %+v\n%s", p.Name, p.Status.Phase, p.Status.ContainerStatuses, podLog(p.Namespace, p.Name))
		}
	}
}

// logPrinterColumns shows what `kubectl get etcdbackups` prints, for the test log.
func logPrinterColumns(t *testing.T, namespace string) {
	t.Logf("kubectl get etcdbackups -o wide:\n%s", kubectlGet(t, namespace, "etcdbackups"))
}
