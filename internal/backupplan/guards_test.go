package backupplan

import (
	"slices"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// Retention deletes a snapshot only once it is older than maxAge: one exactly that old stays.
func TestToPruneKeepsASnapshotOfMaxAgeExactly(t *testing.T) {
	at := func(age time.Duration) Snapshot {
		return Snapshot{Key: ObjectName("", daily, t0.Add(-age), 1), Time: t0.Add(-age)}
	}
	snaps := []Snapshot{at(0), at(24 * time.Hour), at(24*time.Hour + time.Second)}
	want := []string{snaps[2].Key}
	if got := ToPrune(snaps, 0, 24*time.Hour, t0, nil); !slices.Equal(got, want) {
		t.Errorf("ToPrune = %v, want only the snapshot older than 24h: %v", got, want)
	}
}

// countingSchedule counts how many run times a decision asks of a cron schedule.
type countingSchedule struct {
	cron.Schedule
	calls int
}

func (s *countingSchedule) Next(t time.Time) time.Time { s.calls++; return s.Schedule.Next(t) }

// After a year of downtime on a schedule every minute (half a million runs missed), the
// catch-up finds the latest run by looking back from now, not by walking every run since.
func TestDueAfterLongDowntimeDoesNotWalkEveryMissedRun(t *testing.T) {
	sched, err := ParseSchedule("* * * * *")
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingSchedule{Schedule: sched}
	since, now := t0, t0.Add(365*24*time.Hour+30*time.Second)
	runNow, scheduledFor, next := Due(counting, since, now)
	if !runNow || !scheduledFor.Equal(t0.Add(365*24*time.Hour)) || !next.Equal(t0.Add(365*24*time.Hour+time.Minute)) {
		t.Fatalf("Due = %v, %v, %v; want a run now for the last minute by now", runNow, scheduledFor, next)
	}
	if counting.calls > 100 {
		t.Errorf("Due asked the schedule for %d run times; a look back from now needs a few dozen", counting.calls)
	}
}
