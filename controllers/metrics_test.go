package controllers

import (
	"errors"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

func TestReconcileErrorReasonIsWhatStatusSays(t *testing.T) {
	failedStep := &etcdv1alpha1.EtcdCluster{}
	setCondition(failedStep, etcdv1alpha1.ConditionProgressing, metav1.ConditionTrue, etcdv1alpha1.ReasonScalingUp, "AddLearner failed, will retry")
	tests := []struct {
		name       string
		c          *etcdv1alpha1.EtcdCluster
		err, patch error
		want       string
	}{
		{"success", failedStep, nil, nil, ""},
		{"certificates", &etcdv1alpha1.EtcdCluster{}, &accessError{reason: etcdv1alpha1.ReasonCertificateError, err: errors.New("x")}, nil, etcdv1alpha1.ReasonCertificateError},
		{"a step failed", failedStep, errors.New("add learner"), nil, etcdv1alpha1.ReasonScalingUp},
		{"only the status write failed", failedStep, nil, errors.New("conflict"), reasonStatusNotWritten},
		{"no condition to tell", &etcdv1alpha1.EtcdCluster{}, errors.New("list pods"), nil, etcdv1alpha1.ReasonReconcileError},
	}
	for _, tt := range tests {
		if got := reconcileErrorReason(tt.c, tt.err, tt.patch); got != tt.want {
			t.Errorf("%s: reason %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A run recorded mid-reconcile (status written before its Job is deleted) is counted once, and
// the backup's series go with it.
func TestBackupRunThatFailsIsCountedOnceAndItsSeriesGoWithTheBackup(t *testing.T) {
	now := time.Now()
	created := metav1.NewTime(now.Add(-agentStartDeadline - time.Minute))
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "backup-metrics", UID: "backup-uid", CreationTimestamp: created},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c",
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once-run", Namespace: backup.Namespace, UID: "job-uid", CreationTimestamp: created,
		Labels: map[string]string{resources.LabelBackup: "once"}}}
	if err := ctrl.SetControllerReference(backup, job, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "once-run-pod", Namespace: backup.Namespace, CreationTimestamp: created, Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: resources.BackupContainer,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "s3" not found`}}}}},
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(backup, job, pod).WithStatusSubresource(backup).Build()
	r := &EtcdBackupReconciler{Client: k8s, Now: func() time.Time { return now }}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}); err != nil {
			t.Fatal(err)
		}
	}

	reconcile()
	reconcile()
	series := seriesIn(t, backup.Namespace)
	for name, want := range map[string]float64{
		`etcd_operator_backup_failures_total{cluster="c"}`:  1,
		`etcd_operator_backup_last_run_failed{cluster="c"}`: 1,
	} {
		if got, ok := series[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}

	if err := k8s.Delete(t.Context(), backup); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if left := seriesIn(t, backup.Namespace); len(left) > 0 {
		t.Errorf("series of a deleted backup remain: %v", left)
	}
}

// A restore's outcome is in its series, and they go when it is deleted.
func TestRestoreOutcomeIsInItsSeriesUntilItIsDeleted(t *testing.T) {
	rs := &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "restore-metrics", UID: "restore-uid", Finalizers: []string{restoreFinalizer}},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "none"}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: "c"},
		},
		// Started past the wait for a source that may yet come (sourceWait): missing is final.
		Status: etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestorePending, StartTime: ptrTime(time.Now().Add(-2 * sourceWait))},
	}
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(rs).WithStatusSubresource(rs).Build()
	clock := time.Now().Truncate(time.Second)
	tick := func() time.Time { clock = clock.Add(time.Minute); return clock } // a minute per look at the clock
	r := &EtcdRestoreReconciler{Client: k8s, APIReader: k8s, Now: tick, Keyspaces: sameKeyspaceEverywhere}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rs)}); err != nil {
			t.Fatal(err)
		}
	}

	reconcile() // its source does not exist: Failed
	series := seriesIn(t, rs.Namespace)
	if got, ok := series[`etcd_operator_restore_phase{cluster="c",mode="InPlace",phase="Failed"}`]; !ok || got != 1 {
		t.Errorf("restore_phase Failed = %v (present %v), want 1; series %v", got, ok, series)
	}
	if _, ok := series[`etcd_operator_restore_duration_seconds{cluster="c",mode="InPlace"}`]; !ok {
		t.Errorf("no duration for a finished restore; series %v", series)
	}

	if err := k8s.Delete(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if left := seriesIn(t, rs.Namespace); len(left) > 0 {
		t.Errorf("series of a deleted restore remain: %v", left)
	}
}

// A cluster asking for what this build cannot do is still looked at in steady state, so that
// its heartbeat does not go stale as if the operator had stopped.
func TestUnsupportedClusterKeepsItsHeartbeat(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "heartbeat-metrics"},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 3, TLS: &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderCertManager}}}
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(c).WithStatusSubresource(c).Build()
	r := &EtcdClusterReconciler{Client: k8s, APIReader: k8s}
	result, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	if err != nil {
		t.Fatal(err)
	}
	if result.RequeueAfter != requeueSteady {
		t.Errorf("requeue after %v, want %v: nothing else would refresh the heartbeat", result.RequeueAfter, requeueSteady)
	}
	if _, ok := seriesIn(t, c.Namespace)[`etcd_operator_cluster_last_successful_reconcile_timestamp_seconds{}`]; !ok {
		t.Error("no heartbeat after a reconcile that ended without error")
	}
}
