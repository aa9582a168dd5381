// Package backupplan holds the decisions of scheduled backups as pure functions of the clock:
// when the next run is due (with at most one catch-up after downtime), how snapshots are named
// so that they sort by time, and which snapshots retention deletes.
package backupplan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// timeLayout sorts lexically in time order and is safe in object keys and file names.
const timeLayout = "20060102T150405Z"

// Series is the snapshots of one EtcdBackup.
type Series struct {
	Namespace string
	Cluster   string
	Backup    string
	UID       string
}

// ObjectName names a snapshot: <prefix><cluster>-<UTC time>-r<revision>.db.
func ObjectName(prefix string, s Series, t time.Time, revision int64) string {
	return fmt.Sprintf("%s%s-%s-r%d.db", prefix, s.Cluster, t.UTC().Format(timeLayout), revision)
}

// ParseObjectName returns the time of a snapshot that ObjectName named for this series and
// prefix, and false for any other object: retention never touches what it did not write.
func ParseObjectName(prefix string, s Series, name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, prefix+s.Cluster+"-")
	if !ok {
		return time.Time{}, false
	}
	rest, ok = strings.CutSuffix(rest, ".db")
	if !ok {
		return time.Time{}, false
	}
	stamp, rev, ok := strings.Cut(rest, "-r")
	if !ok {
		return time.Time{}, false
	}
	if _, err := strconv.ParseInt(rev, 10, 64); err != nil {
		return time.Time{}, false
	}
	t, err := time.Parse(timeLayout, stamp)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// ParseSchedule parses a five-field cron schedule or a descriptor (@hourly, @every 30m), in UTC.
func ParseSchedule(s string) (cron.Schedule, error) {
	sched, err := cron.ParseStandard(s)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", s, err)
	}
	return sched, nil
}

// maxMissedRuns bounds the walk over missed run times after a long downtime.
const maxMissedRuns = 100000

// Due says whether a scheduled run should start now and when the following one is due. since
// is when the last run was scheduled, or when the EtcdBackup was created. However many runs
// were missed while the operator was down, at most one starts now, for the latest missed time.
func Due(sched cron.Schedule, since, now time.Time) (runNow bool, scheduledFor, next time.Time) {
	first := sched.Next(since)
	if first.IsZero() || first.After(now) {
		return false, time.Time{}, first
	}
	scheduledFor = first
	for range maxMissedRuns {
		n := sched.Next(scheduledFor)
		if n.IsZero() || n.After(now) {
			break
		}
		scheduledFor = n
	}
	return true, scheduledFor, sched.Next(scheduledFor)
}

// Snapshot is one snapshot found in the destination.
type Snapshot struct {
	Key  string
	Time time.Time
}

// ToPrune picks the snapshots retention deletes: all but the newest maxCount (0: no limit),
// and those older than maxAge (0: no limit). The newest snapshot is never deleted.
func ToPrune(snapshots []Snapshot, maxCount int, maxAge time.Duration, now time.Time) []string {
	sorted := slices.Clone(snapshots)
	slices.SortFunc(sorted, func(a, b Snapshot) int { return b.Time.Compare(a.Time) }) // newest first
	var prune []string
	for i, s := range sorted {
		if i == 0 {
			continue
		}
		if (maxCount > 0 && i >= maxCount) || (maxAge > 0 && now.Sub(s.Time) > maxAge) {
			prune = append(prune, s.Key)
		}
	}
	return prune
}
