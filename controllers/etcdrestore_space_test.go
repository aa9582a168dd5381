package controllers

import (
	"fmt"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// A restore whose members' claims would be too small for the snapshot (it is staged on the
// claim, and etcdutl restores the database beside it with etcd's first WAL segment) is refused
// before anything is made or staged, naming the size to set: otherwise etcdutl ran out of
// space part-way, and every retry of the Job met the same claim. An older snapshot the restore
// may fall back to counts too. Seen failing before the check (the cluster was created, a claim
// staged).
func TestARestoreIntoClaimsTooSmallForTheSnapshotIsRefused(t *testing.T) {
	const mib = 1 << 20
	for name, tc := range map[string]struct {
		inPlace         bool
		snapshot, older int64
		storage         string
		refused         bool
	}{
		"new, claims large enough":               {false, 96 * mib, 0, "256Mi", false},
		"new, claims too small":                  {false, 100 * mib, 0, "256Mi", true},
		"new, an older snapshot too large":       {false, 10 * mib, 100 * mib, "256Mi", true},
		"new, size not recorded":                 {false, 0, 0, "256Mi", false},
		"in place, claims large enough":          {true, 96 * mib, 0, "256Mi", false},
		"in place, claims too small":             {true, 100 * mib, 0, "256Mi", true},
		"in place, the default claim size (4Gi)": {true, 2000 * mib, 0, "", false},
	} {
		t.Run(name, func(t *testing.T) {
			backup := hourlyOfC(nil)
			backup.Status.LastBackup.SizeBytes = tc.snapshot
			if tc.older != 0 {
				older := completedBackup("hourly", "c", 0, 500).Status.LastBackup
				older.URI, older.SizeBytes = "pvc://backups/hourly-older.db", tc.older
				backup.Status.History = []etcdv1alpha1.BackupRun{{Phase: etcdv1alpha1.BackupCompleted, Artifact: backup.Status.LastBackup},
					{Phase: etcdv1alpha1.BackupCompleted, Artifact: older}}
			}
			var size *resource.Quantity
			if tc.storage != "" {
				q := resource.MustParse(tc.storage)
				size = &q
			}
			objects := []client.Object{backup}
			var rs *etcdv1alpha1.EtcdRestore
			if tc.inPlace {
				c := formedCluster(nil)
				c.Spec.Storage.Size = size
				rs = inPlaceRestore("back")
				rs.Spec.Source = etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "hourly"}}
				objects = append(objects, c)
			} else {
				rs = restoreOfHourly(&etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16", Storage: etcdv1alpha1.StorageSpec{Size: size}})
			}
			r, k8s := restoreReconciler(t, append(objects, rs)...)
			got := reconcileRestore(t, r, rs)
			refused := got.Status.Phase == etcdv1alpha1.RestoreFailed
			if refused != tc.refused {
				t.Fatalf("restore %s (%s); want refused %t", got.Status.Phase, failureOf(got), tc.refused)
			}
			if !tc.refused {
				return
			}
			largest := max(tc.snapshot, tc.older)
			if cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded); cond == nil || cond.Reason != etcdv1alpha1.ReasonStorageTooSmall {
				t.Errorf("Succeeded %+v, want reason StorageTooSmall", cond)
			}
			for _, want := range []string{fmt.Sprintf("at least %d bytes", jobspec.RestoreNeedsBytes(largest)), "storage.size"} {
				if !strings.Contains(failureOf(got), want) {
					t.Errorf("the refusal %q does not say %q", failureOf(got), want)
				}
			}
			if !tc.inPlace {
				if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "copy"}, &etcdv1alpha1.EtcdCluster{}); !apierrors.IsNotFound(err) {
					t.Errorf("EtcdCluster copy: %v, want it never created", err)
				}
			}
			jobs, claims := &batchv1.JobList{}, &corev1.PersistentVolumeClaimList{}
			if err := k8s.List(t.Context(), jobs); err != nil || len(jobs.Items) != 0 {
				t.Errorf("restore Jobs %d (%v), want none", len(jobs.Items), err)
			}
			if err := k8s.List(t.Context(), claims); err != nil || len(claims.Items) != 0 {
				t.Errorf("claims %d (%v), want none staged", len(claims.Items), err)
			}
		})
	}
}
