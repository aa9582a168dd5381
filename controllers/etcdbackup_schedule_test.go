package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// The run decision with an injected clock: no goroutine per schedule, at most one catch-up.
func TestNextRun(t *testing.T) {
	created := time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return time.Date(2026, 11, 22, h, m, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name         string
		schedule     string
		lastSchedule time.Time
		history      int
		now          time.Time
		wantRun      time.Time
		wantWait     time.Duration
		wantPhase    etcdv1alpha1.BackupPhase
	}{
		{name: "one-shot runs at once", now: at(10, 16), wantRun: created},
		{name: "one-shot never runs twice", history: 1, now: at(10, 16), wantPhase: etcdv1alpha1.BackupFailed},
		{name: "hourly waits for the hour", schedule: "0 * * * *", now: at(10, 30), wantWait: 30*time.Minute + 100*time.Millisecond, wantPhase: etcdv1alpha1.BackupScheduled},
		{name: "hourly runs on the hour", schedule: "0 * * * *", now: at(11, 0), wantRun: at(11, 0)},
		{name: "downtime: one catch-up for the latest missed run", schedule: "0 * * * *", lastSchedule: at(5, 0), now: at(10, 30), wantRun: at(10, 0)},
		{name: "after a run, the next", schedule: "0 * * * *", lastSchedule: at(10, 0), now: at(10, 0).Add(5 * time.Second), wantWait: time.Hour - 5*time.Second + 100*time.Millisecond, wantPhase: etcdv1alpha1.BackupScheduled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &etcdv1alpha1.EtcdBackup{
				ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
				Spec:       etcdv1alpha1.EtcdBackupSpec{Schedule: tc.schedule},
			}
			if !tc.lastSchedule.IsZero() {
				b.Status.LastScheduleTime = ptrTime(tc.lastSchedule)
			}
			for range tc.history {
				b.Status.History = append(b.Status.History, etcdv1alpha1.BackupRun{Phase: etcdv1alpha1.BackupFailed})
			}
			r := &EtcdBackupReconciler{Now: func() time.Time { return tc.now }}
			run, wait := r.nextRun(b)
			if !run.Equal(tc.wantRun) || wait != tc.wantWait || b.Status.Phase != tc.wantPhase {
				t.Errorf("run %v wait %v phase %q; want %v, %v, %q", run, wait, b.Status.Phase, tc.wantRun, tc.wantWait, tc.wantPhase)
			}
		})
	}
}
