package controllers

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// A restore of an EtcdBackup that does not exist yet, or has taken no snapshot yet (created
// together, as a console creates a bundle's examples; set up before a schedule's first run)
// waits for it, touching nothing and not holding OLM upgrades back, and says what it waits for
// and until when; it goes on once the snapshot is there, and fails with SourceNotFound once
// sourceWait has passed. Before, it failed at once, and its alert fired.
func TestARestoreWaitsForABackupNotMadeYetOrWithoutASnapshot(t *testing.T) {
	started := time.Now().Truncate(time.Second)
	for _, tc := range []struct {
		name   string
		backup *etcdv1alpha1.EtcdBackup
		says   string
	}{
		{"no EtcdBackup yet", nil, "EtcdBackup hourly does not exist in namespace ns"},
		{"no snapshot yet", func() *etcdv1alpha1.EtcdBackup {
			b := hourlyOfC(nil)
			b.Status = etcdv1alpha1.EtcdBackupStatus{}
			return b
		}(), "EtcdBackup hourly has taken no snapshot yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := restoreOfHourly(&etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16"})
			objects := []client.Object{rs}
			if tc.backup != nil {
				objects = append(objects, tc.backup)
			}
			r, k8s := restoreReconciler(t, objects...)
			now := started
			r.Now = func() time.Time { return now }

			got := reconcileRestore(t, r, rs)
			cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
			if got.Status.Phase != etcdv1alpha1.RestorePending || cond == nil || cond.Reason != etcdv1alpha1.ReasonWaitingForSource ||
				!strings.Contains(cond.Message, tc.says) || !strings.Contains(cond.Message, started.Add(sourceWait).UTC().Format(time.RFC3339)) {
				t.Fatalf("restore %s, Succeeded %+v; want Pending, WaitingForSource, saying %q and until when", got.Status.Phase, cond, tc.says)
			}
			if restoreRunning(got) {
				t.Error("a restore waiting for its source holds OLM upgrades back")
			}
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "copy"}, &etcdv1alpha1.EtcdCluster{}); err == nil {
				t.Fatal("EtcdCluster copy created while the source is not there")
			}

			// Past the wait: SourceNotFound.
			now = started.Add(sourceWait + time.Second)
			got = reconcileRestore(t, r, got)
			if got.Status.Phase != etcdv1alpha1.RestoreFailed || !strings.Contains(failureOf(got), tc.says) || !strings.Contains(failureOf(got), "1h0m0s of waiting") {
				t.Fatalf("restore %s (%s); want Failed after the wait, saying %q", got.Status.Phase, failureOf(got), tc.says)
			}
		})
	}

	// The snapshot comes within the wait: the restore goes on.
	rs := restoreOfHourly(&etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16"})
	b := hourlyOfC(nil)
	snapshot := b.Status
	b.Status = etcdv1alpha1.EtcdBackupStatus{}
	r, k8s := restoreReconciler(t, rs, b)
	got := reconcileRestore(t, r, rs)
	if got.Status.Phase != etcdv1alpha1.RestorePending {
		t.Fatalf("restore %s before the first snapshot, want Pending", got.Status.Phase)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
		t.Fatal(err)
	}
	b.Status = snapshot
	if err := k8s.Update(t.Context(), b); err != nil { // EtcdBackup has no status subresource in this fake
		t.Fatal(err)
	}
	got = reconcileRestore(t, r, got)
	if got.Status.Phase != etcdv1alpha1.RestoreRestoring {
		t.Fatalf("restore %s (%s) once the snapshot is there, want Restoring", got.Status.Phase, failureOf(got))
	}
}
