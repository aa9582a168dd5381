package membership

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Properties of Next over random observed states: what the invariants at the top of decide.go
// promise for every state, not only for the tables' cases. rapid reports the smallest state
// that breaks one.

// checkRounds is how many times each property runs rapid's draws (-rapid.checks, 100 by
// default), each from a fresh seed: the steps a property is about (a removal, a recovery) come
// out of a few percent of random states, and 2,000 states take a fraction of a second.
const checkRounds = 20

func check(t *testing.T, prop func(*rapid.T)) {
	for range checkRounds {
		rapid.Check(t, prop)
	}
}

// oneIn draws true once in n: the facts that stop most steps (a restore, a forced member, a
// defragmentation) are drawn seldom, so that the steps behind them are reached too.
func oneIn(t *rapid.T, n int, label string) bool { return rapid.IntRange(1, n).Draw(t, label) == n }

// drawMember draws one member: what etcd, the pod and the claim say, each independently, as
// the reconciler may observe them at different moments. inEtcdOneIn is how seldom etcd does
// not list it.
func drawMember(t *rapid.T, name string, id uint64, notInEtcdOneIn int) Member {
	label := func(field string) string { return name + "." + field }
	m := Member{Name: name}
	if !oneIn(t, notInEtcdOneIn, label("notInEtcd")) {
		m.ID = id
	}
	m.Started = !oneIn(t, 5, label("notStarted"))
	m.IsLearner = oneIn(t, 4, label("learner"))
	m.Healthy = !oneIn(t, 3, label("unhealthy"))
	m.Version = rapid.SampledFrom([]string{"", "3.6.16", "3.7.3"}).Draw(t, label("version"))
	m.RaftIndex = rapid.SampledFrom([]uint64{0, 90, 100, 120}).Draw(t, label("raftIndex"))
	m.DBSizeBytes = rapid.SampledFrom([]int64{0, 100, 400, 1000}).Draw(t, label("dbSize"))
	m.DBSizeInUseBytes = m.DBSizeBytes * rapid.Int64Range(0, 10).Draw(t, label("inUseTenths")) / 10
	m.PodExists = !oneIn(t, 6, label("noPod"))
	m.PodTerminating = m.PodExists && oneIn(t, 8, label("terminating"))
	m.PodCreated = t0.Add(time.Duration(rapid.IntRange(0, 10).Draw(t, label("podCreatedMin"))) * time.Minute)
	m.PodVersion = rapid.SampledFrom([]string{"3.6.16", "3.6.16", "3.7.3"}).Draw(t, label("podVersion"))
	if oneIn(t, 5, label("unscheduled")) {
		m.UnscheduledSince = t0.Add(-time.Duration(rapid.IntRange(0, 20).Draw(t, label("unscheduledMin"))) * time.Minute)
	}
	if oneIn(t, 8, label("nodeLost")) {
		m.NodeLostSince = t0.Add(-time.Duration(rapid.IntRange(0, 20).Draw(t, label("nodeLostMin"))) * time.Minute)
	}
	if oneIn(t, 5, label("podProblem")) {
		m.PodProblem = "ImagePullBackOff"
	}
	m.PodOutdated = oneIn(t, 8, label("outdated"))
	m.PodSpecUnrecorded = oneIn(t, 10, label("unrecorded"))
	m.PVCExists = !oneIn(t, 6, label("noPVC"))
	m.ForcedNewCluster = oneIn(t, 20, label("forced"))
	m.PVCUnboundOutdated = oneIn(t, 10, label("pvcUnboundOutdated"))
	m.PVCTooSmall = oneIn(t, 10, label("pvcTooSmall"))
	if oneIn(t, 5, label("logUnreadable")) {
		m.LogUnreadable = "no WAL file"
	}
	m.Answering = rapid.Bool().Draw(t, label("answering"))
	if oneIn(t, 6, label("answered")) {
		m.Answered = "10.0.0.9:2380"
	}
	m.DeclaredLost = oneIn(t, 8, label("declaredLost"))
	m.InitialClusterStale = oneIn(t, 8, label("initialClusterStale"))
	return m
}

