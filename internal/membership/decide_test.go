package membership

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// healthy is a started, healthy voter with its pod and claim on version 3.6.16, created at
// minute id.
func healthy(name string, id uint64) Member {
	return Member{
		Name: name, ID: id, Started: true, Healthy: true, Version: "3.6.16", RaftIndex: 100,
		PodExists: true, PodCreated: t0.Add(time.Duration(id) * time.Minute), PodVersion: "3.6.16", PVCExists: true,
	}
}

func with(m Member, change func(*Member)) Member { change(&m); return m }

func leader(m Member) Member { m.IsLeader = true; return m }
func fragmented(m Member, size, inUse int64) Member {
	m.DBSizeBytes, m.DBSizeInUseBytes = size, inUse
	return m
}
func down(m Member) Member   { m.Healthy = false; m.Version = ""; return m }
func noPod(m Member) Member  { m.PodExists = false; return m }
func outdated(m *Member)     { m.PodOutdated = true }
func tooSmall(m *Member)     { m.PVCTooSmall = true }
func unrecorded(m *Member)   { m.PodSpecUnrecorded = true }
func noData(m Member) Member { m.PodExists = false; m.PVCExists = false; return m }

// three is a healthy three-member cluster led by a.
func three() []Member {
	return []Member{leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3)}
}

func formed(members ...Member) Observed {
	return Observed{Reachable: true, EverFormed: true, Members: members, DesiredSize: len(members),
		DesiredVersion: "3.6.16", DataSurvivesPod: true}
}

