package membership

import "slices"

// restoreInPlace replaces a cluster's data with the restored members': every old member is
// stopped first — clients see the cluster unavailable, never a mix of old and restored data —
// then the restored members start together, as etcd's recovery guide starts a cluster restored
// member by member from one snapshot. Once they serve, the usual steps take over: the old
// members are orphans (their claims go), and any members the spec asks for beyond the restored
// ones join as learners.
//
// Invariants: no restored member starts while an old member's pod may run (but for one on a
// node that stopped answering, see below); nothing starts but the restored members; an old
// member is never restarted.
func restoreInPlace(o Observed) (Step, bool) {
	byName := index(o.Members)
	if seed := byName[o.RestoreSeed]; o.Reachable && seed.InEtcd() {
		return Step{}, false // the restored cluster serves: every other member is new, or an orphan
	}
	restored := restoredMembers(o)
	old := filter(o.Members, func(m Member) bool { return m.PodExists && !slices.Contains(restored, m.Name) })
	running := names(old, func(m Member) bool { return !m.PodTerminating })
	if len(running) > 0 {
		return Step{Action: StopMembers, Members: running, Operation: OpRestoring,
			Reason: "stopping the cluster to replace its data with the restored snapshot"}, true
	}
	// A pod on a node that stopped answering never ends while the node is gone; the restored
	// members form a cluster of their own (a new cluster ID), which an old member, should it
	// still run there, cannot join. It is not waited for.
	ending := names(old, func(m Member) bool { return m.NodeLostSince.IsZero() })
	if len(ending) > 0 {
		return Step{Action: Wait, Operation: OpRestoring, Members: ending, Reason: "waiting for the old members to stop"}, true
	}
	withoutClaim := slices.DeleteFunc(slices.Clone(restored), func(name string) bool { return byName[name].PVCExists })
	if len(withoutClaim) > 0 {
		// The restore gives the claims one after another: starting some of the members
		// before the others' data is theirs would start a cluster short of members.
		return Step{Action: Wait, Operation: OpRestoring, Members: withoutClaim, Reason: "waiting for the restored members' claims"}, true
	}
	unstarted := slices.DeleteFunc(slices.Clone(restored), func(name string) bool { return byName[name].PodExists })
	if len(unstarted) > 0 {
		return Step{Action: CreateBootstrapMembers, Members: unstarted, Operation: OpRestoring,
			Reason: "starting the restored members together"}, true
	}
	if !o.Reachable {
		return Step{Action: Wait, Operation: OpRestoring, Reason: "waiting for the restored members to serve"}, true
	}
	return Step{}, false
}

// restoredMembers are the members whose claims hold the restored data: those the seed's claim
// plans, the seed always among them (a restore of a snapshot on a claim, or one by an earlier
// operator, restored the seed alone, and the others join as learners).
func restoredMembers(o Observed) []string {
	if slices.Contains(o.BootstrapPlan, o.RestoreSeed) {
		return o.BootstrapPlan
	}
	return []string{o.RestoreSeed}
}