// drawObserved draws a cluster of up to six members. reachable says whether etcd answers:
// true or false fixes it, nil draws it too.
func drawObserved(t *rapid.T, reachable *bool) Observed {
	o := Observed{Now: t0.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "nowMin")) * time.Minute)}
	if reachable != nil {
		o.Reachable = *reachable
	} else {
		o.Reachable = rapid.Bool().Draw(t, "reachable")
	}
	o.EverFormed = o.Reachable || !oneIn(t, 4, "neverFormed")
	// Without an answer from etcd the reconciler knows no member IDs.
	notInEtcdOneIn := 8
	if !o.Reachable {
		notInEtcdOneIn = 1
	}
	var names []string
	for i := range rapid.IntRange(0, 6).Draw(t, "members") {
		name := "m" + strconv.Itoa(i)
		names = append(names, name)
		o.Members = append(o.Members, drawMember(t, name, uint64(i+1), notInEtcdOneIn))
	}
	if len(o.Members) > 0 {
		leaderIndex := rapid.IntRange(-1, len(o.Members)-1).Draw(t, "leader")
		if leaderIndex >= 0 && o.Members[leaderIndex].InEtcd() {
			o.Members[leaderIndex].IsLeader = true
		}
	}
	// The last voters: some of the members, and members of which nothing is left.
	for _, name := range append(slices.Clone(names), "gone0", "gone1") {
		if !oneIn(t, 3, "notLastVoter."+name) {
			o.LastVoters = append(o.LastVoters, name)
		}
	}
	if !o.EverFormed && rapid.Bool().Draw(t, "bootstrapPlanned") {
		o.BootstrapPlan = slices.Clone(names)
	}
	seldomName := func(label string) string {
		if !oneIn(t, 6, label) {
			return ""
		}
		return rapid.SampledFrom(append([]string{"gone0"}, names...)).Draw(t, label+"Name")
	}
	o.DesiredSize = max(1, count(o.Members, Member.InEtcd)+rapid.IntRange(-2, 2).Draw(t, "desiredSizeDelta"))
	o.DesiredVersion = rapid.SampledFrom([]string{"3.6.16", "3.6.16", "3.7.3"}).Draw(t, "desiredVersion")
	o.DataSurvivesPod = !oneIn(t, 5, "ephemeral")
	o.Paused = oneIn(t, 20, "paused")
	o.RestoreSeed = seldomName("restoreSeed")
	if o.RestoreSeed != "" && rapid.Bool().Draw(t, "restoredTogether") {
		// The seed's claim plans the members restored with it, some of the others.
		o.BootstrapPlan = []string{o.RestoreSeed}
		for _, name := range names {
			if name != o.RestoreSeed && rapid.Bool().Draw(t, "restored."+name) {
				o.BootstrapPlan = append(o.BootstrapPlan, name)
			}
		}
	}
	if oneIn(t, 10, "awaitingRestore") {
		o.AwaitingRestore = "r"
	}
	o.AuthPending = oneIn(t, 6, "authPending")
	o.RootPasswordOutdated = oneIn(t, 20, "rootPasswordOutdated")
	o.Defragmenting = seldomName("defragmenting")
	o.Defrag = DefragPolicy{Enabled: oneIn(t, 3, "defrag"), ThresholdPercent: 50, MinBytes: 100}
	o.NoSpaceAlarm = oneIn(t, 6, "noSpace")
	o.QuotaBytes = rapid.SampledFrom([]int64{0, 1000}).Draw(t, "quota")
	r := &o.Recovery
	r.Automatic = rapid.Bool().Draw(t, "automatic")
	r.FromBackup = r.Automatic && rapid.Bool().Draw(t, "fromBackup")
	r.LatestBackup = rapid.SampledFrom([]string{"", "nightly"}).Draw(t, "latestBackup")
	r.After = time.Duration(rapid.SampledFrom([]int{0, 10}).Draw(t, "afterMin")) * time.Minute
	r.LostSince = t0.Add(time.Duration(rapid.IntRange(-20, 20).Draw(t, "lostSinceMin")) * time.Minute)
	r.From = seldomName("recoverFrom")
	r.Underway = seldomName("underway")
	r.Preserved = r.Underway != "" && rapid.Bool().Draw(t, "preserved")
	r.Served = oneIn(t, 6, "served")
	for _, name := range o.LastVoters {
		if r.Underway != name && rapid.Bool().Draw(t, "doneWithout."+name) {
			r.DoneWithout = append(r.DoneWithout, name)
		}
	}
	if oneIn(t, 8, "underwayRestore") {
		r.UnderwayRestore = "recovery-restore"
		r.RestoreExists = rapid.Bool().Draw(t, "restoreExists")
	}
	return o
}

var (
	answering    = true
	notAnswering = false
)

// membershipChanges are the steps that change etcd's member list.
var membershipChanges = []Action{AddLearner, PromoteLearner, RemoveMember}

