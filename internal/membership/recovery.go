package membership

import (
	"slices"
	"strconv"
	"strings"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Recovery from a quorum lost for good. The one failure it must never cause is a split brain:
// two clusters taking writes, the old majority on one side of a partition and the forced
// survivor on the other. So a member counts as lost only on evidence that its etcd cannot be
// serving — its claim is gone, its pod has found no node for the recovery's wait, or a person
// declared it lost (AnnotationLostMembers) — never because its node stopped answering the API
// server: a node that stopped answering is not an etcd that stopped. Members the operator
// cannot see (their node stopped answering) must be too few to form a quorum of the last voters
// on their own before anything is forced; a member counted lost that answers a probe, at any
// address, holds every step; and the lost members' pods are stopped (fenced) before the
// survivor is forced.

// MinRecoveryAfter is the floor of spec.quorumLossRecovery.after: longer than Kubernetes takes
// to notice a node that stopped answering (40-50 s) and than a cluster autoscaler takes to bring
// a node for a pending pod (1-2 min), so that a member merely slow to come back is never counted
// lost and forced out of the cluster.
const MinRecoveryAfter = 2 * time.Minute

// after is the wait the policy asks for, never below the floor.
func (r RecoveryPolicy) after() time.Duration { return max(r.After, MinRecoveryAfter) }

// nextWithoutQuorum: etcd does not answer. Before the cluster first forms this is bootstrap;
// after, only restarting members on their own data is safe, and only the members of the last
// membership etcd listed: after a force, the members left out still hold the old membership,
// and a majority of them restarted would serve it beside the forced member (a split brain).
// (While a recovery is under way and has not served, continueRecovery takes every step.) A
// forsaken member, forced in a recovery given up, holds a history of its own: never restarted.
func nextWithoutQuorum(o Observed) Step {
	if !o.EverFormed {
		return nextBootstrapStep(o)
	}
	if step, ok := continueRecovery(o); ok {
		return step
	}
	if o.DataSurvivesPod {
		missing := names(o.Members, func(m Member) bool {
			return !m.PodExists && m.PVCExists && slices.Contains(o.LastMembers, m.Name) && m.Name != o.Recovery.Forsaken && m.Corrupt == ""
		})
		if len(missing) > 0 {
			return Step{Action: RestartMembers, Members: missing, Operation: OpRecovering,
				Reason: "recreating the pods of members whose data is intact"}
		}
	}
	if step, ok := recoverQuorum(o); ok {
		return step
	}
	return Step{Action: Wait, Operation: OpQuorumLost,
		Reason: "a majority of members is unavailable; no destructive action is taken"}
}

// recoverQuorum decides the recovery of a quorum lost for good: fewer of the last voters have
// data left than a quorum, so waiting cannot bring it back. The survivor is the member whose
// log reaches furthest (the highest committed raft index); a copy of its data is kept, then it
// restarts alone with --force-new-cluster. Only with the policy's or the user's leave: writes
// that only the lost members had are gone.
func recoverQuorum(o Observed) (Step, bool) {
	// A forced member a person declared lost (its machine down) serves nowhere.
	forced := names(o.Members, func(m Member) bool { return m.ForcedNewCluster && m.PodExists && !m.DeclaredLost })
	if len(forced) > 0 {
		onLostNode := func(m Member) bool { return slices.Contains(forced, m.Name) && !m.NodeLostSince.IsZero() }
		if lost := names(o.Members, onLostNode); len(lost) > 0 {
			return Step{Action: Wait, Members: lost, Operation: OpQuorumLost,
				Reason: "the nodes of forced members " + strings.Join(lost, ", ") + " stopped answering: they may serve there as clusters of their own, so no other member is recovered from. " +
					"Once you have checked that those machines are down, declare them lost: annotate the EtcdCluster with " +
					etcdv1alpha1.AnnotationLostMembers + "=" + strings.Join(lost, ",")}, true
		}
		return Step{Action: Wait, Members: forced, Operation: OpRecoveringQuorum,
			Reason: "the member restarts as a cluster of its own from its data"}, true
	}
	if !o.DataSurvivesPod || len(o.LastVoters) == 0 {
		return Step{}, false
	}
	if o.AwaitingRestore != "" {
		// The user's in-place restore replaces the data anyway; two rewrites at once would
		// race for the same members.
		return Step{Action: Wait, Operation: OpRestoring,
			Reason: "EtcdRestore " + o.AwaitingRestore + " restores this cluster in place: no quorum recovery while it runs"}, true
	}
	f := VotersByFate(o)
	if len(f.Survivors) >= Quorum(len(o.LastVoters)) {
		return Step{}, false // a quorum's data is there: its pods come back
	}
	lostWhat := f.lostWhat(o)
	if step, ok := mayBeServingElsewhere(o, f, lostWhat); ok {
		return step, true
	}
	candidates := f.candidates()
	if len(candidates) == 0 && len(f.Corrupt) > 0 {
		return Step{Action: Wait, Operation: OpQuorumLost, Members: f.Corrupt,
			Reason: "quorum is lost (" + lostWhat + "), and the only data left is that of members found corrupt (" + corruptNames(o) +
				"), which is never recovered from: restore the cluster from a backup (an EtcdRestore of mode InPlace)"}, true
	}
	if len(candidates) == 0 && len(f.Stranded) == 0 && len(f.Unreachable) == 0 {
		return recoverFromBackup(o)
	}
	if len(candidates) == 0 {
		// Their data may come back with their nodes: a restore would throw it away.
		return Step{Action: Wait, Operation: OpQuorumLost, Members: append(f.Stranded, f.Unreachable...),
			Reason: "quorum is lost (" + lostWhat + "), and no member's data can be read: bring their nodes back, or " +
				"delete their claims to restore the cluster from a backup"}, true
	}
	best, unread := furthestLog(o.Members, candidates)
	chosen := best
	if slices.Contains(candidates, o.Recovery.From) {
		chosen = o.Recovery.From
	}
	if step, ok := survivorPending(o, chosen, lostWhat); ok {
		return step, true
	}
	if step, ok := learnerAhead(o, best, lostWhat); ok && o.Recovery.From == "" {
		return step, true
	}
	if o.Recovery.From != "" {
		// The user's choice needs no raft index: it is how a cluster whose members cannot
		// be asked (password authentication needs a quorum) is recovered.
		if !slices.Contains(candidates, o.Recovery.From) {
			return Step{Action: Wait, Operation: OpQuorumLost,
				Reason: "recover-from names " + o.Recovery.From + ", which is not a member whose data survives (" + strings.Join(candidates, ", ") +
					"): annotate the EtcdCluster with " + etcdv1alpha1.AnnotationRecoverFrom + "=" + best + " (its log reaches furthest of those reported) or another of them"}, true
		}
		return Step{Action: BeginRecovery, Member: o.Recovery.From, Operation: OpRecoveringQuorum,
			Reason: "quorum is lost for good (" + lostWhat + "); recovering from member " + o.Recovery.From + ", as annotated"}, true
	}
	if step, ok := corruptLogAhead(o, f, best, lostWhat); ok {
		return step, true
	}
	if len(unread) > 0 && len(candidates) > 1 {
		return readLogs(o, unread, lostWhat), true
	}
	if !o.Recovery.Automatic {
		return Step{Action: Wait, Operation: OpQuorumLost, Member: best,
			Reason: "quorum is lost for good (" + lostWhat + "); member " + best + " has the most recent data. " +
				"To recover from it, losing the writes only the lost members had, annotate the EtcdCluster with " +
				etcdv1alpha1.AnnotationRecoverFrom + "=" + best}, true
	}
	if wait := o.Recovery.LostSince.Add(o.Recovery.after()).Sub(o.Now); wait > 0 {
		return Step{Action: Wait, Operation: OpQuorumLost, Member: best,
			Reason: "quorum is lost for good (" + lostWhat + "); recovering from member " + best + ", whose log reaches furthest, once quorum has been lost for " +
				o.Recovery.after().String() + " (spec.quorumLossRecovery.after)"}, true
	}
	return Step{Action: BeginRecovery, Member: best, Operation: OpRecoveringQuorum,
		Reason: "quorum is lost for good (" + lostWhat + "); recovering from member " + best + ", whose log reaches furthest"}, true
}

// corruptLogAhead holds a recovery from best while a member found corrupt reports a log further
// than best's: its raft log is sound (only what it applied diverged), so it may hold acknowledged
// writes no other member has, and it is never recovered from. Recovering from best loses them:
// only a person may choose it, or restore from a backup instead.
func corruptLogAhead(o Observed, f Fates, best, lostWhat string) (Step, bool) {
	byName := index(o.Members)
	for _, name := range f.Corrupt {
		if m := byName[name]; m.RaftIndex > byName[best].RaftIndex {
			return Step{Action: Wait, Operation: OpQuorumLost, Member: best,
				Reason: "quorum is lost for good (" + lostWhat + "); member " + name + ", found corrupt, reports its log at " + strconv.FormatUint(m.RaftIndex, 10) +
					", further than member " + best + "'s (" + strconv.FormatUint(byName[best].RaftIndex, 10) + "): it may hold writes no other member has, and is never recovered from. " +
					"To recover from " + best + ", losing them, annotate the EtcdCluster with " + etcdv1alpha1.AnnotationRecoverFrom + "=" + best +
					"; or restore the cluster from a backup (an EtcdRestore of mode InPlace)"}, true
		}
	}
	return Step{}, false
}

// learnerAhead holds a recovery from best while a learner of the last membership answers with a
// log further than best's (or best's is not known): it may hold acknowledged writes that no
// voter whose data survives has, and a learner cannot be recovered from (it has no vote to
// form a cluster with). Recovering from best loses those writes: only a person may choose it,
// by naming best.
func learnerAhead(o Observed, best, lostWhat string) (Step, bool) {
	byName := index(o.Members)
	bestIndex := byName[best].RaftIndex
	var ahead []string
	var furthest uint64
	for _, name := range o.LastMembers {
		m := byName[name]
		if slices.Contains(o.LastVoters, name) || !m.Answering || m.RaftIndex <= bestIndex {
			continue
		}
		ahead = append(ahead, name)
		furthest = max(furthest, m.RaftIndex)
	}
	if len(ahead) == 0 {
		return Step{}, false
	}
	return Step{Action: Wait, Member: best, Members: ahead, Operation: OpQuorumLost,
		Reason: "quorum is lost for good (" + lostWhat + "); learners " + strings.Join(ahead, ", ") + " answer with logs reaching " + strconv.FormatUint(furthest, 10) +
			", further than member " + best + "'s (" + strconv.FormatUint(bestIndex, 10) + ", 0 if not known), the furthest of the voters whose data survives: " +
			"they may hold acknowledged writes no surviving voter has, and a learner cannot be recovered from. " +
			"To recover from member " + best + ", losing those writes, annotate the EtcdCluster with " + etcdv1alpha1.AnnotationRecoverFrom + "=" + best}, true
}

// mayBeServingElsewhere holds a recovery while etcd may still be serving where the operator
// cannot see it: a member counted lost answered a probe, or the members out of sight — on nodes
// that stopped answering the API server, or survivors that run but do not answer the operator —
// are enough for a quorum of the last voters. Forcing a survivor then could make a second
// cluster beside a majority that still acknowledges writes.
func mayBeServingElsewhere(o Observed, f Fates, lostWhat string) (Step, bool) {
	if step, ok := lostMemberAnswered(o, f.countedLost()); ok {
		return step, true
	}
	if step, ok := leaderFollowed(o); ok {
		return step, true
	}
	if step, ok := outOfSightMayBeAQuorum(o, f, lostWhat); ok {
		return step, true
	}
	return nodesLostLately(o, f)
}

// leaderFollowed holds a recovery while a member that answers follows a leader: etcd answered
// no member list, yet a leader, which keeps its place only while a quorum hears it, leads
// somewhere the operator does not reach. Members stop following a leader they no longer hear
// within an election timeout, so this holds a recovery seconds at most when the quorum is gone.
func leaderFollowed(o Observed) (Step, bool) {
	for _, m := range o.Members {
		if m.Answering && m.FollowsLeader != 0 {
			return Step{Action: Wait, Operation: OpQuorumLost, Members: []string{m.Name},
				Reason: "member " + m.Name + " follows a leader (ID " + strconv.FormatUint(m.FollowsLeader, 16) + "): a quorum may be serving where the operator does not reach it, so no recovery step is taken"}, true
		}
	}
	return Step{}, false
}

// outOfSightMayBeAQuorum holds a recovery while the members out of sight — on nodes that stopped
// answering the API server, or survivors whose pods run but do not answer the operator — are
// enough for a quorum of the last voters. It is asked again before every step up to the force:
// a survivor's node may stop answering after the recovery began.
func outOfSightMayBeAQuorum(o Observed, f Fates, lostWhat string) (Step, bool) {
	byName := index(o.Members)
	// A survivor the recovery fenced, its pod being deleted on a node that answers, is stopping.
	silent := slices.DeleteFunc(slices.Clone(f.Survivors), func(name string) bool {
		m := byName[name]
		return m.Answering || !m.PodExists || fenced(m)
	})
	if len(f.Unreachable) == 0 || len(f.Unreachable)+len(silent) < Quorum(len(o.LastVoters)) {
		return Step{}, false
	}
	return Step{Action: Wait, Operation: OpQuorumLost, Members: f.Unreachable,
		Reason: "quorum is lost (" + lostWhat + "), but the nodes of members " + strings.Join(f.Unreachable, ", ") +
			" stopped answering the API server, and their etcd may still be serving a majority: forcing another member now could split the cluster in two. " +
			"Once you have checked that those machines are down, declare them lost: annotate the EtcdCluster with " +
			etcdv1alpha1.AnnotationLostMembers + "=" + strings.Join(f.Unreachable, ",")}, true
}

// survivorPending holds a recovery from member while its pod waits for a node: its data, on its
// node's disk, cannot be copied before it runs there. If its node is gone it counts as stranded
// once the wait is over, and another survivor is chosen.
func survivorPending(o Observed, member, lostWhat string) (Step, bool) {
	m, ok := index(o.Members)[member]
	if !ok || m.UnscheduledSince.IsZero() {
		return Step{}, false
	}
	return Step{Action: Wait, Operation: OpQuorumLost, Member: member,
		Reason: "quorum is lost for good (" + lostWhat + "); the pod of member " + member + ", to recover from, has found no node yet: its data is read once it runs (" +
			m.PodProblem + "); if its node is gone, it counts as lost after " + o.Recovery.after().String() + " (spec.quorumLossRecovery.after) and another member is recovered from"}, true
}

// nodesLostLately holds the recovery for members on nodes that stopped answering, too few to
// serve a majority, until their nodes have been gone for the recovery's wait: a node rebooting
// or briefly cut off brings its member back with its data, which may hold writes the survivors
// lack. After that they are done without, as members whose pods found no node are; a person
// who checked that their machines are down can declare them lost sooner.
func nodesLostLately(o Observed, f Fates) (Step, bool) {
	byName := index(o.Members)
	lately := slices.DeleteFunc(slices.Clone(f.Unreachable), func(name string) bool { return outOfReachFor(byName[name].NodeLostSince, o) })
	if len(lately) == 0 {
		return Step{}, false
	}
	return Step{Action: Wait, Operation: OpQuorumLost, Members: lately,
		Reason: "quorum is lost, and the nodes of members " + strings.Join(lately, ", ") + " stopped answering less than " + o.Recovery.after().String() +
			" (spec.quorumLossRecovery.after) ago: their data may come back with them, so no recovery begins before then. " +
			"Once you have checked that those machines are down, declare them lost: annotate the EtcdCluster with " +
			etcdv1alpha1.AnnotationLostMembers + "=" + strings.Join(lately, ",")}, true
}

// lostMemberAnswered holds the recovery while any of the members it counts lost answers: its
// status call (with its raft index), or a probe at any address it is known by (any answer, even
// an error, says something runs there). A member counted lost that answers may hold the
// furthest log, or be part of a quorum the operator cannot see whole.
func lostMemberAnswered(o Observed, lost []string) (Step, bool) {
	byName := index(o.Members)
	var answered []string
	var where []string
	for _, name := range lost {
		m := byName[name]
		if m.Answering {
			where = append(where, "member "+name+" answered its status call (raft index "+strconv.FormatUint(m.RaftIndex, 10)+")")
		} else if m.Answered != "" {
			where = append(where, "member "+name+" at "+m.Answered)
		} else {
			continue
		}
		if m.PVCDeleting {
			where[len(where)-1] += ", its claim being deleted while its pod runs on it"
		}
		answered = append(answered, name)
	}
	if len(answered) == 0 {
		return Step{}, false
	}
	return Step{Action: Wait, Operation: OpQuorumLost, Members: answered,
		Reason: "members counted lost answered (" + strings.Join(where, "; ") + "): their etcd may be serving, or hold the furthest log, so no recovery step is taken while they answer. " +
			"If a declaration in " + etcdv1alpha1.AnnotationLostMembers + " names them, remove it; if their data is to go, stop their pods"}, true
}

// readLogs decides what to do about surviving members that report no raft index (a cluster
// with password authentication cannot authenticate anyone without a quorum; a member may crash
// as it starts): their logs are read from their data, as a member that answers would report
// it, so that the recovery builds on the one that reaches furthest, whichever can answer. A log
// that cannot be read is not guessed at: the user names the member to recover from.
func readLogs(o Observed, unread []string, lostWhat string) Step {
	byName := index(o.Members)
	var failed []string
	for _, name := range unread {
		if why := byName[name].LogUnreadable; why != "" {
			failed = append(failed, "member "+name+": "+why)
		}
	}
	if len(failed) > 0 {
		return Step{Action: Wait, Operation: OpQuorumLost, Members: unread,
			Reason: "quorum is lost for good (" + lostWhat + "), and how far the log of a survivor reaches cannot be read from its data (" +
				strings.Join(failed, "; ") + "): name the member to recover from with the annotation " + etcdv1alpha1.AnnotationRecoverFrom}
	}
	return Step{Action: ReadLogs, Operation: OpQuorumLost, Members: unread,
		Reason: "quorum is lost for good (" + lostWhat + "); members " + strings.Join(unread, ", ") +
			" do not answer: reading how far their logs reach from their data, to recover from the most recent"}
}

// Fates sorts the last voters of a lost quorum by what is known of their etcd.
type Fates struct {
	// Survivors: their data is here to read, and their pods run or can run.
	Survivors []string
	// Forsaken: the forced member of a recovery given up before it served (Recovery.Forsaken).
	// Its data, a history of its own that acknowledged no write, may be recovered from again,
	// but it never rejoins the others: it is no survivor towards their quorum.
	Forsaken []string
	// Lost: their claims are gone, and with them their data.
	Lost []string
	// Stranded: their pods have found no node for the recovery's wait (their volumes' node is
	// gone), or a person declared them lost. Their claims are kept: they may hold writes the
	// survivors lack.
	Stranded []string
	// Unreachable: their pods sit on nodes that stopped answering the API server. That is no
	// evidence that their etcd stopped, so they are not counted lost.
	Unreachable []string
	// Corrupt: their data diverged from the others' (Member.Corrupt). It is kept, never
	// recovered from, and never restarted.
	Corrupt []string
}

// candidates are the members a recovery may build on: the survivors, and a forsaken member.
func (f Fates) candidates() []string { return slices.Concat(f.Survivors, f.Forsaken) }

// countedLost are the members a recovery does without on evidence: lost and stranded.
func (f Fates) countedLost() []string { return slices.Concat(f.Lost, f.Stranded) }

// DoneWithout are the members a recovery from member does without: every last member but
// member (every one, from a backup), learners included. A survivor not chosen is done without
// too: its pod is stopped before the force like the others', and its claim kept, as it may hold
// writes the chosen one lacks (the user may name a survivor whose log is shorter); so is a
// learner, whose log may reach further than any surviving voter's.
//
// earlier are the members done without by the recovery whose record this one replaces: those
// whose claims are still the cluster's stay done without (their claims kept, their pods never
// made again), as they may hold writes the new survivor lacks; those whose claims are gone, or
// were released, have nothing left to keep and are not lost again.
func DoneWithout(o Observed, member string, earlier []string) []string {
	lost := slices.DeleteFunc(slices.Clone(o.LastMembers), func(name string) bool { return name == member })
	byName := index(o.Members)
	for _, name := range earlier {
		m, seen := byName[name]
		claimHeld := seen && (m.PVCExists || m.PVCDeleting)
		if claimHeld && name != member && !slices.Contains(lost, name) {
			lost = append(lost, name)
		}
	}
	return lost
}

// VotersByFate sorts the last voters for a lost quorum (Fates). A person's declaration comes
// first; a node that stopped answering comes before a claim that is gone, as a claim is only
// released once its pod is confirmed ended, which no kubelet confirms from such a node.
func VotersByFate(o Observed) Fates {
	byName := index(o.Members)
	var f Fates
	for _, name := range o.LastVoters {
		m := byName[name]
		forsaken := name == o.Recovery.Forsaken
		corrupt := m.Corrupt != ""
		switch {
		case m.DeclaredLost:
			f.Stranded = append(f.Stranded, name)
		case !m.NodeLostSince.IsZero():
			f.Unreachable = append(f.Unreachable, name)
		case !m.PVCExists:
			f.Lost = append(f.Lost, name)
		case corrupt:
			f.Corrupt = append(f.Corrupt, name)
		case forsaken:
			f.Forsaken = append(f.Forsaken, name)
		case outOfReachFor(m.UnscheduledSince, o):
			f.Stranded = append(f.Stranded, name)
		default:
			f.Survivors = append(f.Survivors, name)
		}
	}
	return f
}

// outOfReachFor says whether a member out of reach since since has been for the recovery's wait.
func outOfReachFor(since time.Time, o Observed) bool {
	return !since.IsZero() && o.Now.Sub(since) >= o.Recovery.after()
}

// lostWhat says which members the quorum was lost with, and why each counts as lost.
func (f Fates) lostWhat(o Observed) string {
	byName := index(o.Members)
	var declared, noNode []string
	for _, name := range f.Stranded {
		if byName[name].DeclaredLost {
			declared = append(declared, name)
		} else {
			noNode = append(noNode, name)
		}
	}
	var why []string
	var deleting, gone []string
	for _, name := range f.Lost {
		if byName[name].PVCDeleting {
			deleting = append(deleting, name)
		} else {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		why = append(why, "members "+strings.Join(gone, ", ")+" lost their data")
	}
	if len(deleting) > 0 {
		why = append(why, "the claims of members "+strings.Join(deleting, ", ")+" are being deleted")
	}
	if len(noNode) > 0 {
		why = append(why, "the pods of members "+strings.Join(noNode, ", ")+" have found no node for "+o.Recovery.after().String()+
			" (spec.quorumLossRecovery.after): their volumes' nodes may be gone")
	}
	if len(declared) > 0 {
		why = append(why, "members "+strings.Join(declared, ", ")+" were declared lost ("+etcdv1alpha1.AnnotationLostMembers+")")
	}
	if len(f.Unreachable) > 0 {
		why = append(why, "the nodes of members "+strings.Join(f.Unreachable, ", ")+" stopped answering")
	}
	if len(f.Forsaken) > 0 {
		why = append(why, "the recovery from member "+strings.Join(f.Forsaken, ", ")+" was given up after its forced start")
	}
	if len(f.Corrupt) > 0 {
		why = append(why, "members "+strings.Join(f.Corrupt, ", ")+" were found corrupt")
	}
	return strings.Join(why, "; ")
}

// recoverFromBackup decides the recovery of a cluster whose every member lost its data: only a
// backup holds it. With policy FromLatestBackup the newest completed snapshot of the cluster's
// EtcdBackups is restored in place; otherwise the user is told how.
func recoverFromBackup(o Observed) (Step, bool) {
	const lostAll = "quorum is lost for good: every member lost its data"
	r := o.Recovery
	if !r.FromBackup {
		return Step{Action: Wait, Operation: OpQuorumLost,
			Reason: lostAll + "; restore the cluster from a backup (an EtcdRestore of mode InPlace), or set spec.quorumLossRecovery.policy FromLatestBackup"}, true
	}
	if r.LatestBackup == "" {
		return Step{Action: Wait, Operation: OpQuorumLost,
			Reason: lostAll + ", and no EtcdBackup of this cluster has a completed snapshot to restore; restore one from elsewhere with an EtcdRestore of mode InPlace (spec.source.location)"}, true
	}
	if wait := r.LostSince.Add(r.after()).Sub(o.Now); wait > 0 {
		return Step{Action: Wait, Operation: OpQuorumLost, Backup: r.LatestBackup,
			Reason: lostAll + "; restoring EtcdBackup " + r.LatestBackup + "'s newest snapshot once quorum has been lost for " +
				r.after().String() + " (spec.quorumLossRecovery.after)"}, true
	}
	return Step{Action: BeginRecovery, Backup: r.LatestBackup, Operation: OpRecoveringQuorum,
		Reason: lostAll + "; restoring the cluster in place from EtcdBackup " + r.LatestBackup + "'s newest snapshot"}, true
}

// continueRecovery carries a recovery under way through from its member, whatever is observed
// of the others: a copy of its data first, then the members it does without are fenced (their
// pods stopped), then its restart alone with --force-new-cluster. Every step is held while a
// member it does without answers a probe. Once it has served alone, the recovery's rewriting is
// over and the usual steps take over. A recovery from a backup is carried through by its
// EtcdRestore.
func continueRecovery(o Observed) (Step, bool) {
	r := o.Recovery
	if r.Served {
		return Step{}, false
	}
	if r.UnderwayRestore == "" && r.Underway == "" {
		return Step{}, false
	}
	// Members it does without whose data survives (a survivor not chosen, a corrupt member) are
	// fenced, not waited for: the others hold every step while they answer.
	// Learners are not counted lost: one that answers is fenced too, unless its log reaches
	// further (furtherLogAnswers).
	f := VotersByFate(o)
	countedLost := slices.DeleteFunc(slices.Clone(r.DoneWithout), func(name string) bool {
		return slices.Contains(f.Survivors, name) || slices.Contains(f.Corrupt, name) || !slices.Contains(o.LastVoters, name)
	})
	if step, ok := lostMemberAnswered(o, countedLost); ok {
		step.Operation = OpRecoveringQuorum
		return step, true
	}
	if !r.Forced {
		if step, ok := leaderFollowed(o); ok {
			step.Operation = OpRecoveringQuorum
			return step, true
		}
		if step, ok := outOfSightMayBeAQuorum(o, f, f.lostWhat(o)); ok {
			step.Operation = OpRecoveringQuorum
			return step, true
		}
	}
	// A restore from a backup replaces every member's data: a log further than none is no
	// reason to give it up.
	if !r.Forced && r.UnderwayRestore == "" {
		if step, ok := furtherLogAnswers(o); ok {
			return step, true
		}
	}
	if r.UnderwayRestore != "" {
		if !r.RestoreExists {
			return Step{Action: RestoreFromBackup, Operation: OpRecoveringQuorum,
				Reason: "restoring the cluster in place from its newest backup (EtcdRestore " + r.UnderwayRestore + ")"}, true
		}
		return Step{Action: Wait, Operation: OpRecoveringQuorum,
			Reason: "EtcdRestore " + r.UnderwayRestore + " restores the cluster from its newest backup; its status says how far it has gone"}, true
	}
	m, ok := index(o.Members)[r.Underway]
	declaredAndSilent := m.DeclaredLost && !m.Answering && m.Answered == ""
	// Forced on a node that stopped answering, a member may serve there: the wait below holds,
	// as for any such member, corrupt or not.
	corruptHere := m.Corrupt != "" && (!m.ForcedNewCluster || !m.PodExists || m.NodeLostSince.IsZero())
	switch {
	case !ok || !m.PVCExists:
		// Its data is gone: the recovery cannot go on, and waiting on its record would hold
		// every later decision. Another survivor, or a backup, may still serve.
		return Step{Action: AbandonRecovery, Member: r.Underway, Operation: OpQuorumLost,
			Reason: "the claim of member " + r.Underway + ", which the recovery under way builds on, is gone: the recovery is given up, and the loss decided afresh"}, true
	case corruptHere:
		// Its data diverged from the others': nothing may be built on it. Forced already, it
		// is given up like any forced member that has not served: it never runs on that data
		// again.
		return Step{Action: AbandonRecovery, Member: r.Underway, Operation: OpQuorumLost,
			Reason: "member " + r.Underway + ", which the recovery under way builds on, was found corrupt (" + m.Corrupt +
				"): the recovery is given up, and the loss decided afresh"}, true
	case declaredAndSilent:
		// A person checked that its machine is down: even forced, it serves nowhere.
		return Step{Action: AbandonRecovery, Member: r.Underway, Operation: OpQuorumLost,
			Reason: "member " + r.Underway + ", which the recovery under way builds on, was declared lost (" + etcdv1alpha1.AnnotationLostMembers +
				"): the recovery is given up, and the loss decided afresh"}, true
	case !r.Forced && (outOfReachFor(m.NodeLostSince, o) || outOfReachFor(m.UnscheduledSince, o)):
		// Its data cannot be copied while its node is gone, and it has not been forced: no
		// cluster of its own can be serving. Another survivor, or its node's return, may serve.
		return Step{Action: AbandonRecovery, Member: r.Underway, Operation: OpQuorumLost,
			Reason: "member " + r.Underway + ", which the recovery under way builds on, has been out of reach for " + o.Recovery.after().String() +
				" (its node stopped answering, or its pod found no node) before it was forced: the recovery is given up, and the loss decided afresh"}, true
	case m.ForcedNewCluster && m.PodExists && outOfReachFor(m.UnscheduledSince, o):
		// Its forced pod has found no node: it never ran, so no cluster of its own serves.
		return Step{Action: AbandonRecovery, Member: r.Underway, Unforced: true, Operation: OpQuorumLost,
			Reason: "the forced pod of member " + r.Underway + ", which the recovery under way builds on, has found no node for " + o.Recovery.after().String() +
				": it never ran; the recovery is given up, and the loss decided afresh"}, true
	case m.ForcedNewCluster && m.PodExists && !m.NodeLostSince.IsZero():
		return Step{Action: Wait, Member: r.Underway, Operation: OpRecoveringQuorum,
			Reason: "the node of member " + r.Underway + " stopped answering after it was forced: it may serve there as a cluster of its own, so no other member is recovered from. " +
				"Once you have checked that its machine is down, declare it lost to recover from another: annotate the EtcdCluster with " +
				etcdv1alpha1.AnnotationLostMembers + "=" + r.Underway}, true
	case m.ForcedNewCluster && m.PodExists:
		return Step{Action: Wait, Member: r.Underway, Operation: OpRecoveringQuorum,
			Reason: "the member restarts as a cluster of its own from its data"}, true
	case !r.Preserved:
		return Step{Action: PreserveData, Member: r.Underway, Operation: OpRecoveringQuorum,
			Reason: "stopping member " + r.Underway + " and keeping a copy of its data before it is rewritten"}, true
	}
	forced := names(o.Members, func(x Member) bool {
		return x.ForcedNewCluster && x.PodExists && !x.DeclaredLost && x.Name != r.Underway
	})
	if len(forced) > 0 {
		return Step{Action: Wait, Members: forced, Operation: OpRecoveringQuorum,
			Reason: "another member runs forced as a cluster of its own: member " + r.Underway + " is not forced beside it"}, true
	}
	byName := index(o.Members)
	unfenced := slices.DeleteFunc(slices.Clone(r.DoneWithout), func(name string) bool {
		return fenced(byName[name])
	})
	if len(unfenced) > 0 {
		return Step{Action: FenceMembers, Members: unfenced, Operation: OpRecoveringQuorum,
			Reason: "stopping the pods of the members the recovery does without, and taking them out of the client Service, before member " + r.Underway + " is forced: none of them may serve beside it"}, true
	}
	stopping := slices.DeleteFunc(slices.Clone(r.DoneWithout), func(name string) bool {
		return !byName[name].PodExists || kubeletSilent(byName[name], o.Now)
	})
	if len(stopping) > 0 {
		return Step{Action: Wait, Members: stopping, Operation: OpRecoveringQuorum,
			Reason: "waiting for the pods of members " + strings.Join(stopping, ", ") + " to stop before member " + r.Underway + " is forced: their kubelets answer, so their etcd is seen stopped first"}, true
	}
	return Step{Action: ForceNewCluster, Member: r.Underway, Operation: OpRecoveringQuorum,
		Reason: "restarting member " + r.Underway + " alone with its data (--force-new-cluster)"}, true
}

// furtherLogAnswers gives up a recovery not yet forced when a member it does without answers
// with a log further than its member's was when it began, or when that was not known (it was the
// only member left to build on): a member counted lost whose node came back, say. The loss is
// decided afresh, on what is known now. A member the user named is theirs to choose, whatever
// its log.
func furtherLogAnswers(o Observed) (Step, bool) {
	r := o.Recovery
	if r.Named {
		return Step{}, false
	}
	byName := index(o.Members)
	for _, name := range r.DoneWithout {
		if m := byName[name]; m.Answering && m.RaftIndex > r.UnderwayIndex {
			return Step{Action: AbandonRecovery, Member: r.Underway, Operation: OpQuorumLost,
				Reason: "member " + name + ", which the recovery under way does without, answers with its log at " + strconv.FormatUint(m.RaftIndex, 10) +
					", further than member " + r.Underway + "'s when it began (" + strconv.FormatUint(r.UnderwayIndex, 10) + ", 0 if not known): the recovery is given up, and the loss decided afresh"}, true
		}
	}
	return Step{}, false
}

// furthestLog is the member among names with the highest committed raft index, and those that
// did not report one (their pod does not run, or etcd does not answer).
func furthestLog(members []Member, candidates []string) (best string, unread []string) {
	var bestIndex uint64
	byName := index(members)
	for _, name := range candidates {
		m := byName[name]
		if m.RaftIndex == 0 {
			unread = append(unread, name)
			continue
		}
		if best == "" || m.RaftIndex > bestIndex {
			best, bestIndex = name, m.RaftIndex
		}
	}
	if best == "" {
		best = candidates[0]
	}
	return best, unread
}

// fenced: a member the recovery does without can serve no client of the forced cluster. Its
// pod is gone, or is being deleted and out of the client Service's selection.
func fenced(m Member) bool {
	return !m.PodExists || (m.PodTerminating && m.PodFenced)
}

// stopOverdue is how long past its deletion timestamp a pod must still be there for its
// kubelet to count as not answering: a kubelet that answers ends a pod within its grace period,
// and reports it within seconds more.
const stopOverdue = 30 * time.Second

// kubeletSilent: nothing will confirm that the pod of m, being deleted, has stopped: its node
// stopped answering (the pod was evicted for it), or the pod is overdue. Its etcd may run on
// there; the fence keeps it from the clients of the forced cluster, and the person or the
// evidence that counted it lost says it is down. Where the kubelet answers, the force waits
// for the pod to be gone: its etcd is then seen stopped, not assumed so.
func kubeletSilent(m Member, now time.Time) bool {
	return !m.NodeLostSince.IsZero() || (!m.PodStopDue.IsZero() && now.After(m.PodStopDue.Add(stopOverdue)))
}
