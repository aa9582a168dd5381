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

// The gaps an archiver reports are added to those status held: an archiver restarted remembers
// none of the gaps it found before, and status must not forget them with it.
func TestArchiveGapsOutliveTheArchiverThatFoundThem(t *testing.T) {
	gap := func(after int64) etcdv1alpha1.ArchiveGap {
		return etcdv1alpha1.ArchiveGap{AfterRevision: after, ResumedAt: after + 10, Reason: "Compacted"}
	}
	before := &etcdv1alpha1.BackupArchiveStatus{Gaps: []etcdv1alpha1.ArchiveGap{gap(10), gap(30)}}
	got := keptGaps(before, []etcdv1alpha1.ArchiveGap{gap(30), gap(50)})
	if len(got) != 3 || got[0].AfterRevision != 10 || got[2].AfterRevision != 50 {
		t.Errorf("gaps %+v, want 10, 30 and 50", got)
	}
	var many []etcdv1alpha1.ArchiveGap
	for i := range 12 {
		many = append(many, gap(int64(100*i)))
	}
	if got := keptGaps(nil, many); len(got) != maxGaps || got[maxGaps-1].AfterRevision != 1100 {
		t.Errorf("%d gaps kept, the newest %+v; want the newest %d", len(got), got[len(got)-1], maxGaps)
	}
}