// checkNamedMember fails unless the step acts on one member, by the name and ID etcd lists it
// under.
func checkNamedMember(t *rapid.T, o Observed, step Step) Member {
	m, ok := index(o.Members)[step.Member]
	if !ok || !m.InEtcd() || m.ID != step.MemberID || len(step.Members) > 0 {
		t.Fatalf("%s must act on one member etcd lists, by its ID: %+v", step.Action, step)
	}
	return m
}

// Never a step that leaves fewer healthy voters than a quorum of the voters that remain: a
// voter is removed only if the healthy voters left are a quorum of the voters left; a
// learner's removal leaves the voters as they are.
func TestPropertyRemovalKeepsAQuorumOfHealthyVoters(t *testing.T) {
	check(t, func(t *rapid.T) {
		o := drawObserved(t, &answering)
		step := Next(o)
		if step.Action != RemoveMember {
			return
		}
		removed := checkNamedMember(t, o, step)
		if removed.IsLearner {
			return
		}
		votersLeft := filter(o.Members, func(m Member) bool { return m.InEtcd() && !m.IsLearner && m.Name != removed.Name })
		healthyLeft := count(votersLeft, func(m Member) bool { return m.Healthy })
		if len(votersLeft) == 0 || healthyLeft < Quorum(len(votersLeft)) {
			t.Fatalf("%s leaves %d healthy of %d voters, fewer than a quorum", step.Reason, healthyLeft, len(votersLeft))
		}
	})
}

// At most one membership change per step, and one at a time: a step changes one member, a
// learner is added only while etcd lists no other learner and every member is healthy, and
// no member is added beyond the desired size.
func TestPropertyOneMembershipChangeAtATime(t *testing.T) {
	check(t, func(t *rapid.T) {
		reachable := rapid.IntRange(0, 3).Draw(t, "reachableMostly") > 0
		o := drawObserved(t, &reachable)
		step := Next(o)
		if !slices.Contains(membershipChanges, step.Action) {
			return
		}
		if !o.Reachable {
			t.Fatalf("%s while etcd does not answer", step.Action)
		}
		if step.Action != AddLearner {
			checkNamedMember(t, o, step)
			return
		}
		inEtcd := filter(o.Members, Member.InEtcd)
		if slices.ContainsFunc(inEtcd, func(m Member) bool { return m.IsLearner }) {
			t.Fatalf("a learner added while etcd lists another")
		}
		if slices.ContainsFunc(inEtcd, func(m Member) bool { return !m.Healthy }) {
			t.Fatalf("a learner added while a member is unhealthy")
		}
		if len(inEtcd) >= o.DesiredSize {
			t.Fatalf("a learner added to %d members, desired %d", len(inEtcd), o.DesiredSize)
		}
	})
}

// A learner is promoted only once it has started and its pod exists (before, it is waited
// for, or removed), and only when, voting, the healthy voters are still a quorum; how far its
// log is behind is etcd's to refuse, as the decision does not see it for learners.
func TestPropertyLearnerPromotedOnlyOnceStarted(t *testing.T) {
	check(t, func(t *rapid.T) {
		o := drawObserved(t, &answering)
		step := Next(o)
		if step.Action != PromoteLearner {
			return
		}
		m := checkNamedMember(t, o, step)
		if !m.IsLearner || !m.Started || !m.PodExists {
			t.Fatalf("promoted %+v: not a learner that started with its pod", m)
		}
		voters := filter(o.Members, func(x Member) bool { return x.InEtcd() && (!x.IsLearner || x.Name == m.Name) })
		if healthy := count(voters, func(x Member) bool { return x.Healthy }); healthy < Quorum(len(voters)) {
			t.Fatalf("promoted %s: %d healthy of %d voters then, fewer than a quorum", m.Name, healthy, len(voters))
		}
	})
}