func TestNext(t *testing.T) {
	cases := []struct {
		name     string
		observed Observed
		want     Step // Action, Member, MemberID, Target, Members and Size are compared
	}{
		// Steady state and pause.
		{"healthy cluster matching spec", formed(three()...), Step{Action: Wait}},
		{"paused blocks every change", func() Observed { o := formed(three()...); o.DesiredSize = 5; o.Paused = true; return o }(), Step{Action: Wait}},

		// Bootstrap.
		{"nothing exists yet", Observed{DesiredSize: 3, DataSurvivesPod: true}, Step{Action: Bootstrap, Size: 3}},
		{"bootstrap half done when the operator restarted", Observed{DesiredSize: 3, DataSurvivesPod: true,
			BootstrapPlan: []string{"a", "b", "c"}, Members: []Member{{Name: "a", PodExists: true, PVCExists: true}, {Name: "b", PVCExists: true}}},
			Step{Action: CreateBootstrapMembers, Members: []string{"b", "c"}}},
		{"bootstrap pods all created", Observed{DesiredSize: 3, DataSurvivesPod: true,
			BootstrapPlan: []string{"a", "b"}, Members: []Member{{Name: "a", PodExists: true}, {Name: "b", PodExists: true}}},
			Step{Action: Wait}},
		// Restore into a new cluster: nothing forms until the restore has prepared the seed,
		// then the seed alone forms it and the others join as learners.
		{"restore still preparing the seed", Observed{DesiredSize: 3, DataSurvivesPod: true, AwaitingRestore: "r",
			BootstrapPlan: []string{"seed"}, Members: []Member{{Name: "seed", PVCExists: true}}}, Step{Action: Wait}},
		{"restored seed starts alone", Observed{DesiredSize: 3, DataSurvivesPod: true,
			BootstrapPlan: []string{"seed"}, Members: []Member{{Name: "seed", PVCExists: true}}},
			Step{Action: CreateBootstrapMembers, Members: []string{"seed"}}},
		{"restored seed formed: the others join as learners", func() Observed {
			o := formed(leader(healthy("seed", 1)))
			o.DesiredSize = 3
			return o
		}(), Step{Action: AddLearner}},
		{"a restore annotation left on a formed cluster does not hold it", func() Observed {
			o := formed(three()...)
			o.AwaitingRestore, o.DesiredSize = "r", 5
			return o
		}(), Step{Action: AddLearner}},
		// Restore in place: stop every old member, start the seed alone, then grow as usual.
		{"in place: old members are stopped first", func() Observed {
			o := formed(three()...)
			o.RestoreSeed = "seed"
			o.Members = append(o.Members, Member{Name: "seed", PVCExists: true})
			return o
		}(), Step{Action: StopMembers, Members: []string{"a", "b", "c"}}},
		{"in place: waits for old pods to go", Observed{DesiredSize: 3, DataSurvivesPod: true, EverFormed: true, RestoreSeed: "seed",
			Members: []Member{with(healthy("a", 1), func(m *Member) { m.PodTerminating = true }), {Name: "seed", PVCExists: true}}},
			Step{Action: Wait, Members: []string{"a"}}},
		{"in place: an old pod on a node that stopped answering, which never ends, is not waited for", Observed{DesiredSize: 3, DataSurvivesPod: true, EverFormed: true, RestoreSeed: "seed",
			Members: []Member{with(healthy("a", 1), func(m *Member) { m.PodTerminating, m.NodeLostSince = true, t0 }), {Name: "seed", PVCExists: true}}},
			Step{Action: CreateBootstrapMembers, Members: []string{"seed"}}},
		{"in place: old data kept while the seed starts alone", Observed{DesiredSize: 3, DataSurvivesPod: true, EverFormed: true, RestoreSeed: "seed",
			Members: []Member{{Name: "a", PVCExists: true}, {Name: "b", PVCExists: true}, {Name: "seed", PVCExists: true}}},
			Step{Action: CreateBootstrapMembers, Members: []string{"seed"}}},
		{"in place: no old member is restarted while the seed starts", Observed{DesiredSize: 3, DataSurvivesPod: true, EverFormed: true, RestoreSeed: "seed",
			Members: []Member{{Name: "a", ID: 1, Started: true, PVCExists: true}, {Name: "seed", PVCExists: true, PodExists: true}}},
			Step{Action: Wait}},
		{"in place: the restored members start together", Observed{DesiredSize: 3, DataSurvivesPod: true, EverFormed: true, RestoreSeed: "seed",
			BootstrapPlan: []string{"seed", "r1", "r2"},
			Members:       []Member{{Name: "a", PVCExists: true}, {Name: "seed", PVCExists: true}, {Name: "r1", PVCExists: true}, {Name: "r2", PVCExists: true}}},
			Step{Action: CreateBootstrapMembers, Members: []string{"seed", "r1", "r2"}}},
		{"in place: no restored member starts before every restored claim is the cluster's", Observed{DesiredSize: 3, DataSurvivesPod: true, EverFormed: true, RestoreSeed: "seed",
			BootstrapPlan: []string{"seed", "r1", "r2"},
			Members:       []Member{{Name: "a", PVCExists: true}, {Name: "seed", PVCExists: true}, {Name: "r1", PVCExists: true}}},
			Step{Action: Wait, Members: []string{"r2"}}},
		{"in place: a restored member's pod is not stopped as an old member's", Observed{DesiredSize: 3, DataSurvivesPod: true, EverFormed: true, RestoreSeed: "seed",
			BootstrapPlan: []string{"seed", "r1", "r2"},
			Members:       []Member{{Name: "seed", PVCExists: true, PodExists: true}, {Name: "r1", PVCExists: true, PodExists: true}, {Name: "r2", PVCExists: true}}},
			Step{Action: CreateBootstrapMembers, Members: []string{"r2"}}},
		{"in place: once the seed serves, the old claims go", func() Observed {
			o := formed(leader(healthy("seed", 9)), Member{Name: "a", PVCExists: true})
			o.RestoreSeed, o.DesiredSize = "seed", 3
			return o
		}(), Step{Action: DeleteOrphans, Members: []string{"a"}}},
		{"in place: a learner joining the restored cluster is not stopped as an old member", func() Observed {
			o := formed(leader(healthy("seed", 9)), Member{Name: "new", ID: 10, IsLearner: true, PodExists: true, PVCExists: true})
			o.RestoreSeed, o.DesiredSize = "seed", 3
			return o
		}(), Step{Action: Wait, Member: "new"}},
		{"claims without a plan are never bootstrapped over", Observed{DesiredSize: 3, DataSurvivesPod: true,
			Members: []Member{{Name: "x", PVCExists: true}}}, Step{Action: Wait}},
		{"spec size changes mid-bootstrap: the plan holds", Observed{DesiredSize: 5, DataSurvivesPod: true,
			BootstrapPlan: []string{"a", "b", "c"}, Members: []Member{{Name: "a", PodExists: true}, {Name: "b", PodExists: true}, {Name: "c", PodExists: true}}},
			Step{Action: Wait}},

		// Quorum lost.
		{"quorum lost, pods running: report only", Observed{EverFormed: true, DesiredSize: 3, DataSurvivesPod: true,
			Members: []Member{{Name: "a", PodExists: true, PVCExists: true}, {Name: "b", PodExists: true, PVCExists: true}}},
			Step{Action: Wait}},
		{"every pod deleted: restart them all on their data", Observed{EverFormed: true, DesiredSize: 3, DataSurvivesPod: true,
			LastMembers: []string{"a", "b", "c"}, Members: []Member{{Name: "a", PVCExists: true}, {Name: "b", PVCExists: true}, {Name: "c", PVCExists: true}}},
			Step{Action: RestartMembers, Members: []string{"a", "b", "c"}}},
		{"formed once, everything gone: never bootstrap again", Observed{EverFormed: true, DesiredSize: 3, DataSurvivesPod: true},
			Step{Action: Wait}},
		{"ephemeral and quorum lost: nothing can be restarted safely", Observed{EverFormed: true, DesiredSize: 3,
			Members: []Member{{Name: "a", PVCExists: false}}}, Step{Action: Wait}},

		// Self-healing.
		{"deleted pod with its claim comes back", formed(leader(healthy("a", 1)), healthy("b", 2), down(noPod(healthy("c", 3)))),
			Step{Action: RestartMembers, Members: []string{"c"}}},
		{"member whose claim is gone is removed", formed(leader(healthy("a", 1)), healthy("b", 2), down(noData(healthy("c", 3)))),
			Step{Action: RemoveMember, Member: "c", MemberID: 3}},
		{"ephemeral member whose pod is gone is removed", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), down(noPod(healthy("c", 3))))
			o.DataSurvivesPod = false
			return o
		}(), Step{Action: RemoveMember, Member: "c", MemberID: 3}},
		{"data lost but removal would lose quorum", formed(leader(healthy("a", 1)), down(healthy("b", 2)), down(noData(healthy("c", 3)))),
			Step{Action: Wait, Member: "c"}},
		{"removed member's pod and claim are deleted", formed(leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3), Member{Name: "d", PodExists: true, PVCExists: true}),
			Step{Action: DeleteOrphans, Members: []string{"d"}}},
		{"a removed member's pod that cannot end (its node stopped answering) does not hold the cluster", func() Observed {
			o := formed(leader(healthy("a", 1)), Member{Name: "d", PodExists: true, PodTerminating: true, NodeLostSince: t0})
			o.DesiredSize = 3
			return o
		}(), Step{Action: AddLearner}},
		{"a removed member's pod that is ending is waited for: the scale-down is not over", formed(leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3),
			Member{Name: "d", PodExists: true, PodTerminating: true}), Step{Action: DeleteOrphans, Members: []string{"d"}}},
		{"learner listed but never started gets its pod", formed(leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3),
			Member{Name: "d", ID: 4, IsLearner: true}), Step{Action: StartMember, Member: "d", MemberID: 4}},
		{"a learner added before is started before a member whose data is gone is removed", formed(leader(healthy("a", 1)), noData(healthy("b", 2)), healthy("c", 3),
			Member{Name: "d", ID: 4, IsLearner: true, PVCExists: true}), Step{Action: StartMember, Member: "d", MemberID: 4}},
		{"no member is removed while a learner added before has not started: its pod names the members as they were",
			formed(leader(healthy("a", 1)), noData(healthy("b", 2)), healthy("c", 3),
				Member{Name: "d", ID: 4, IsLearner: true, PodExists: true, PVCExists: true, PodCreated: t0}),
			Step{Action: Wait, Member: "d"}},
		{"no member is removed while a learner added before has not started, wherever etcd lists the learner",
			formed(Member{Name: "d", ID: 4, IsLearner: true, PodExists: true, PVCExists: true, PodCreated: t0},
				leader(healthy("a", 1)), noData(healthy("b", 2)), healthy("c", 3)),
			Step{Action: Wait, Member: "d"}},
		{"a learner whose pod names a member removed since is restarted with the members as they are",
			formed(leader(healthy("a", 1)), healthy("c", 3),
				Member{Name: "d", ID: 4, IsLearner: true, PodExists: true, PVCExists: true, PodCreated: t0, InitialClusterStale: true,
					PodProblem: "CrashLoopBackOff: last exit code 1 (Error)"}),
			Step{Action: StopMembers, Members: []string{"d"}}},
		{"a member whose node stopped answering for the recovery's wait is replaced while a quorum serves", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), with(down(healthy("c", 3)), func(m *Member) { m.NodeLostSince, m.PodTerminating = t0, true }))
			o.Now = t0.Add(MinRecoveryAfter)
			return o
		}(), Step{Action: RemoveMember, Member: "c", MemberID: 3}},
		{"not before: its node may answer again", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), with(down(healthy("c", 3)), func(m *Member) { m.NodeLostSince, m.PodTerminating = t0, true }))
			o.Now = t0.Add(MinRecoveryAfter - time.Second)
			return o
		}(), Step{Action: Wait, Members: []string{"c"}}},
		{"nor when removing it would lose quorum", func() Observed {
			o := formed(leader(healthy("a", 1)), down(healthy("b", 2)), with(down(healthy("c", 3)), func(m *Member) { m.NodeLostSince, m.PodTerminating = t0, true }))
			o.Now = t0.Add(time.Hour)
			return o
		}(), Step{Action: Wait, Member: "c"}},
		{"a crashed member waits; no membership change", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3)))
			return o
		}(), Step{Action: Wait, Members: []string{"c"}}},

		// Scale up: learner first, then promote, one at a time.
		{"scale 3 to 5 adds a learner", func() Observed { o := formed(three()...); o.DesiredSize = 5; return o }(), Step{Action: AddLearner}},
		{"learner not yet started is waited for", func() Observed {
			o := formed(append(three(), Member{Name: "d", ID: 4, IsLearner: true, PodExists: true, PVCExists: true})...)
			o.DesiredSize = 5
			return o
		}(), Step{Action: Wait, Member: "d"}},
		{"a learner whose pod never starts is removed after the start timeout", func() Observed {
			stuck := Member{Name: "d", ID: 4, IsLearner: true, PodExists: true, PVCExists: true, PodCreated: t0,
				PodProblem: "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu"}
			o := formed(append(three(), stuck)...)
			o.DesiredSize, o.Now = 5, t0.Add(LearnerStartTimeout+time.Second)
			return o
		}(), Step{Action: RemoveMember, Member: "d", MemberID: 4}},
		{"a learner not yet started is waited for within the timeout", func() Observed {
			o := formed(append(three(), Member{Name: "d", ID: 4, IsLearner: true, PodExists: true, PVCExists: true, PodCreated: t0})...)
			o.DesiredSize, o.Now = 5, t0.Add(LearnerStartTimeout-time.Second)
			return o
		}(), Step{Action: Wait, Member: "d"}},
		{"a learner that never started does not hold a scale-down", func() Observed {
			o := formed(append(three(), Member{Name: "d", ID: 4, IsLearner: true, PodExists: true, PVCExists: true, PodCreated: t0})...)
			o.DesiredSize, o.Now = 3, t0.Add(time.Second)
			return o
		}(), Step{Action: RemoveMember, Member: "d", MemberID: 4}},
		{"started learner is promoted before another is added", func() Observed {
			o := formed(append(three(), with(healthy("d", 4), func(m *Member) { m.IsLearner = true }))...)
			o.DesiredSize = 5
			return o
		}(), Step{Action: PromoteLearner, Member: "d", MemberID: 4}},
		{"no member added while one is unhealthy", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3)))
			o.DesiredSize = 5
			return o
		}(), Step{Action: Wait, Members: []string{"c"}}},

		// Scale down: victim chosen by facts, leadership moved first, quorum kept.
		{"scale down removes the newest follower", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3), healthy("d", 4), healthy("e", 5))
			o.DesiredSize = 3
			return o
		}(), Step{Action: RemoveMember, Member: "e", MemberID: 5}},
		{"names that sort misleadingly do not matter", func() Observed {
			o := formed(leader(healthy("m-10", 1)), healthy("m-9", 2), healthy("m-1", 3))
			o.DesiredSize = 2
			return o
		}(), Step{Action: RemoveMember, Member: "m-1", MemberID: 3}},
		{"scale down removes an unhealthy member first", func() Observed {
			o := formed(leader(healthy("a", 1)), down(healthy("b", 2)), healthy("c", 3), healthy("d", 4), healthy("e", 5))
			o.DesiredSize = 4
			return o
		}(), Step{Action: RemoveMember, Member: "b", MemberID: 2}},
		{"followers go before the leader, even an older one", func() Observed {
			o := formed(leader(healthy("a", 9)), healthy("b", 2), healthy("c", 3))
			o.DesiredSize = 2
			return o
		}(), Step{Action: RemoveMember, Member: "c", MemberID: 3}},
		{"an unhealthy leader (alarm) to be removed hands leadership off first", func() Observed {
			o := formed(with(leader(healthy("a", 1)), func(m *Member) { m.Healthy = false }),
				healthy("b", 2), with(healthy("c", 3), func(m *Member) { m.RaftIndex = 150 }))
			o.DesiredSize = 2
			return o
		}(), Step{Action: MoveLeader, Member: "a", MemberID: 1, Target: 3}},
		{"one-member target from two: the follower goes", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2))
			o.DesiredSize = 1
			return o
		}(), Step{Action: RemoveMember, Member: "b", MemberID: 2}},
		{"scale down removes a dead member while the rest keep quorum", func() Observed {
			o := formed(leader(healthy("a", 1)), down(healthy("b", 2)), down(healthy("c", 3)), healthy("d", 4))
			o.DesiredSize = 3
			return o
		}(), Step{Action: RemoveMember, Member: "c", MemberID: 3}},
		{"quorum at the edge: removing a healthy voter is refused", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3)), down(healthy("d", 4)), down(healthy("e", 5)))
			o.Members[2].PodExists, o.Members[3].PodExists, o.Members[4].PodExists = true, true, true
			o.DesiredSize = 5
			return o
		}(), Step{Action: Wait, Members: []string{"c", "d", "e"}}},

		// Upgrade: one member at a time, leader last, gated on health and reported version.
		{"upgrade starts with a follower", func() Observed { o := formed(three()...); o.DesiredVersion = "3.7.3"; return o }(),
			Step{Action: UpgradeMember, Member: "b", MemberID: 2}},
		{"upgrade waits for the restarted member to report the new version", func() Observed {
			o := formed(leader(healthy("a", 1)), with(healthy("b", 2), func(m *Member) { m.PodVersion = "3.7.3" }), healthy("c", 3))
			o.DesiredVersion = "3.7.3"
			return o
		}(), Step{Action: Wait, Member: "b"}},
		{"upgrade continues once it does", func() Observed {
			o := formed(leader(healthy("a", 1)), with(healthy("b", 2), func(m *Member) { m.PodVersion, m.Version = "3.7.3", "3.7.3" }), healthy("c", 3))
			o.DesiredVersion = "3.7.3"
			return o
		}(), Step{Action: UpgradeMember, Member: "c", MemberID: 3}},
		{"leader last, after leadership moves to the most caught-up member", func() Observed {
			up := func(m Member) Member { m.PodVersion, m.Version = "3.7.3", "3.7.3"; return m }
			o := formed(leader(healthy("a", 1)), up(with(healthy("b", 2), func(m *Member) { m.RaftIndex = 120 })), up(healthy("c", 3)))
			o.DesiredVersion = "3.7.3"
			return o
		}(), Step{Action: MoveLeader, Member: "a", MemberID: 1, Target: 2}},
		{"upgrade of a single member needs no leadership move", func() Observed {
			o := formed(leader(healthy("a", 1)))
			o.DesiredVersion = "3.7.3"
			return o
		}(), Step{Action: UpgradeMember, Member: "a", MemberID: 1}},
		{"an upgrade stuck on a member that cannot run the new version halts there", func() Observed {
			o := formed(leader(healthy("a", 1)), with(down(healthy("b", 2)), func(m *Member) {
				m.PodVersion, m.PodProblem = "3.7.3", "ImagePullBackOff: etcd:v3.7.3 not found"
			}), healthy("c", 3))
			o.DesiredVersion = "3.7.3"
			return o
		}(), Step{Action: Wait, Member: "b"}},
		{"a stuck upgrade taken back: the stuck member returns to the running version", func() Observed {
			o := formed(leader(healthy("a", 1)), with(down(healthy("b", 2)), func(m *Member) {
				m.PodVersion, m.PodProblem = "3.7.3", "ImagePullBackOff: etcd:v3.7.3 not found"
			}), healthy("c", 3))
			return o
		}(), Step{Action: UpgradeMember, Member: "b", MemberID: 2}},
		{"upgrade paused by an unhealthy member", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3)))
			o.DesiredVersion = "3.7.3"
			return o
		}(), Step{Action: Wait}},
		{"auth is enabled once the cluster is complete and healthy", func() Observed { o := formed(three()...); o.AuthPending = true; return o }(),
			Step{Action: EnableAuth}},
		{"auth waits for scaling", func() Observed { o := formed(three()...); o.AuthPending = true; o.DesiredSize = 4; return o }(),
			Step{Action: AddLearner}},
		{"auth waits for an unhealthy member", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3)))
			o.AuthPending = true
			return o
		}(), Step{Action: Wait, Members: []string{"c"}}},
		{"a rotated root password is changed even with a member down", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3)))
			o.RootPasswordOutdated = true
			return o
		}(), Step{Action: ChangeRootPassword}},
		{"a rotated root password waits for quorum", func() Observed {
			o := formed(leader(healthy("a", 1)), down(healthy("b", 2)), down(healthy("c", 3)))
			o.Reachable, o.RootPasswordOutdated = false, true
			return o
		}(), Step{Action: Wait}},
		{"nothing else while a member is being defragmented", func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3))
			o.Defragmenting, o.DesiredSize = "c", 5
			return o
		}(), Step{Action: Wait, Member: "c"}},
		{"defragment the most wasteful follower first", func() Observed {
			o := formed(leader(fragmented(healthy("a", 1), 400, 100)), fragmented(healthy("b", 2), 300, 100), fragmented(healthy("c", 3), 400, 100))
			o.Defrag = DefragPolicy{Enabled: true, ThresholdPercent: 50, MinBytes: 100}
			return o
		}(), Step{Action: Defragment, Member: "c", MemberID: 3}},
		{"the leader is defragmented last, after leadership has moved off it", func() Observed {
			o := formed(leader(fragmented(healthy("a", 1), 400, 100)), fragmented(healthy("b", 2), 300, 290), healthy("c", 3))
			o.Defrag = DefragPolicy{Enabled: true, ThresholdPercent: 50, MinBytes: 100}
			return o
		}(), Step{Action: MoveLeader, Member: "a", MemberID: 1, Target: 2}},
		{"a single member is defragmented in place", func() Observed {
			o := formed(leader(fragmented(healthy("a", 1), 400, 100)))
			o.Defrag = DefragPolicy{Enabled: true, ThresholdPercent: 50, MinBytes: 100}
			return o
		}(), Step{Action: Defragment, Member: "a", MemberID: 1}},
		{"below the threshold or the minimum size nothing is defragmented", func() Observed {
			o := formed(leader(fragmented(healthy("a", 1), 400, 300)), fragmented(healthy("b", 2), 90, 10), healthy("c", 3))
			o.Defrag = DefragPolicy{Enabled: true, ThresholdPercent: 50, MinBytes: 100}
			return o
		}(), Step{Action: Wait}},
		{"a small database just defragmented, its few free pages over the threshold, is not defragmented again", func() Observed {
			o := formed(leader(healthy("a", 1)), fragmented(healthy("b", 2), 40960, 32768), healthy("c", 3))
			o.Defrag = DefragPolicy{Enabled: true, ThresholdPercent: 10, MinBytes: 1024, MinFreeBytes: 1 << 20}
			return o
		}(), Step{Action: Wait}},
		{"at exactly the least free space worth it, it is", func() Observed {
			o := formed(leader(healthy("a", 1)), fragmented(healthy("b", 2), 4<<20, 3<<20), healthy("c", 3))
			o.Defrag = DefragPolicy{Enabled: true, ThresholdPercent: 10, MinBytes: 1024, MinFreeBytes: 1 << 20}
			return o
		}(), Step{Action: Defragment, Member: "b", MemberID: 2}},
		{"past the least free space worth it, it is", func() Observed {
			o := formed(leader(healthy("a", 1)), fragmented(healthy("b", 2), 4<<20, 2<<20), healthy("c", 3))
			o.Defrag = DefragPolicy{Enabled: true, ThresholdPercent: 10, MinBytes: 1024, MinFreeBytes: 1 << 20}
			return o
		}(), Step{Action: Defragment, Member: "b", MemberID: 2}},
		{"defragmentation disabled", func() Observed {
			o := formed(leader(fragmented(healthy("a", 1), 400, 100)), healthy("b", 2), healthy("c", 3))
			o.Defrag = DefragPolicy{Enabled: false, ThresholdPercent: 50}
			return o
		}(), Step{Action: Wait}},
		{"no defragmentation while a member is unhealthy", func() Observed {
			o := formed(leader(fragmented(healthy("a", 1), 400, 100)), healthy("b", 2), down(healthy("c", 3)))
			o.Defrag = DefragPolicy{Enabled: true, ThresholdPercent: 50}
			return o
		}(), Step{Action: Wait, Members: []string{"c"}}},
		{"NOSPACE: defragment even below the policy threshold", func() Observed {
			o := formed(leader(healthy("a", 1)), fragmented(healthy("b", 2), 1000, 800), healthy("c", 3))
			o.Defrag = DefragPolicy{Enabled: false}
			o.NoSpaceAlarm, o.QuotaBytes = true, 1000
			return o
		}(), Step{Action: Defragment, Member: "b", MemberID: 2}},
		{"NOSPACE: disarm once the space is back", func() Observed {
			o := formed(leader(fragmented(healthy("a", 1), 500, 500)), healthy("b", 2), healthy("c", 3))
			o.NoSpaceAlarm, o.QuotaBytes = true, 1000
			return o
		}(), Step{Action: DisarmNoSpace}},
		{"NOSPACE: live data still at the quota, nothing to disarm", func() Observed {
			o := formed(leader(fragmented(healthy("a", 1), 960, 960)), healthy("b", 2), healthy("c", 3))
			o.NoSpaceAlarm, o.QuotaBytes = true, 1000
			return o
		}(), Step{Action: Wait, Member: "a"}},
		// Spec changes reach existing members: one at a time, healthy first, leader last.
		{"a changed pod template restarts a follower first", formed(leader(with(healthy("a", 1), outdated)), with(healthy("b", 2), outdated), healthy("c", 3)),
			Step{Action: RollMember, Member: "b", MemberID: 2}},
		{"the leader is restarted on the changed spec last, after leadership moves", formed(leader(with(healthy("a", 1), outdated)), healthy("b", 2), healthy("c", 3)),
			Step{Action: MoveLeader, Member: "a", MemberID: 1, Target: 2}},
		{"a rolled member that cannot run is restarted on the spec reverted since", formed(leader(healthy("a", 1)), healthy("b", 2),
			with(down(healthy("c", 3)), func(m *Member) {
				m.PodOutdated, m.PodProblem = true, "Unschedulable: 0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector"
			})),
			Step{Action: RollMember, Member: "c", MemberID: 3}},
		{"no restart on a changed spec while a member is unhealthy", formed(leader(healthy("a", 1)), with(healthy("b", 2), outdated), down(healthy("c", 3))),
			Step{Action: Wait, Members: []string{"c"}}},
		{"an upgrade comes before a spec roll-out", func() Observed {
			o := formed(leader(healthy("a", 1)), with(healthy("b", 2), outdated), healthy("c", 3))
			o.DesiredVersion = "3.7.3"
			return o
		}(), Step{Action: UpgradeMember, Member: "b", MemberID: 2}},
		{"grown storage expands the claims", formed(leader(with(healthy("a", 1), tooSmall)), with(healthy("b", 2), tooSmall), healthy("c", 3)),
			Step{Action: ExpandClaims, Members: []string{"a", "b"}}},
		{"pods of an earlier operator version get the spec recorded, not restarted", formed(leader(with(healthy("a", 1), unrecorded)), healthy("b", 2), healthy("c", 3)),
			Step{Action: RecordPodSpec, Members: []string{"a"}}},

		// A cluster that never formed takes a corrected spec.
		{"never formed: a member with no image of its version moves to the corrected one", Observed{DesiredSize: 3, DesiredVersion: "3.6.16", DataSurvivesPod: true,
			BootstrapPlan: []string{"a", "b", "c"}, Members: []Member{
				{Name: "a", PodExists: true, PVCExists: true, PodVersion: "3.6.99", PodProblem: "ImagePullBackOff"},
				{Name: "b", PodExists: true, PVCExists: true, PodVersion: "3.6.16"},
				{Name: "c", PodExists: true, PVCExists: true, PodVersion: "3.6.99", PodProblem: "ImagePullBackOff"}}},
			Step{Action: UpgradeMember, Member: "a"}},
		{"never formed: unschedulable pods of an outdated template are made again", Observed{DesiredSize: 3, DesiredVersion: "3.6.16", DataSurvivesPod: true,
			BootstrapPlan: []string{"a", "b", "c"}, Members: []Member{
				{Name: "a", PodExists: true, PVCExists: true, PodVersion: "3.6.16", PodProblem: "Unschedulable", PodOutdated: true},
				{Name: "b", PodExists: true, PVCExists: true, PodVersion: "3.6.16", PodProblem: "Unschedulable", PodOutdated: true},
				{Name: "c", PodExists: true, PVCExists: true, PodVersion: "3.6.16", PodOutdated: true}}},
			Step{Action: StopMembers, Members: []string{"a", "b"}}},
		{"never formed: members whose claims were never bound under the old class are made again", Observed{DesiredSize: 3, DesiredVersion: "3.6.16", DataSurvivesPod: true,
			BootstrapPlan: []string{"a", "b"}, Members: []Member{
				{Name: "a", PodExists: true, PVCExists: true, PodVersion: "3.6.16", PodProblem: "Unschedulable", PVCUnboundOutdated: true},
				{Name: "b", PVCExists: true, PVCUnboundOutdated: true}}},
			Step{Action: ResetBootstrapMembers, Members: []string{"a", "b"}}},
		{"never formed: a member that runs is left to form the cluster", Observed{DesiredSize: 3, DesiredVersion: "3.6.16", DataSurvivesPod: true,
			BootstrapPlan: []string{"a"}, Members: []Member{{Name: "a", PodExists: true, PVCExists: true, PodVersion: "3.6.16", PodOutdated: true}}},
			Step{Action: Wait}},
		{"scaling comes before upgrading", func() Observed { o := formed(three()...); o.DesiredVersion = "3.7.3"; o.DesiredSize = 4; return o }(),
			Step{Action: AddLearner}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Next(tc.observed)
			if got.Action != tc.want.Action || got.Member != tc.want.Member || got.MemberID != tc.want.MemberID ||
				got.Target != tc.want.Target || got.Size != tc.want.Size || !slices.Equal(got.Members, tc.want.Members) {
				t.Fatalf("Next() = %+v\nwant %+v", got, tc.want)
			}
			if got.Reason == "" {
				t.Errorf("step %s has no reason to report", got.Action)
			}
		})
	}
}

