package membership

import (
	"strings"
	"testing"
	"time"
)

func corrupt(m *Member)      { m.Corrupt = "etcd raised CORRUPT" }
func outOfService(m *Member) { m.PodFenced = true }

// A corrupt member is taken out of the client Service, leadership moved off it, then removed
// while the healthy voters left are a quorum; its health is never counted towards one.
func TestACorruptMemberIsFencedThenRemovedWhileAQuorumHolds(t *testing.T) {
	cases := []struct {
		name     string
		observed Observed
		want     Step
	}{
		{"found: out of the client Service first, its pod left running",
			formed(leader(healthy("a", 1)), healthy("b", 2), with(healthy("c", 3), corrupt)),
			Step{Action: FenceFromClients, Members: []string{"c"}}},
		{"fenced: removed",
			formed(leader(healthy("a", 1)), healthy("b", 2), with(healthy("c", 3), func(m *Member) { corrupt(m); outOfService(m) })),
			Step{Action: RemoveMember, Member: "c", MemberID: 3}},
		{"a terminating pod is not fenced again",
			formed(leader(healthy("a", 1)), healthy("b", 2), with(healthy("c", 3), func(m *Member) { corrupt(m); m.PodTerminating = true })),
			Step{Action: RemoveMember, Member: "c", MemberID: 3}},
		{"no pod: removed, never restarted on its data",
			formed(leader(healthy("a", 1)), healthy("b", 2), with(noPod(healthy("c", 3)), corrupt)),
			Step{Action: RemoveMember, Member: "c", MemberID: 3}},
		{"the leader: leadership moved to a member that is not corrupt",
			formed(with(leader(healthy("a", 1)), func(m *Member) { corrupt(m); outOfService(m) }), with(healthy("b", 2), func(m *Member) { m.RaftIndex = 50 }), healthy("c", 3)),
			Step{Action: MoveLeader, Member: "a", MemberID: 1, Target: 3}},
		{"a corrupt member is no transferee",
			formed(with(leader(healthy("a", 1)), func(m *Member) { corrupt(m); outOfService(m) }), with(healthy("b", 2), func(m *Member) { corrupt(m); outOfService(m); m.RaftIndex = 500 }), healthy("c", 3), healthy("d", 4), healthy("e", 5)),
			Step{Action: MoveLeader, Member: "a", MemberID: 1, Target: 3}},
		{"two of three corrupt: removed one at a time, their votes counted in the quorum",
			formed(leader(healthy("a", 1)), with(healthy("b", 2), func(m *Member) { corrupt(m); outOfService(m) }), with(healthy("c", 3), func(m *Member) { corrupt(m); outOfService(m) })),
			Step{Action: RemoveMember, Member: "b", MemberID: 2}},
		{"a corrupt learner is removed though a corrupt voter cannot be yet",
			formed(leader(healthy("a", 1)), down(healthy("b", 2)), with(healthy("c", 3), func(m *Member) { corrupt(m); outOfService(m) }),
				with(healthy("d", 4), func(m *Member) { corrupt(m); outOfService(m); m.IsLearner = true })),
			Step{Action: RemoveMember, Member: "d", MemberID: 4}},
		{"five members, two corrupt: the first removed",
			formed(leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3), with(healthy("d", 4), func(m *Member) { corrupt(m); outOfService(m) }), with(healthy("e", 5), func(m *Member) { corrupt(m); outOfService(m) })),
			Step{Action: RemoveMember, Member: "d", MemberID: 4}},
		{"a corrupt learner is removed, never promoted",
			formed(leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3), with(healthy("d", 4), func(m *Member) { corrupt(m); outOfService(m); m.IsLearner = true })),
			Step{Action: RemoveMember, Member: "d", MemberID: 4}},
		{"replaced first, before a scale-up waits on it",
			func() Observed {
				o := formed(leader(healthy("a", 1)), healthy("b", 2), with(healthy("c", 3), func(m *Member) { corrupt(m); outOfService(m) }))
				o.DesiredSize = 5
				return o
			}(),
			Step{Action: RemoveMember, Member: "c", MemberID: 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Next(tc.observed)
			if got.Action != tc.want.Action || got.Member != tc.want.Member || got.MemberID != tc.want.MemberID ||
				got.Target != tc.want.Target || strings.Join(got.Members, ",") != strings.Join(tc.want.Members, ",") {
				t.Fatalf("got %s %s(%d)%v target %d (%s), want %s %s(%d)%v target %d", got.Action, got.Member, got.MemberID, got.Members, got.Target, got.Reason,
					tc.want.Action, tc.want.Member, tc.want.MemberID, tc.want.Members, tc.want.Target)
			}
			if got.Operation != OpReplacingCorrupt {
				t.Errorf("operation %q, want %q", got.Operation, OpReplacingCorrupt)
			}
		})
	}
}