// No data is rewritten while etcd answers: a recovery (from a member or a backup) never begins
// or goes on, and a restore from a backup never starts, while a quorum serves. An in-place
// restore, the user's, starts its seed alone: only once no other member's pod is left.
func TestPropertyNoRestoreOverDataWhileReachable(t *testing.T) {
	check(t, func(t *rapid.T) {
		o := drawObserved(t, nil)
		step := Next(o)
		switch step.Action {
		case RestoreFromBackup, BeginRecovery, PreserveData, ForceNewCluster, ReadLogs:
			if o.Reachable {
				t.Fatalf("%s while etcd answers", step.Action)
			}
		case Bootstrap:
			if o.EverFormed {
				t.Fatalf("a cluster that once formed bootstrapped again")
			}
		case CreateBootstrapMembers:
			if !o.EverFormed {
				return
			}
			// The restored members: those the seed's claim plans, or the seed alone.
			restored := []string{o.RestoreSeed}
			if slices.Contains(o.BootstrapPlan, o.RestoreSeed) {
				restored = o.BootstrapPlan
			}
			notRestored := func(name string) bool { return !slices.Contains(restored, name) }
			if o.RestoreSeed == "" || len(step.Members) == 0 || slices.ContainsFunc(step.Members, notRestored) {
				t.Fatalf("a formed cluster's bootstrap members created, not restored members (%v): %+v", restored, step)
			}
			// Only a pod on a node that stopped answering may be left: it never ends, and the
			// restored members form a cluster it cannot join.
			if running := names(o.Members, func(m Member) bool {
				return m.PodExists && notRestored(m.Name) && (m.NodeLostSince.IsZero() || !m.PodTerminating)
			}); len(running) > 0 {
				t.Fatalf("the restored members start while the pods of %v are left", running)
			}
			if unclaimed := names(o.Members, func(m Member) bool { return !notRestored(m.Name) && !m.PVCExists }); len(unclaimed) > 0 {
				t.Fatalf("the restored members start before the claims of %v are theirs", unclaimed)
			}
			if missing := slices.DeleteFunc(slices.Clone(restored), func(name string) bool {
				return slices.ContainsFunc(o.Members, func(m Member) bool { return m.Name == name })
			}); len(missing) > 0 {
				t.Fatalf("the restored members start before the claims of %v are theirs", missing)
			}
		}
		if step.Action == BeginRecovery && step.Backup != "" {
			if withData := names(o.Members, func(m Member) bool { return m.PVCExists && slices.Contains(o.LastVoters, m.Name) }); len(withData) > 0 {
				t.Fatalf("a restore from backup %s begins over the data of %v", step.Backup, withData)
			}
		}
	})
}

// Quorum lost for good is recovered only while etcd does not answer, only when fewer of the
// last voters than a quorum can be read, only with the policy's leave after
// spec.quorumLossRecovery.after or the user's, from the survivor whose log reaches furthest (or
// the user's choice), and never while a member runs forced.
func TestPropertyNoForcedRecoveryWhileReachable(t *testing.T) {
	check(t, func(t *rapid.T) {
		reachable := rapid.IntRange(0, 4).Draw(t, "reachableSometimes") == 0
		o := drawObserved(t, &reachable)
		checkRecoveryStep(t, o, Next(o))
	})
}

