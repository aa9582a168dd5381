package backupplan

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// daily is an EtcdBackup "daily" of cluster "main" in namespace "db".
var daily = Series{Namespace: "db", Cluster: "main", Backup: "daily", UID: "0b6a6f3e-5c1d-4b8e-9f21-7d2c4a1e9b30"}

func TestObjectNamesSortByTimeAndParseBack(t *testing.T) {
	a := ObjectName("prod/", daily, t0, 99)
	b := ObjectName("prod/", daily, t0.Add(time.Second), 7)
	if a != "prod/db/main/daily_0b6a6f3e-5c1d-4b8e-9f21-7d2c4a1e9b30/20260301T120000Z-r99.db" || a > b {
		t.Fatalf("names %q, %q", a, b)
	}
	if got, ok := ParseObjectName("prod/", daily, a); !ok || !got.Equal(t0) {
		t.Fatalf("ParseObjectName(%q) = %v, %v", a, got, ok)
	}
	if pvc := ObjectName("", daily, t0, 99); pvc != "db/main/daily_0b6a6f3e-5c1d-4b8e-9f21-7d2c4a1e9b30/20260301T120000Z-r99.db" {
		t.Fatalf("name without a prefix (a claim's directory) %q", pvc)
	}
	for name, want := range map[string]int64{a: 99, "-r7.db": 7} {
		if rev, ok := ObjectRevision(name); !ok || rev != want {
			t.Fatalf("ObjectRevision(%q) = %d, %v; want %d", name, rev, ok, want)
		}
	}
	for _, other := range []string{"prod/x.db", "prod/x-r7.seg", "prod/x-rq.db"} {
		if rev, ok := ObjectRevision(other); ok {
			t.Errorf("ObjectRevision(%q) = %d, want none", other, rev)
		}
	}
}

// Retention deletes only what ParseObjectName accepts: the snapshots of exactly this
// EtcdBackup, never those of another whose names its own names could be a prefix of, nor
// those written under the earlier key format.
func TestParseObjectNameAcceptsOnlyThisEtcdBackupsSnapshots(t *testing.T) {
	other := func(change func(*Series)) string {
		s := daily
		change(&s)
		return ObjectName("prod/", s, t0, 1)
	}
	dir := "prod/db/main/daily_" + daily.UID + "/"
	for what, foreign := range map[string]string{
		"another EtcdBackup whose name extends ours": other(func(s *Series) { s.Backup, s.UID = "daily-2", "9d1e0c55-0000-4000-8000-000000000002" }),
		"another EtcdBackup of the cluster":          other(func(s *Series) { s.Backup, s.UID = "hourly", "9d1e0c55-0000-4000-8000-000000000003" }),
		"an earlier EtcdBackup of the same name":     other(func(s *Series) { s.UID = "9d1e0c55-0000-4000-8000-000000000004" }),
		"the same-named cluster and EtcdBackup in another namespace": other(func(s *Series) {
			s.Namespace, s.UID = "db-2", "9d1e0c55-0000-4000-8000-000000000005"
		}),
		"a same-named EtcdBackup of another cluster": other(func(s *Series) { s.Cluster = "mainline" }),
		"the earlier key format":                     "prod/main-20260301T120000Z-r1.db",
		"another prefix":                             "dev/db/main/daily_" + daily.UID + "/20260301T120000Z-r1.db",
		"not a snapshot":                             dir + "notes.txt",
		"deeper down":                                dir + "copy/20260301T120000Z-r1.db",
		"an upload in progress":                      dir + "20260301T120000Z-r1.db.part",
		"no revision":                                dir + "20260301T120000Z-rX.db",
		"another time format":                        dir + "2026-03-01T12:00:00Z-r1.db",
	} {
		if _, ok := ParseObjectName("prod/", daily, foreign); ok {
			t.Errorf("%s: %q taken for one of our snapshots", what, foreign)
		}
	}
}

func TestSeriesValidate(t *testing.T) {
	if err := daily.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, change := range []func(*Series){
		func(s *Series) { s.Namespace = "" },
		func(s *Series) { s.Cluster = "" },
		func(s *Series) { s.Backup = "" },
		func(s *Series) { s.UID = "" },
		func(s *Series) { s.Backup = "a/b" },
	} {
		s := daily
		change(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%+v accepted", s)
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
	// Weeks of missed runs on the most frequent schedules: the walk over them once stopped at
	// 100000 runs, short of now, and the run after its catch-up was overdue at once.
	latest := t0.Add(100 * 24 * time.Hour)
	for spec, period := range map[string]time.Duration{"@every 10s": 10 * time.Second, "* * * * *": time.Minute} {
		sched, err := ParseSchedule(spec)
		if err != nil {
			t.Fatal(err)
		}
		runNow, scheduledFor, next := Due(sched, t0, latest.Add(5*time.Second))
		if !runNow || !scheduledFor.Equal(latest) || !next.Equal(latest.Add(period)) {
			t.Errorf("%s, 100 days missed: Due = %v, %v, %v; want %v, then %v", spec, runNow, scheduledFor, next, latest, latest.Add(period))
		}
	}
	if runNow, _, next := Due(hourly, t0.Add(3*time.Hour), t0.Add(time.Hour)); runNow || !next.Equal(t0.Add(4*time.Hour)) {
		t.Errorf("clock back before the last run: runNow %v, next %v; want no run until the one after it", runNow, next)
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
			out = append(out, Snapshot{Key: ObjectName("", daily, t0.Add(-time.Duration(h)*time.Hour), 1), Time: t0.Add(-time.Duration(h) * time.Hour)})
		}
		return out
	}
	key := func(h int) string {
		return ObjectName("", daily, t0.Add(-time.Duration(h)*time.Hour), 1)
	}
	cases := []struct {
		name     string
		snaps    []Snapshot
		maxCount int
		maxAge   time.Duration
		keep     []string
		want     []string
	}{
		{"within both limits", snaps(0, 1, 2), 3, 24 * time.Hour, nil, nil},
		{"count keeps the newest, in any listing order", snaps(2, 0, 3, 1), 2, 0, nil, []string{key(2), key(3)}},
		{"age", snaps(0, 10, 30, 50), 0, 24 * time.Hour, nil, []string{key(30), key(50)}},
		{"both", snaps(0, 1, 30), 2, 24 * time.Hour, nil, []string{key(30)}},
		{"the newest survives even when too old", snaps(48, 72), 0, 24 * time.Hour, nil, []string{key(72)}},
		{"nothing to prune", nil, 1, time.Hour, nil, nil},
		// keep: the snapshot status.lastBackup names, and the run's own.
		{"a kept snapshot past maxCount stays, and the others go", snaps(0, 1, 2, 3), 1, 0, []string{key(2)}, []string{key(1), key(3)}},
		{"a kept snapshot counts among the newest maxCount", snaps(0, 1, 2), 2, 0, []string{key(1)}, []string{key(2)}},
		{"a kept snapshot past maxAge stays", snaps(0, 30, 50), 0, 24 * time.Hour, []string{key(30)}, []string{key(50)}},
		{"a kept snapshot not the newest, its clock behind another's", snaps(-1, 0), 1, 0, []string{key(0)}, nil},
	}
	for _, tc := range cases {
		if got := ToPrune(tc.snaps, tc.maxCount, tc.maxAge, t0, tc.keep); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ToPrune = %v, want %v", tc.name, got, tc.want)
		}
	}
}
