package restoreplan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/etcd-database/etcd-operator/internal/etcd"
)

// Disagreement says why the members' keyspace digests at the restored revision do not show one
// and the same restored store, or "" when they do. Invariant: a restore completes only once
// every one of its cluster's members (want of them) answered with the same HashKV, compact
// revision and key count at the revision its data starts from: members each prepared by a Job
// of its own from the same snapshot must agree, and a member that joined later received the
// leader's store. A member that answered nothing is not taken as agreeing.
func Disagreement(digests map[string]etcd.KeyspaceDigest, want int) string {
	if len(digests) < want {
		return fmt.Sprintf("%d of %d members reported their keyspace", len(digests), want)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range digests {
			if !yield(name) {
				return
			}
		}
	})
	first := digests[names[0]]
	var differ []string
	for _, name := range names[1:] {
		if d := digests[name]; d.Hash != first.Hash || d.CompactRevision != first.CompactRevision || d.Keys != first.Keys {
			differ = append(differ, fmt.Sprintf("%s has HashKV %d, compact revision %d, %d keys", name, d.Hash, d.CompactRevision, d.Keys))
		}
	}
	if len(differ) == 0 {
		return ""
	}
	return fmt.Sprintf("at revision %d, %s has HashKV %d, compact revision %d, %d keys, but %s",
		first.Revision, names[0], first.Hash, first.CompactRevision, first.Keys, strings.Join(differ, "; "))
}