// checkRecoveryStep fails unless a recovery step keeps the recovery's guards.
func checkRecoveryStep(t *rapid.T, o Observed, step Step) {
	switch step.Action {
	case BeginRecovery, ForceNewCluster, PreserveData, FenceMembers, RestoreFromBackup, ReadLogs:
	default:
		return
	}
	if o.Reachable {
		t.Fatalf("%s while etcd answers", step.Action)
	}
	byName := index(o.Members)
	switch step.Action {
	case PreserveData, FenceMembers, ForceNewCluster, RestoreFromBackup:
		// A survivor not chosen is fenced, not waited for; any other member done without holds
		// every step while it answers.
		survivors := VotersByFate(o).Survivors
		for _, name := range o.Recovery.DoneWithout {
			if m := byName[name]; !slices.Contains(survivors, name) && (m.Answered != "" || m.Answering) {
				t.Fatalf("%s while %s, which the recovery does without, answers (at %q)", step.Action, name, m.Answered)
			}
		}
	}
	if step.Action == ForceNewCluster {
		r := o.Recovery
		if step.Member != r.Underway || !r.Preserved {
			t.Fatalf("forced %s, not the recovery's member %q with its data kept (preserved %v)", step.Member, r.Underway, r.Preserved)
		}
		for _, m := range o.Members {
			if m.ForcedNewCluster && m.PodExists && !m.DeclaredLost {
				t.Fatalf("forced %s while %s runs forced", step.Member, m.Name)
			}
		}
		for _, name := range r.DoneWithout {
			if m := byName[name]; m.PodExists && !m.PodTerminating {
				t.Fatalf("forced %s while the pod of %s, which the recovery does without, is not stopped", step.Member, name)
			}
		}
	}
	if step.Action != BeginRecovery && step.Action != ReadLogs {
		return
	}
	// Counted lost only on evidence: a claim gone, a pod without a node for the wait, or a
	// person's declaration; a node that stopped answering is none. None of those answers, and
	// the members out of sight (nodes that stopped answering, survivors that run silent) are
	// too few for a quorum.
	after := max(o.Recovery.After, MinRecoveryAfter)
	var outOfSight []string
	for _, name := range o.LastVoters {
		m := byName[name]
		nodeLost := !m.NodeLostSince.IsZero() && !m.DeclaredLost
		evidence := m.DeclaredLost || (!nodeLost && (!m.PVCExists || (!m.UnscheduledSince.IsZero() && o.Now.Sub(m.UnscheduledSince) >= after)))
		if evidence && m.Answered != "" {
			t.Fatalf("%s while %s, counted lost, answers at %s", step.Action, name, m.Answered)
		}
		if nodeLost || (!evidence && m.PodExists && !m.Answering) {
			outOfSight = append(outOfSight, name)
		}
	}
	if slices.ContainsFunc(outOfSight, func(name string) bool { return !byName[name].NodeLostSince.IsZero() }) && len(outOfSight) >= Quorum(len(o.LastVoters)) {
		t.Fatalf("%s while %v, out of sight, could be a quorum of %v", step.Action, outOfSight, o.LastVoters)
	}
	if step.Action != BeginRecovery {
		return
	}
	if o.AwaitingRestore != "" {
		t.Fatalf("a recovery begins while EtcdRestore %s restores in place", o.AwaitingRestore)
	}
	// Members whose data is surely in reach: a claim, and a pod neither waiting for a node
	// nor on a node that stopped answering. Fewer than a quorum, or waiting would do.
	var readable []Member
	for _, name := range o.LastVoters {
		if m := byName[name]; m.PVCExists && m.UnscheduledSince.IsZero() && m.NodeLostSince.IsZero() && !m.DeclaredLost {
			readable = append(readable, m)
		}
	}
	if len(readable) >= Quorum(len(o.LastVoters)) {
		t.Fatalf("a recovery begins while %d of %d last voters have their data in reach", len(readable), len(o.LastVoters))
	}
	if step.Backup != "" {
		return
	}
	if o.Recovery.From != "" {
		if step.Member != o.Recovery.From {
			t.Fatalf("recovering from %s, not %s as the user named", step.Member, o.Recovery.From)
		}
		return
	}
	if !o.Recovery.Automatic || o.Now.Before(o.Recovery.LostSince.Add(after)) {
		t.Fatalf("an automatic recovery without the policy's leave (automatic %v, lost since %v, after %v, now %v)",
			o.Recovery.Automatic, o.Recovery.LostSince, o.Recovery.After, o.Now)
	}
	chosen := byName[step.Member]
	for _, m := range readable {
		if m.RaftIndex > chosen.RaftIndex {
			t.Fatalf("recovering from %s (raft index %d), while %s's log reaches %d", chosen.Name, chosen.RaftIndex, m.Name, m.RaftIndex)
		}
	}
}

// drawLostQuorum draws a formed cluster whose etcd does not answer, with persistent storage and
// nothing else under way: the states a quorum-loss recovery decides on, which drawObserved
// reaches only seldom. Every member is a last voter, each with its own fate.
func drawLostQuorum(t *rapid.T) Observed {
	o := drawObserved(t, &notAnswering)
	o.EverFormed, o.DataSurvivesPod, o.Paused = true, true, false
	o.RestoreSeed, o.AwaitingRestore, o.BootstrapPlan = "", "", nil
	o.LastVoters = nil
	for i := range o.Members {
		m := &o.Members[i]
		o.LastVoters = append(o.LastVoters, m.Name)
		m.ForcedNewCluster = oneIn(t, 6, m.Name+".forcedOften")
	}
	o.Recovery.DoneWithout = nil
	for _, name := range o.LastVoters {
		if name != o.Recovery.Underway && rapid.Bool().Draw(t, "doneWithoutOften."+name) {
			o.Recovery.DoneWithout = append(o.Recovery.DoneWithout, name)
		}
	}
	if o.Recovery.Underway == "" && len(o.Members) > 0 && rapid.Bool().Draw(t, "underwayOften") {
		o.Recovery.Underway = rapid.SampledFrom(o.LastVoters).Draw(t, "underwayOftenName")
		o.Recovery.Preserved = rapid.Bool().Draw(t, "preservedOften")
		o.Recovery.DoneWithout = slices.DeleteFunc(o.Recovery.DoneWithout, func(n string) bool { return n == o.Recovery.Underway })
	}
	return o
}

// The recovery's guards over the states it decides on: the same checks as
// TestPropertyNoForcedRecoveryWhileReachable, where they are reached often.
func TestPropertyRecoveryGuardsWhereQuorumIsLost(t *testing.T) {
	check(t, func(t *rapid.T) {
		o := drawLostQuorum(t)
		checkRecoveryStep(t, o, Next(o))
	})
}
