// Package backupplan holds the decisions of scheduled backups as pure functions of the clock:
// when the next run is due (with at most one catch-up after downtime), how snapshots are named
// so that they sort by time and each EtcdBackup's are its own, and which snapshots retention
// deletes.
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

// Series is the snapshots of one EtcdBackup. Its keys carry the EtcdBackup's UID, not only its
// name: a name is reused after a deletion, and backups of same-named clusters in different
// namespaces may share a bucket and prefix.
type Series struct {
	Namespace string
	Cluster   string
	Backup    string
	UID       string
}

// Validate refuses a series whose keys would not be its own: every part is needed, and none
// may hold the "/" that separates them.
func (s Series) Validate() error {
	for _, part := range [][2]string{{"namespace", s.Namespace}, {"cluster", s.Cluster}, {"backup", s.Backup}, {"backup UID", s.UID}} {
		if part[1] == "" || strings.Contains(part[1], "/") {
			return fmt.Errorf("the %s %q cannot name snapshots: it must be set and hold no /", part[0], part[1])
		}
	}
	return nil
}

// Dir is the "directory" of the series' snapshots under prefix:
// <prefix><namespace>/<cluster>/<backup>_<UID>/. Kubernetes names never hold "_" or "/", so
// under one prefix no other series' directory begins with this one (not even backup
// "daily-2"'s with "daily"'s), and the UID tells an EtcdBackup from an earlier one of its name.
func (s Series) Dir(prefix string) string {
	return prefix + s.Namespace + "/" + s.Cluster + "/" + s.Backup + "_" + s.UID + "/"
}

// ObjectName names a snapshot of the series: <Dir><UTC time>-r<revision>.db, so that its
// snapshots sort by time. The earlier format, <prefix><cluster>-<UTC time>-r<revision>.db,
// named nothing but the cluster; ParseObjectName never accepts it.
func ObjectName(prefix string, s Series, t time.Time, revision int64) string {
	return fmt.Sprintf("%s%s-r%d.db", s.Dir(prefix), t.UTC().Format(timeLayout), revision)
}

// ParseObjectName returns the time of a snapshot that ObjectName named for this series and
// prefix, and false for any other object: retention never touches what it did not write.
func ParseObjectName(prefix string, s Series, name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, s.Dir(prefix))
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

// ObjectRevision is the revision in the name of a snapshot ParseObjectName accepts: the one
// its backup read just before streaming it, which the snapshot itself may have passed.
func ObjectRevision(name string) (int64, bool) {
	rest, ok := strings.CutSuffix(name, ".db")
	i := strings.LastIndex(rest, "-r")
	if !ok || i < 0 {
		return 0, false
	}
	rev, err := strconv.ParseInt(rest[i+2:], 10, 64)
	return rev, err == nil
}

// ParseSchedule parses a five-field cron schedule or a descriptor (@hourly, @every 30m), in UTC.
func ParseSchedule(s string) (cron.Schedule, error) {
	sched, err := cron.ParseStandard(s)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", s, err)
	}
	return sched, nil
}

// Due says whether a scheduled run should start now and when the following one is due. since
// is when the last run was scheduled, or when the EtcdBackup was created. However many runs
// were missed while the operator was down, or its clock jumped forward over, at most one
// starts now, for the latest missed time; and a clock that jumped back starts none for a time
// at or before since.
func Due(sched cron.Schedule, since, now time.Time) (runNow bool, scheduledFor, next time.Time) {
	first := sched.Next(since)
	if first.IsZero() || first.After(now) {
		return false, time.Time{}, first
	}
	scheduledFor = latestRunBy(sched, since, now)
	return true, scheduledFor, sched.Next(scheduledFor)
}

// latestRunBy is the latest run time of sched after since and at or before now, given that
// the first run after since is by now. Walking every run from since would take millions of
// steps after weeks of downtime on a schedule every few seconds (a bounded walk stopped short
// of now, and the run after its catch-up was overdue at once). An @every schedule's runs are
// since's first run plus whole delays; a cron schedule's are a fixed grid, so it looks back
// from now instead, over windows doubling from a second, for the first that holds a run, and
// walks only that window.
func latestRunBy(sched cron.Schedule, since, now time.Time) time.Time {
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		first := sched.Next(since)
		return first.Add(now.Sub(first) / every.Delay * every.Delay)
	}
	from := since
	for back := time.Second; back > 0 && back < now.Sub(since); back *= 2 {
		if n := sched.Next(now.Add(-back)); !n.IsZero() && !n.After(now) {
			from = now.Add(-back)
			break
		}
	}
	latest := sched.Next(from)
	for n := sched.Next(latest); !n.IsZero() && !n.After(now); n = sched.Next(n) {
		latest = n
	}
	return latest
}

// Snapshot is one snapshot found in the destination.
type Snapshot struct {
	Key  string
	Time time.Time
}

// ToPrune picks the snapshots retention deletes, newest first: all but the newest maxCount (0:
// no limit), and those older than maxAge (0: no limit). The newest snapshot is never deleted,
// nor any of keep, which still count among the newest maxCount: a kept snapshot past the
// limits is one more than retention would leave, never one fewer of the newer ones.
func ToPrune(snapshots []Snapshot, maxCount int, maxAge time.Duration, now time.Time, keep []string) []string {
	sorted := slices.Clone(snapshots)
	slices.SortFunc(sorted, func(a, b Snapshot) int { return b.Time.Compare(a.Time) }) // newest first
	var prune []string
	for i, s := range sorted {
		if i == 0 || slices.Contains(keep, s.Key) {
			continue
		}
		if (maxCount > 0 && i >= maxCount) || (maxAge > 0 && now.Sub(s.Time) > maxAge) {
			prune = append(prune, s.Key)
		}
	}
	return prune
}
