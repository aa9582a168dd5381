package restoreplan_test

import (
	"math"
	"testing"

	"github.com/etcd-database/etcd-operator/internal/restoreplan"
)

func TestRevisionBump(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec string
		rev  restoreplan.Revision
		want int64
		bad  bool
	}{
		{"Auto: a fifth more than the gap", restoreplan.BumpAuto, restoreplan.Revision{Snapshot: 1_000, HighestSeen: 10_001_000}, 12_000_000, false},
		{"Auto: at least a million", restoreplan.BumpAuto, restoreplan.Revision{Snapshot: 1_000, HighestSeen: 5_000}, restoreplan.MinAutoBump, false},
		{"Auto: nothing seen past the snapshot", restoreplan.BumpAuto, restoreplan.Revision{Snapshot: 7_000, HighestSeen: 7_000}, restoreplan.MinAutoBump, false},
		{"Auto: the snapshot's revision not known", restoreplan.BumpAuto, restoreplan.Revision{HighestSeen: 10_000_000}, 12_000_000, false},
		{"Auto: the highest seen not known", restoreplan.BumpAuto, restoreplan.Revision{Snapshot: 7_000}, restoreplan.UnknownAutoBump, false},
		{"empty is Auto", "", restoreplan.Revision{}, restoreplan.UnknownAutoBump, false},
		{"None", restoreplan.BumpNone, restoreplan.Revision{Snapshot: 1, HighestSeen: 1 << 40}, 0, false},
		{"a number as it is", "42", restoreplan.Revision{Snapshot: 1, HighestSeen: 1 << 40}, 42, false},
		{"zero is not a number here: None says it", "0", restoreplan.Revision{}, 0, true},
		{"a negative number", "-5", restoreplan.Revision{}, 0, true},
		{"a word", "Always", restoreplan.Revision{}, 0, true},
		{"a gap that would overflow", restoreplan.BumpAuto, restoreplan.Revision{HighestSeen: math.MaxInt64 / 10 * 9}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := restoreplan.RevisionBump(tc.spec, tc.rev)
			if (err != nil) != tc.bad || got != tc.want {
				t.Errorf("RevisionBump(%q, %+v) = %d, %v; want %d, error %t", tc.spec, tc.rev, got, err, tc.want, tc.bad)
			}
		})
	}
}

// Whatever is known, the first revision after an Auto restore is above every revision seen.
func TestAutoBumpPassesEveryRevisionSeen(t *testing.T) {
	for _, rev := range []restoreplan.Revision{
		{Snapshot: 1, HighestSeen: 2}, {Snapshot: 100, HighestSeen: 100}, {Snapshot: 5, HighestSeen: 1 << 40},
		{Snapshot: 0, HighestSeen: 1 << 50}, {Snapshot: 1 << 30, HighestSeen: 1<<30 + 3},
	} {
		bump, err := restoreplan.RevisionBump(restoreplan.BumpAuto, rev)
		if err != nil {
			t.Fatal(err)
		}
		if rev.Snapshot+bump <= rev.HighestSeen {
			t.Errorf("%+v: bump %d starts the cluster at %d, not past %d", rev, bump, rev.Snapshot+bump, rev.HighestSeen)
		}
	}
}
