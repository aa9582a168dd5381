package membership

import (
	"slices"
	"strconv"
	"strings"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Members whose data diverged from the others' (Member.Corrupt: etcd's CORRUPT alarm, the
// member's own start-up check refusing to serve, or the operator's hash comparison naming the
// minority). Their raft log is sound (raft checks it), their keyspace is not: so they still
// count as votes in the quorum sums, as they vote and replicate like any member, but what they
// apply is never served nor built on:
//   - a corrupt member is never a leadership transferee, never promoted, never restarted on its
//     data, and never the member a quorum recovery builds on;
//   - while a quorum serves it is first taken out of the client Service (its pod keeps running:
//     its vote may be one the quorum needs), leadership is moved off it, then it is removed from
//     etcd when the healthy voters left are a quorum (removeIfSafe), its claim kept with its data
//     for examination, and scale-up adds a fresh member in its place. Until its removal is safe,
//     the other repairs go on (a member on a lost node replaced, a missing one added), and the
//     cluster is never reported settled;
//   - etcd's CORRUPT alarm, which stops every write, is disarmed only for members no longer in
//     etcd, and only once the cluster is back at its size with every member healthy: disarmed
//     earlier, a member still corrupt could be written through again.

// replaceCorrupt takes the next step of replacing the corrupt members etcd lists: every one
// out of the client Service first, then each moved off leadership and removed, as soon as that
// is safe.
func replaceCorrupt(o Observed) (Step, bool) {
	corrupt := filter(o.Members, func(m Member) bool { return m.InEtcd() && m.Corrupt != "" })
	for _, m := range corrupt {
		if m.PodExists && !m.PodTerminating && !m.PodFenced {
			return Step{Action: FenceFromClients, Members: []string{m.Name}, Operation: OpReplacingCorrupt,
				Reason: diverged(m) + ": taking it out of the client Service"}, true
		}
	}
	for _, m := range corrupt {
		if m.IsLeader {
			if target, ok := bestTransferee(o.Members, m); ok {
				return Step{Action: MoveLeader, Member: m.Name, MemberID: m.ID, Target: target.ID, Operation: OpReplacingCorrupt,
					Reason: diverged(m) + ": moving leadership off it before it is removed"}, true
			}
		}
		if step, ok := removeIfSafe(o, m, OpReplacingCorrupt, diverged(m)+": removing it, its claim kept, to replace it with a fresh member"); ok {
			return step, true
		}
	}
	return Step{}, false
}

func diverged(m Member) string {
	return "member " + m.Name + "'s data diverged from the others' (" + m.Corrupt + ")"
}

// corruptRemains holds a cluster with a corrupt member etcd lists from being settled, once
// nothing else is to do: its removal waits for the other members.
func corruptRemains(o Observed) (Step, bool) {
	i := slices.IndexFunc(o.Members, func(m Member) bool { return m.InEtcd() && m.Corrupt != "" })
	if i < 0 {
		return Step{}, false
	}
	m := o.Members[i]
	return Step{Action: Wait, Member: m.Name, Operation: OpReplacingCorrupt,
		Reason: diverged(m) + ", but removing it now would leave fewer healthy members than a quorum; " +
			"once the others are healthy it is replaced. If most members are corrupt, restore the cluster from a backup (an EtcdRestore of mode InPlace)"}, true
}

// disarmCorrupt clears etcd's CORRUPT alarm for a member no longer in etcd (replaced), once
// the cluster is whole and healthy again. An alarm for a member still listed is the evidence
// replaceCorrupt acts on: it stays until that member is gone.
func disarmCorrupt(o Observed) (Step, bool) {
	for _, id := range o.CorruptAlarms {
		if slices.ContainsFunc(o.Members, func(m Member) bool { return m.ID == id }) {
			continue
		}
		inEtcd := filter(o.Members, Member.InEtcd)
		whole := len(inEtcd) >= o.DesiredSize && !slices.ContainsFunc(inEtcd, func(m Member) bool { return !m.Healthy || m.IsLearner })
		if !whole {
			return Step{Action: Wait, MemberID: id, Operation: OpReplacingCorrupt,
				Reason: "etcd's CORRUPT alarm for a removed member stops every write; it is cleared once its replacement is healthy"}, true
		}
		return Step{Action: DisarmCorrupt, MemberID: id, Operation: OpReplacingCorrupt,
			Reason: "the corrupt member is replaced and every member is healthy: clearing etcd's CORRUPT alarm, which stops every write"}, true
	}
	return Step{}, false
}

// corruptNames are the members found corrupt, for the messages of a lost quorum.
func corruptNames(o Observed) string {
	return strings.Join(names(o.Members, func(m Member) bool { return m.Corrupt != "" }), ", ")
}

// KeyspaceHash is one member's keyspace hash at the compared revision: etcd's HashKV, which
// two members with the same history give only when compacted at the same revision.
type KeyspaceHash struct {
	Hash            uint32
	CompactRevision int64
}

// Consistency is what a comparison of the members' keyspace hashes found.
type Consistency struct {
	// Result is etcdv1alpha1.ConsistencyConsistent, ConsistencyDiverged or ConsistencyInconclusive.
	Result string
	// Diverged are the members whose hash differs from the majority's, at the same compaction.
	Diverged []string
	// Message gives the hashes, or why nothing could be concluded.
	Message string
}

// CompareHashes finds the members whose keyspace diverged: those whose hash, at the same
// compaction, differs from that of a strict majority of all the members. Without such a
// majority (an even split, members compacted at different revisions) nothing is concluded: no
// member is named, as the decision would remove the one named.
func CompareHashes(hashes map[string]KeyspaceHash, members int) Consistency {
	var names []string
	counts := map[KeyspaceHash]int{}
	for name, h := range hashes {
		names = append(names, name)
		counts[h]++
	}
	slices.Sort(names)
	var described []string
	for _, name := range names {
		h := hashes[name]
		described = append(described, name+"="+strconv.FormatUint(uint64(h.Hash), 10)+"@"+strconv.FormatInt(h.CompactRevision, 10))
	}
	hashList := "hash@compaction: " + strings.Join(described, ", ")
	var majority KeyspaceHash
	found := false
	for h, n := range counts {
		if n > members/2 {
			majority, found = h, true
		}
	}
	if !found && len(counts) > 1 {
		return Consistency{Result: etcdv1alpha1.ConsistencyInconclusive,
			Message: "no majority of the " + strconv.Itoa(members) + " members agrees (" + hashList + ")"}
	}
	if !found {
		return Consistency{Result: etcdv1alpha1.ConsistencyInconclusive,
			Message: "only " + strconv.Itoa(len(hashes)) + " of the " + strconv.Itoa(members) + " members answered (" + hashList + ")"}
	}
	var diverged []string
	for _, name := range names {
		if h := hashes[name]; h.CompactRevision == majority.CompactRevision && h.Hash != majority.Hash {
			diverged = append(diverged, name)
		}
	}
	if len(diverged) == 0 {
		return Consistency{Result: etcdv1alpha1.ConsistencyConsistent, Message: hashList}
	}
	return Consistency{Result: etcdv1alpha1.ConsistencyDiverged, Diverged: diverged, Message: hashList}
}
