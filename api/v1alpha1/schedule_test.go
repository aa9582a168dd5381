package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	"github.com/robfig/cron/v3"
)

// scheduleCorpus holds schedules the API server must admit exactly when cron.ParseStandard,
// which the operator runs them with, accepts them: an admitted schedule the parser refuses
// would leave a scheduled EtcdBackup that never runs.
var scheduleCorpus = []string{
	// accepted by both
	"* * * * *",
	"0 */6 * * *",
	"30 3 * * *",
	"59 23 31 12 6",
	"00 05 01 01 00",
	"15,45 * * * *",
	"5/15 * * * *",
	"*/59 * * * *",
	"0 9-17 * * 1-5",
	"0 9-17/2 * * MON-FRI",
	"0 0 1-31/10 * *",
	"0 0 1 JAN *",
	"0 0 1 jan-mar,Oct *",
	"0 0 ? * sun",
	"0 0 * Dec Sat",
	"0 0 * * ?",
	"@yearly",
	"@annually",
	"@monthly",
	"@weekly",
	"@daily",
	"@midnight",
	"@hourly",
	"@every 30m",
	"@every 1h30m",
	"@every 1.5h",
	"@every 10s",
	"@every 10000ms",
	// refused by both
	"",
	"every hour",
	"* * * *",
	"* * * * * *",
	"60 * * * *",
	"0,61 * * * *",
	"-1 * * * *",
	"* 24 * * *",
	"* * 0 * *",
	"* * 32 * *",
	"* * * 13 *",
	"* * * * 7",
	"* * * MON *",
	"* * * * JAN",
	"* * * FOO *",
	"* * * * MON-SUN",
	"50-10 * * * *",
	"*/0 * * * *",
	"1-2-3 * * * *",
	"1/2/3 * * * *",
	"a * * * *",
	"@DAILY",
	"@reboot",
	"@every",
	"@every 1d",
	"@every 1h ",
}

// refusedThoughParsed are schedules the parser accepts and the API server refuses on purpose,
// each for the reason given: admission may be stricter than the parser, never looser.
var refusedThoughParsed = map[string]string{
	"TZ=Europe/Paris 0 3 * * *": "schedules run in UTC, as the field says",
	"CRON_TZ=UTC 0 3 * * *":     "schedules run in UTC, as the field says",
	"0  3 * * *":                "fields are separated by single spaces",
	"0\t3 * * *":                "fields are separated by single spaces",
	" 0 3 * * *":                "fields are separated by single spaces",
	"? * * * *":                 "? only means something in the day fields",
	"*-5 * * * *":               "the parser ignores what follows *-",
	"1,,2 * * * *":              "the parser skips empty list items",
	"+5 * * * *":                "numbers are digits only",
	"005 * * * *":               "numbers have at most two digits",
	"*/100 * * * *":             "steps have at most two digits",
	"@every -1h":                "a negative interval is a mistake",
	"@every 0s":                 "a zero interval is a mistake (the parser runs it every second)",
	"@every 9.9s":               "each run starts a Job, which alone takes seconds",
	"@every .5h":                "durations start with a digit",
	"@every 999999h":            "numbers have at most five digits, which keeps the sum within the parser's range",
	"@every 1h1h1h1h1h":         "at most four parts, for the same reason",
	"@every 0.0000000001s":      "at most nine decimals, nanoseconds",
	"@every 1\u00b5s":           "microseconds are written us",
	"0 0 1 1 1 ":                "no trailing space",
	"0 0 * * 0,":                "the parser skips empty list items",
	"0 0 * * " + strings.Repeat("1,", 70) + "1": "the schedule is at most 128 characters",
}

func TestSchedulesAreAdmittedExactlyWhenTheOperatorCanParseThem(t *testing.T) {
	var admittedCount, refusedCount int
	check := func(t *testing.T, schedule string, wantAdmitted bool) {
		u := object(t, scheduled(schedule))
		err := k8sClient.Create(ctx(t), u)
		if err == nil {
			admittedCount++
			t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), u) })
		} else {
			refusedCount++
		}
		switch {
		case wantAdmitted && err != nil:
			t.Errorf("%q refused, but the operator can run it: %v", schedule, err)
		case !wantAdmitted && err == nil:
			t.Errorf("%q admitted, but it must be refused", schedule)
		case err != nil && !strings.Contains(err.Error(), "schedule"):
			t.Errorf("%q refused for another reason than its schedule: %v", schedule, err)
		}
	}
	for _, schedule := range scheduleCorpus {
		_, parseErr := cron.ParseStandard(schedule)
		check(t, schedule, parseErr == nil)
	}
	for schedule, why := range refusedThoughParsed {
		if _, err := cron.ParseStandard(schedule); err != nil {
			t.Errorf("%q (%s) is refused by the parser too: move it to scheduleCorpus", schedule, why)
		}
		check(t, schedule, false)
	}
	if admittedCount < 20 || refusedCount < 40 {
		t.Errorf("the corpus must hold both kinds: %d admitted, %d refused", admittedCount, refusedCount)
	}
}
