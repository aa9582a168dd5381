// Package restoreplan holds the pure decisions of a restore, apart from the Kubernetes objects
// that carry them out.
package restoreplan

import (
	"fmt"
	"math"
	"strconv"
)

// Values of EtcdRestore.spec.revisionBump other than an explicit number.
const (
	BumpAuto = "Auto"
	BumpNone = "None"
)

const (
	// MinAutoBump is the least Auto bumps by: room for the writes of a cluster the operator
	// saw only for a moment, or whose high-water mark it missed between two looks.
	MinAutoBump int64 = 1_000_000
	// UnknownAutoBump is what Auto bumps by when no revision is known beyond the snapshot's:
	// a restore from a location, or into a new cluster from a backup of a cluster that is
	// gone. It is past any revision a real cluster reaches in years of writes (a billion
	// writes), and leaves 9e18 of the int64 revision space.
	UnknownAutoBump int64 = 1_000_000_000
)

// Revision says what a restore's revision bump rests on.
type Revision struct {
	// Snapshot is the revision of the snapshot restored; of the oldest of the snapshots a
	// restore may fall back to. 0 when not known.
	Snapshot int64
	// HighestSeen is the highest revision the operator saw the cluster the snapshot was taken
	// of (or the one restored over) reach: the high-water mark of what any client may have read
	// or watched. 0 when not known.
	HighestSeen int64
}

// RevisionBump is how far past the snapshot's revision the restored cluster starts, for the
// value of spec.revisionBump. Clients of etcd (Kubernetes' watch caches and informers above all)
// key what they hold by revision: a cluster restored to an older revision than a client saw
// hands out revisions again that the client already holds, with other data, and a watch from
// such a revision replays or misses events. Bumped past the high-water mark, with the revisions
// below it marked compacted, every watch from before the restore ends with a compaction error
// and its client lists afresh.
//
// Auto bumps by 1.2 × (highest seen − snapshot), at least MinAutoBump, so the first revision
// after the restore is above any a client saw, with a fifth to spare for writes after the last
// look; when the highest seen is not known, by UnknownAutoBump. None is 0: safe only for a
// cluster no client has watched. A number is taken as it is.
func RevisionBump(spec string, rev Revision) (int64, error) {
	switch spec {
	case BumpNone:
		return 0, nil
	case BumpAuto, "":
		if rev.HighestSeen == 0 {
			return UnknownAutoBump, nil
		}
		gap := max(rev.HighestSeen-rev.Snapshot, 0)
		if gap > (math.MaxInt64-rev.Snapshot)/6*5 {
			// etcd's revision is an int64: the bumped one would not fit.
			return 0, fmt.Errorf("the highest revision seen, %d, is too far past the snapshot's, %d, to bump past it", rev.HighestSeen, rev.Snapshot)
		}
		return max(gap+gap/5, MinAutoBump), nil
	}
	n, err := strconv.ParseInt(spec, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("revisionBump %q is neither Auto, None nor a positive number", spec)
	}
	return n, nil
}