// A halted upgrade says which member and why, and how to get out of it.
func TestHaltedUpgradeNamesTheCauseAndTheWayBack(t *testing.T) {
	o := formed(leader(healthy("a", 1)), with(down(healthy("b", 2)), func(m *Member) {
		m.PodVersion, m.PodProblem = "3.7.3", "ImagePullBackOff: etcd:v3.7.3 not found"
	}), healthy("c", 3))
	o.DesiredVersion = "3.7.3"
	got := Next(o)
	for _, part := range []string{"ImagePullBackOff", "spec.version back"} {
		if !strings.Contains(got.Reason, part) {
			t.Errorf("reason %q does not mention %q", got.Reason, part)
		}
	}
}

func TestQuorum(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 7: 4, 9: 5} {
		if got := Quorum(n); got != want {
			t.Errorf("Quorum(%d) = %d, want %d", n, got, want)
		}
	}
}

// Settled is what lets other work (a CA rotation) move: only the step of a cluster with
// nothing to do, never a wait for something, a paused cluster or a change.
func TestSettledOnlyWhenNothingIsToDo(t *testing.T) {
	paused := formed(three()...)
	paused.Paused = true
	unhealthy := formed(leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3)))
	bigger := formed(three()...)
	bigger.DesiredSize = 5
	for _, tc := range []struct {
		name string
		step Step
		want bool
	}{
		{"healthy cluster matching spec", Next(formed(three()...)), true},
		{"paused", Next(paused), false},
		{"a member unhealthy", Next(unhealthy), false},
		{"a change to make", Next(bigger), false},
		{"a wait of an operation, with the settled reason", Step{Action: Wait, Operation: OpRollingOut, Reason: reasonSettled}, false},
		{"another action, with the settled reason", Step{Action: RollMember, Reason: reasonSettled}, false},
		{"a wait for another reason", Step{Action: Wait, Reason: "waiting"}, false},
	} {
		if got := Settled(tc.step); got != tc.want {
			t.Errorf("%s: Settled(%+v) = %v, want %v", tc.name, tc.step, got, tc.want)
		}
	}
}