// Until its removal is safe, the other repairs go on, and the cluster is never settled.
func TestACorruptMemberThatCannotBeRemovedYetHoldsNothingElse(t *testing.T) {
	// a's node is gone for good: it is replaced first, c's vote counted, then c.
	o := formed(with(healthy("a", 1), func(m *Member) { m.Healthy, m.NodeLostSince = false, t0 }), leader(healthy("b", 2)),
		with(healthy("c", 3), func(m *Member) { corrupt(m); outOfService(m) }))
	o.Now = t0.Add(time.Hour)
	if got := Next(o); got.Action != RemoveMember || got.Member != "a" {
		t.Fatalf("got %s %s (%s), want a, on a lost node, removed", got.Action, got.Member, got.Reason)
	}
	// Nothing else to do, but c cannot be removed: a wait naming it, never settled.
	o = formed(leader(healthy("a", 1)), with(healthy("b", 2), func(m *Member) { m.Healthy = false; m.PodProblem = "x" }),
		with(healthy("c", 3), func(m *Member) { corrupt(m); outOfService(m) }))
	if step, ok := corruptRemains(o); !ok || step.Member != "c" || Settled(step) {
		t.Fatalf("corruptRemains: %v %+v", ok, step)
	}
	first := formed(with(healthy("a", 1), func(m *Member) { corrupt(m); outOfService(m) }), leader(healthy("b", 2)), healthy("c", 3))
	if step, ok := corruptRemains(first); !ok || step.Member != "a" {
		t.Fatalf("corruptRemains with the first member corrupt: %v %+v", ok, step)
	}
	healthyNow := formed(three()...)
	if _, ok := corruptRemains(healthyNow); ok {
		t.Fatal("corruptRemains held a cluster with no corrupt member")
	}
	notInEtcd := formed(three()...)
	notInEtcd.Members = append(notInEtcd.Members, with(Member{Name: "x", PVCExists: true}, corrupt))
	if _, ok := corruptRemains(notInEtcd); ok {
		t.Fatal("corruptRemains held a cluster for a corrupt member etcd no longer lists")
	}
	settledButCorrupt := formed(leader(healthy("a", 1)), healthy("b", 2), with(healthy("c", 3), func(m *Member) { corrupt(m); outOfService(m) }),
		healthy("d", 4), healthy("e", 5))
	settledButCorrupt.Members[1].Healthy, settledButCorrupt.Members[3].Healthy = false, false
	if got := Next(settledButCorrupt); Settled(got) || got.Action == RemoveMember {
		t.Fatalf("5 members, 2 down, 1 corrupt: got %s %s (%s)", got.Action, got.Member, got.Reason)
	}
}

// etcd's CORRUPT alarm, which stops every write, is cleared only for a member no longer in
// etcd, and only once the cluster is whole and healthy again.
func TestTheCorruptAlarmIsClearedOnlyOnceTheReplacementIsHealthy(t *testing.T) {
	replaced := formed(three()...)
	replaced.CorruptAlarms = []uint64{9}
	if got := Next(replaced); got.Action != DisarmCorrupt || got.MemberID != 9 {
		t.Fatalf("replaced and healthy: got %s %d (%s), want DisarmCorrupt 9", got.Action, got.MemberID, got.Reason)
	}
	for name, o := range map[string]Observed{
		"the member is still in etcd": func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), with(healthy("c", 3), func(m *Member) { corrupt(m); outOfService(m) }))
			o.CorruptAlarms = []uint64{3}
			return o
		}(),
		"the replacement is a learner": func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), with(healthy("d", 4), func(m *Member) { m.IsLearner = true }))
			o.CorruptAlarms, o.DesiredSize = []uint64{3}, 3
			return o
		}(),
		"the replacement is not healthy": func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2), down(healthy("d", 4)))
			o.CorruptAlarms = []uint64{3}
			return o
		}(),
		"the replacement is not added yet": func() Observed {
			o := formed(leader(healthy("a", 1)), healthy("b", 2))
			o.CorruptAlarms, o.DesiredSize = []uint64{3}, 3
			return o
		}(),
	} {
		if got := Next(o); got.Action == DisarmCorrupt {
			t.Errorf("%s: disarmed %d (%s)", name, got.MemberID, got.Reason)
		}
		if step, ok := disarmCorrupt(o); ok && step.Action == DisarmCorrupt {
			t.Errorf("%s: disarmCorrupt on its own disarmed %d", name, step.MemberID)
		}
	}
}

