package backupplan

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestObjectNamesSortByTimeAndParseBack(t *testing.T) {
	a := ObjectName("prod/", Series{Cluster: "main"}, t0, 99)
	b := ObjectName("prod/", Series{Cluster: "main"}, t0.Add(time.Second), 7)
	if a != "prod/main-20260301T120000Z-r99.db" || a > b {
		t.Fatalf("names %q, %q", a, b)
	}
	if got, ok := ParseObjectName("prod/", Series{Cluster: "main"}, a); !ok || !got.Equal(t0) {
		t.Fatalf("ParseObjectName(%q) = %v, %v", a, got, ok)
	}
	for _, foreign := range []string{
		"prod/main-backup.db",                   // not ours
		"prod/mainline-20260301T120000Z-r1.db",  // another cluster whose name extends ours
		"prod/other-20260301T120000Z-r1.db",     // another cluster
		"dev/main-20260301T120000Z-r1.db",       // another prefix
		"prod/main-20260301T120000Z-r1.db.part", // an upload in progress
		"prod/main-20260301T120000Z-rX.db",      // no revision
		"prod/main-2026-03-01T12:00:00Z-r1.db",  // another time format
	} {
		if _, ok := ParseObjectName("prod/", Series{Cluster: "main"}, foreign); ok {
			t.Errorf("%q taken for one of our snapshots", foreign)
		}
	}
}

func TestDue(t *testing.T) {
	hourly, err := ParseSchedule("0 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name         string
		since, now   time.Time
		runNow       bool
		scheduledFor time.Time
		next         time.Time
	}{
		{"not yet", t0, t0.Add(30 * time.Minute), false, time.Time{}, t0.Add(time.Hour)},
		{"exactly due", t0, t0.Add(time.Hour), true, t0.Add(time.Hour), t0.Add(2 * time.Hour)},
		{"a little late", t0, t0.Add(time.Hour + 5*time.Minute), true, t0.Add(time.Hour), t0.Add(2 * time.Hour)},
		{"operator down for a day: one catch-up, for the latest missed time",
			t0, t0.Add(24*time.Hour + 10*time.Minute), true, t0.Add(24 * time.Hour), t0.Add(25 * time.Hour)},
	}
	for _, tc := range cases {
		runNow, scheduledFor, next := Due(hourly, tc.since, tc.now)
		if runNow != tc.runNow || !scheduledFor.Equal(tc.scheduledFor) || !next.Equal(tc.next) {
			t.Errorf("%s: Due = %v, %v, %v; want %v, %v, %v", tc.name, runNow, scheduledFor, next, tc.runNow, tc.scheduledFor, tc.next)
		}
	}
	if _, err := ParseSchedule("every hour"); err == nil {
		t.Error("a malformed schedule parsed")
	}
	every, _ := ParseSchedule("@every 30m")
	if runNow, _, next := Due(every, t0, t0.Add(10*time.Minute)); runNow || !next.Equal(t0.Add(30*time.Minute)) {
		t.Errorf("@every 30m: runNow %v next %v", runNow, next)
	}
}

func TestToPrune(t *testing.T) {
	snaps := func(ages ...int) []Snapshot {
		var out []Snapshot
		for _, h := range ages {
			out = append(out, Snapshot{Key: ObjectName("", Series{Cluster: "c"}, t0.Add(-time.Duration(h)*time.Hour), 1), Time: t0.Add(-time.Duration(h) * time.Hour)})
		}
		return out
	}
	key := func(h int) string {
		return ObjectName("", Series{Cluster: "c"}, t0.Add(-time.Duration(h)*time.Hour), 1)
	}
	cases := []struct {
		name     string
		snaps    []Snapshot
		maxCount int
		maxAge   time.Duration
		want     []string
	}{
		{"within both limits", snaps(0, 1, 2), 3, 24 * time.Hour, nil},
		{"count keeps the newest, in any listing order", snaps(2, 0, 3, 1), 2, 0, []string{key(2), key(3)}},
		{"age", snaps(0, 10, 30, 50), 0, 24 * time.Hour, []string{key(30), key(50)}},
		{"both", snaps(0, 1, 30), 2, 24 * time.Hour, []string{key(30)}},
		{"the newest survives even when too old", snaps(48, 72), 0, 24 * time.Hour, []string{key(72)}},
		{"nothing to prune", nil, 1, time.Hour, nil},
	}
	for _, tc := range cases {
		if got := ToPrune(tc.snaps, tc.maxCount, tc.maxAge, t0); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ToPrune = %v, want %v", tc.name, got, tc.want)
		}
	}
}
