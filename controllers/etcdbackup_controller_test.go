package controllers_test

import (
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// What a backup says, and does not do, when it cannot run. Runs themselves need a kubelet and
// are covered by test/e2e.

func newBackup(t *testing.T, namespace, cluster string, mutate ...func(*etcdv1alpha1.EtcdBackup)) *etcdv1alpha1.EtcdBackup {
	t.Helper()
	b := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: namespace},
		Spec: etcdv1alpha1.EtcdBackupSpec{
			ClusterName: cluster,
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups",
				Provision: &etcdv1alpha1.ClaimProvision{Size: resource.MustParse("64Mi")}}},
		},
	}
	for _, m := range mutate {
		m(b)
	}
	if err := k8sClient.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

func waitBackupCondition(t *testing.T, b *etcdv1alpha1.EtcdBackup, condType, reason string, phase etcdv1alpha1.BackupPhase) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(b.Status.Conditions, condType)
		if cond == nil || cond.Reason != reason || b.Status.Phase != phase {
			return fmt.Errorf("phase %q, %s condition %+v; want phase %q, reason %s", b.Status.Phase, condType, cond, phase, reason)
		}
		return nil
	})
}

func expectNoJobs(t *testing.T, b *etcdv1alpha1.EtcdBackup) {
	t.Helper()
	jobs := &batchv1.JobList{}
	if err := k8sClient.List(t.Context(), jobs, client.InNamespace(b.Namespace), client.MatchingLabels{resources.LabelBackup: b.Name}); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Errorf("a backup that cannot run started %d Job(s)", len(jobs.Items))
	}
}

func TestBackupOfMissingClusterWaitsAndSaysWhy(t *testing.T) {
	b := newBackup(t, restrictedNamespace(t), "nowhere")
	waitBackupCondition(t, b, etcdv1alpha1.ConditionReady, etcdv1alpha1.ReasonClusterNotFound, etcdv1alpha1.BackupPending)
	expectNoJobs(t, b)
}

func TestBackupOfUnavailableClusterWaits(t *testing.T) {
	// No kubelet runs the members, so the cluster never becomes Available.
	c := newCluster(t, "down")
	b := newBackup(t, c.Namespace, c.Name)
	waitBackupCondition(t, b, etcdv1alpha1.ConditionReady, etcdv1alpha1.ReasonClusterNotAvailable, etcdv1alpha1.BackupPending)
	expectNoJobs(t, b)
}

func TestSuspendedScheduleStartsNothing(t *testing.T) {
	b := newBackup(t, restrictedNamespace(t), "nowhere", func(b *etcdv1alpha1.EtcdBackup) {
		b.Spec.Schedule, b.Spec.Suspend = "* * * * *", true
	})
	waitBackupCondition(t, b, etcdv1alpha1.ConditionReady, etcdv1alpha1.ReasonSuspended, etcdv1alpha1.BackupSuspended)
	if b.Status.NextScheduleTime != nil {
		t.Errorf("a suspended schedule announces a next run at %v", b.Status.NextScheduleTime)
	}
	expectNoJobs(t, b)
}

func TestScheduledBackupAnnouncesItsNextRun(t *testing.T) {
	b := newBackup(t, restrictedNamespace(t), "nowhere", func(b *etcdv1alpha1.EtcdBackup) { b.Spec.Schedule = "@yearly" })
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if b.Status.Phase != etcdv1alpha1.BackupScheduled || b.Status.NextScheduleTime == nil {
			return fmt.Errorf("phase %q, next %v", b.Status.Phase, b.Status.NextScheduleTime)
		}
		return nil
	})
	next := b.Status.NextScheduleTime.UTC()
	if next.Month() != time.January || next.Day() != 1 || next.Hour() != 0 || !next.After(time.Now()) {
		t.Errorf("@yearly announces %v, want the next 1 January 00:00 UTC", next)
	}
}