// A corrupt member's data is never what a lost quorum is recovered from, nor restarted on.
func TestACorruptMemberIsNeverRecoveredFromNorRestarted(t *testing.T) {
	lost := func(survivors ...Member) Observed {
		o := Observed{EverFormed: true, DesiredSize: 3, DesiredVersion: "3.6.16", DataSurvivesPod: true,
			LastVoters: []string{"a", "b", "c"}, LastMembers: []string{"a", "b", "c"}, Now: t0.Add(time.Hour),
			Recovery: RecoveryPolicy{Automatic: true, LostSince: t0}}
		o.Members = append([]Member{noData(Member{Name: "a"})}, survivors...)
		return o
	}
	c := with(noPod(Member{Name: "c", RaftIndex: 900, PVCExists: true}), corrupt)
	b := noPod(Member{Name: "b", RaftIndex: 100, PVCExists: true})
	if got := Next(lost(b, c)); got.Action != RestartMembers || strings.Join(got.Members, ",") != "b" {
		t.Fatalf("restarts %s %v (%s), want b's pod alone", got.Action, got.Members, got.Reason)
	}
	b.PodExists, c.PodExists = true, true
	if got := Next(lost(b, c)); got.Action != Wait || !strings.Contains(got.Reason, "recover-from=b") {
		t.Fatalf("%s %s (%s), want a wait asking a person: c's log reaches further, and c is corrupt", got.Action, got.Member, got.Reason)
	}
	named := lost(b, c)
	named.Recovery.From = "b"
	if got := Next(named); got.Action != BeginRecovery || got.Member != "b" {
		t.Fatalf("named b: %s %s (%s)", got.Action, got.Member, got.Reason)
	}
	c.RaftIndex = 100
	if got := Next(lost(b, c)); got.Action != BeginRecovery || got.Member != "b" {
		t.Fatalf("c's log no further than b's: %s %s (%s), want the recovery from b", got.Action, got.Member, got.Reason)
	}
	c.RaftIndex = 900
	onlyCorrupt := lost(noData(Member{Name: "b"}), c)
	onlyCorrupt.Recovery.FromBackup, onlyCorrupt.Recovery.LatestBackup = true, "nightly"
	if got := Next(onlyCorrupt); got.Action != Wait || !strings.Contains(got.Reason, "members found corrupt (c)") {
		t.Fatalf("only corrupt data left: %s %s (%s), want a wait naming it", got.Action, got.Member, got.Reason)
	}
	namedCorrupt := lost(b, c)
	namedCorrupt.Recovery.From = "c"
	if got := Next(namedCorrupt); got.Action == BeginRecovery && got.Member == "c" {
		t.Fatalf("recovered from c, named by a person but corrupt (%s)", got.Reason)
	}
}

