package etcdtest

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// KeyspacesDiffer says how the keyspaces of the members at endpoints (member name: client URL)
// differ, or "": each member hashes its keyspace (HashKV) at one revision every member has
// applied, the lowest any reports, and every hash must be the same. cl must reach every
// endpoint. Reads through a Service see one member; a member whose data diverged (a restore or
// a forced recovery gone wrong, a replayed log) goes unseen without this.
func KeyspacesDiffer(ctx context.Context, cl *clientv3.Client, endpoints map[string]string) string {
	var rev int64
	for member, ep := range endpoints {
		st, err := cl.Status(ctx, ep)
		if err != nil {
			return fmt.Sprintf("status of %s at %s: %v", member, ep, err)
		}
		if rev == 0 || st.Header.Revision < rev {
			rev = st.Header.Revision
		}
	}
	hashes := map[uint32][]string{}
	compacted := map[int64][]string{}
	for member, ep := range endpoints {
		h, err := cl.HashKV(ctx, ep, rev)
		if err != nil {
			return fmt.Sprintf("HashKV of %s at revision %d: %v", member, rev, err)
		}
		hashes[h.Hash] = append(hashes[h.Hash], member)
		compacted[h.CompactRevision] = append(compacted[h.CompactRevision], member)
	}
	if len(hashes) != 1 && len(compacted) != 1 {
		// At the revision a compaction was made at, a member that made it answers with the hash
		// it took then, of the range since the compaction before (etcd keeps those for its
		// compaction hash check); a member that joined since hashes the range since this
		// one. The hashes cover different ranges and say nothing: a write past the compaction
		// makes them comparable.
		return fmt.Sprintf("the members' hashes at revision %d cover different ranges (members by the compact revision their hash starts from %v); write past it to compare them", rev, compacted)
	}
	if len(hashes) != 1 {
		return fmt.Sprintf("the members' keyspaces differ at revision %d: members by hash %v", rev, hashes)
	}
	return ""
}
