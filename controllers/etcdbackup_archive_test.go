package controllers

import (
	"testing"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// An archiver whose report has not changed costs no status write for observedTimeRefresh: its
// observed time is kept; a changed report, or an observed time that old, writes the new one.
func TestAnUnchangedArchiveReportKeepsItsObservedTime(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 14, 0, 0, 0, time.UTC)
	report := func(lag int64, at time.Time) *etcdv1alpha1.BackupArchiveStatus {
		return &etcdv1alpha1.BackupArchiveStatus{LagRevisions: lag, ObservedTime: ptrTime(at)}
	}
	for _, tc := range []struct {
		name   string
		before *etcdv1alpha1.BackupArchiveStatus
		now    *etcdv1alpha1.BackupArchiveStatus
		want   time.Time
	}{
		{"unchanged", report(0, t0), report(0, t0.Add(15*time.Second)), t0},
		{"unchanged, observed long ago", report(0, t0), report(0, t0.Add(observedTimeRefresh)), t0.Add(observedTimeRefresh)},
		{"changed", report(0, t0), report(3, t0.Add(15*time.Second)), t0.Add(15 * time.Second)},
		{"first", nil, report(0, t0), t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keepObservedTime(tc.before, tc.now)
			if !tc.now.ObservedTime.Time.Equal(tc.want) {
				t.Errorf("observed time %v, want %v", tc.now.ObservedTime, tc.want)
			}
		})
	}
}