// The minority is named only against a strict majority of all the members, at the same
// compaction; otherwise nothing is concluded.
func TestCompareHashesNamesTheMinorityOfAMajority(t *testing.T) {
	h := func(hash uint32, compact int64) KeyspaceHash {
		return KeyspaceHash{Hash: hash, CompactRevision: compact}
	}
	cases := []struct {
		name     string
		hashes   map[string]KeyspaceHash
		members  int
		result   string
		diverged string
	}{
		{"all agree", map[string]KeyspaceHash{"a": h(1, 5), "b": h(1, 5), "c": h(1, 5)}, 3, "Consistent", ""},
		{"one of three", map[string]KeyspaceHash{"a": h(1, 5), "b": h(1, 5), "c": h(2, 5)}, 3, "Diverged", "c"},
		{"two of five", map[string]KeyspaceHash{"a": h(1, 5), "b": h(9, 5), "c": h(1, 5), "d": h(1, 5), "e": h(7, 5)}, 5, "Diverged", "b,e"},
		{"two of four: no majority", map[string]KeyspaceHash{"a": h(1, 5), "b": h(1, 5), "c": h(2, 5), "d": h(2, 5)}, 4, "Inconclusive", ""},
		{"one answered of three: no majority of the members", map[string]KeyspaceHash{"a": h(1, 5)}, 3, "Inconclusive", ""},
		{"two of three answered, different: no majority", map[string]KeyspaceHash{"a": h(1, 5), "b": h(2, 5)}, 3, "Inconclusive", ""},
		{"two of three answered, the same: consistent as far as known", map[string]KeyspaceHash{"a": h(1, 5), "b": h(1, 5)}, 3, "Consistent", ""},
		{"another compaction is not compared", map[string]KeyspaceHash{"a": h(1, 5), "b": h(1, 5), "c": h(2, 6)}, 3, "Consistent", ""},
		{"one member", map[string]KeyspaceHash{"a": h(1, 5)}, 1, "Consistent", ""},
	}
	for _, tc := range cases {
		got := CompareHashes(tc.hashes, tc.members)
		if got.Result != tc.result || strings.Join(got.Diverged, ",") != tc.diverged {
			t.Errorf("%s: %s %v (%s), want %s %s", tc.name, got.Result, got.Diverged, got.Message, tc.result, tc.diverged)
		}
		if tc.result == "Inconclusive" && strings.HasPrefix(got.Message, "no majority") != (len(tc.hashes) > 1) {
			t.Errorf("%s: %q says the hashes differ with no majority only when they do", tc.name, got.Message)
		}
		if !strings.Contains(got.Message, "a=1@5") {
			t.Errorf("%s: the message does not give the hashes: %s", tc.name, got.Message)
		}
	}
}

// A recovery under way from a member found corrupt is given up, forced or not; but a forced
// member on a node that stopped answering may serve there, and is waited for as any is.
func TestARecoveryFromAMemberFoundCorruptIsGivenUp(t *testing.T) {
	underway := func(b Member, forced bool) Observed {
		o := Observed{EverFormed: true, DesiredSize: 3, DesiredVersion: "3.6.16", DataSurvivesPod: true,
			LastVoters: []string{"a", "b", "c"}, LastMembers: []string{"a", "b", "c"}, Now: t0.Add(time.Hour),
			Recovery: RecoveryPolicy{Automatic: true, LostSince: t0, Underway: "b", UnderwayIndex: 100, Preserved: true, Forced: forced,
				DoneWithout: []string{"a", "c"}}}
		o.Members = []Member{noData(Member{Name: "a"}), b, noData(Member{Name: "c"})}
		return o
	}
	b := with(Member{Name: "b", RaftIndex: 100, PVCExists: true, PodExists: true}, corrupt)
	if got := Next(underway(b, false)); got.Action != AbandonRecovery || got.Member != "b" {
		t.Fatalf("not forced: %s %s (%s), want the recovery given up", got.Action, got.Member, got.Reason)
	}
	forced := with(b, func(m *Member) { m.ForcedNewCluster = true })
	if got := Next(underway(forced, true)); got.Action != AbandonRecovery {
		t.Fatalf("forced: %s %s (%s), want the recovery given up", got.Action, got.Member, got.Reason)
	}
	onLostNode := with(forced, func(m *Member) { m.NodeLostSince = t0 })
	if got := Next(underway(onLostNode, true)); got.Action != Wait {
		t.Fatalf("forced on a node that stopped answering: %s %s (%s), want a wait", got.Action, got.Member, got.Reason)
	}
	noForcedPod := with(onLostNode, func(m *Member) { m.PodExists = false })
	if got := Next(underway(noForcedPod, true)); got.Action != AbandonRecovery {
		t.Fatalf("forced, its pod gone: %s %s (%s), want the recovery given up", got.Action, got.Member, got.Reason)
	}
	notCorrupt := with(b, func(m *Member) { m.Corrupt = "" })
	if got := Next(underway(notCorrupt, false)); got.Action == AbandonRecovery {
		t.Fatalf("not corrupt: given up (%s)", got.Reason)
	}
}
