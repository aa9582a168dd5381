//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Retention prunes only its EtcdBackup's own snapshots (#14): two schedules of one cluster,
// "quick" and "quick-2" (whose names one is a prefix of the other's), and a schedule "quick" of
// a same-named cluster in another namespace write to one bucket and prefix. Each keeps exactly
// its own maxCount, and "quick-2", with maxCount 1, the previous snapshot too, which
// status.lastBackup named during its last run (#24); snapshots of the earlier key format and
// other objects stay. Kept cheap: one-member clusters with no dataset, schedules every 20 s,
// three runs each.
func TestEtcdBackupRetentionPrunesOnlyItsOwnSnapshots(t *testing.T) {
	inParallel(t, 80*time.Second)
	ctx := context.Background()
	nsA, nsB := testNamespace(t, "e2e-retention-a-"), testNamespace(t, "e2e-retention-b-")
	s3srv := startS3Server(t, nsA)
	s3srv.createBucket(t, backupBucket)
	// The agent in the other namespace signs in as the same user, from a Secret of its own.
	if err := k8sClient.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s3srv.CredentialsSecret, Namespace: nsB},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3AccessKey, "AWS_SECRET_ACCESS_KEY": s3SecretKey},
	}); err != nil {
		t.Fatal(err)
	}

	const prefix = "shared/"
	// Snapshots of the earlier format (<prefix><cluster>-<time>-r<revision>.db, more than any
	// maxCount, older than any new one) and an object that is no snapshot: never deleted.
	untouchable := []string{
		prefix + "data-20260101T000000Z-r1.db", prefix + "data-20260101T010000Z-r1.db", prefix + "data-20260101T020000Z-r1.db",
		prefix + "notes.txt",
	}
	for _, key := range untouchable {
		s3srv.putObject(t, backupBucket, key, []byte("written before"))
	}

	var clusters []*etcdv1alpha1.EtcdCluster
	for _, ns := range []string{nsA, nsB} {
		c := &etcdv1alpha1.EtcdCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
			Spec: etcdv1alpha1.EtcdClusterSpec{
				Size: 1, Version: etcdVersion,
				Storage: etcdv1alpha1.StorageSpec{Size: ptrTo(resource.MustParse("256Mi"))},
			},
		}
		if err := k8sClient.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		clusters = append(clusters, c)
	}
	for _, c := range clusters {
		waitAvailable(t, c, 1)
	}

	backups := []*etcdv1alpha1.EtcdBackup{
		retentionBackup(nsA, "quick", 2, s3srv, prefix),
		retentionBackup(nsA, "quick-2", 1, s3srv, prefix),
		retentionBackup(nsB, "quick", 2, s3srv, prefix),
	}
	for _, b := range backups {
		if err := k8sClient.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				logBackupState(t, b)
			}
		})
	}

	// Three runs each: at least one past every maxCount, so each has pruned.
	const runs = 3
	timeout := runs*time.Minute + backupTimeout
	deadline := time.Now().Add(timeout)
	for _, b := range backups {
		for {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				t.Fatal(err)
			}
			if completed(b.Status.History) >= runs {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("EtcdBackup %s/%s: %d completed runs after %v, want %d; status %+v", b.Namespace, b.Name, completed(b.Status.History), timeout, runs, b.Status)
			}
			time.Sleep(2 * time.Second)
		}
	}
	// Suspended, and no run under way, the bucket holds what retention left.
	for _, b := range backups {
		patch := client.MergeFrom(b.DeepCopy())
		b.Spec.Suspend = true
		if err := k8sClient.Patch(ctx, b, patch); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range backups {
		waitFor(t, "EtcdBackup "+b.Namespace+"/"+b.Name+" suspended with no run under way", func(ctx context.Context) (bool, error) {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				return false, err
			}
			return b.Status.Phase == etcdv1alpha1.BackupSuspended && b.Status.ActiveJob == "", nil
		})
	}

	rest := s3srv.listSnapshots(t, backupBucket, prefix) // in lexical order, so each EtcdBackup's by time
	for _, b := range backups {
		dir := prefix + b.Namespace + "/data/" + b.Name + "_" + string(b.UID) + "/"
		var own []string
		rest = slices.DeleteFunc(rest, func(key string) bool {
			if strings.HasPrefix(key, dir) {
				own = append(own, key)
				return true
			}
			return false
		})
		// maxCount 1 keeps the previous snapshot until the next run: status.lastBackup named it
		// while the last run was under way.
		if want := max(int(*b.Spec.Retention.MaxCount), 2); len(own) != want {
			t.Errorf("EtcdBackup %s/%s keeps %v after %d runs, want exactly %d (its maxCount=%d, at least the newest and the one before)",
				b.Namespace, b.Name, own, completed(b.Status.History), want, *b.Spec.Retention.MaxCount)
			continue
		}
		if newest := "s3://" + backupBucket + "/" + own[len(own)-1]; b.Status.LastBackup == nil || b.Status.LastBackup.URI != newest {
			t.Errorf("EtcdBackup %s/%s: lastBackup %+v, want its newest object %s", b.Namespace, b.Name, b.Status.LastBackup, newest)
		}
	}
	slices.Sort(untouchable)
	if !slices.Equal(rest, untouchable) {
		t.Errorf("besides the three EtcdBackups' snapshots the bucket holds %v, want exactly what was there before: %v", rest, untouchable)
	}
}

// retentionBackup is a scheduled EtcdBackup of cluster "data" in namespace, every 20 s,
// keeping maxCount snapshots under prefix in the shared bucket.
func retentionBackup(namespace, name string, maxCount int32, s3srv *s3Server, prefix string) *etcdv1alpha1.EtcdBackup {
	return &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: etcdv1alpha1.EtcdBackupSpec{
			ClusterName: "data",
			Destination: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
				Bucket: backupBucket, Prefix: prefix, Endpoint: s3srv.Endpoint, ForcePathStyle: true, AllowPlainHTTP: true,
				CredentialsSecretName: s3srv.CredentialsSecret,
			}},
			Schedule:  "@every 20s",
			Retention: &etcdv1alpha1.BackupRetention{MaxCount: ptrTo(maxCount)},
		},
	}
}
