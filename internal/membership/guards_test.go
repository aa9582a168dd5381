package membership

import (
	"strings"
	"testing"
	"time"
)

// The tests here each hold one guard in front of a step that cannot be taken back (a member
// removed, a cluster forced from one member's data) or one boundary of a bounded wait, at the
// exact point where the guard decides. Each was written for a mutant of decide.go that the
// table tests let live (make mutation, docs/reliability.md).

// The survivor with the furthest log is chosen wherever it stands among the last voters: a
// recovery from any other loses the writes only it has.
func TestRecoveryChoosesTheFurthestLogWhereverItIsListed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		survivors []Member
		want      string
	}{
		{"furthest listed first", []Member{survivor("a", 120), survivor("b", 90)}, "a"},
		{"furthest listed in the middle", []Member{survivor("a", 100), survivor("b", 150), survivor("c", 120)}, "b"},
		{"furthest listed last", []Member{survivor("a", 90), survivor("b", 120)}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Seven last voters: up to three survivors are fewer than a quorum (four).
			o := lostQuorum([]string{"a", "b", "c", "d", "e", "f", "g"}, tc.survivors...)
			manual := Next(o)
			if manual.Action != Wait || manual.Member != tc.want {
				t.Errorf("manual policy: Next = %+v, want a Wait naming %s", manual, tc.want)
			}
			o.Recovery.Automatic = true
			if got := Next(o); got.Action != BeginRecovery || got.Member != tc.want {
				t.Errorf("automatic policy: Next = %+v, want BeginRecovery from %s", got, tc.want)
			}
		})
	}
}

// removeIfSafe is the last guard in front of every removal of a voter: the healthy voters that
// remain must be a quorum of the voters that remain. Next chooses unhealthy members for removal
// first, so a healthy voter reaches it only as the victim; the guard must hold on its own.
func TestRemoveIfSafe(t *testing.T) {
	learner := func(m Member) Member { m.IsLearner = true; return m }
	for _, tc := range []struct {
		name    string
		members []Member
		remove  string
		allowed bool
	}{
		{"a healthy voter, with another of three down: one healthy of two left", []Member{leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3))}, "b", false},
		{"the down voter of three: two healthy of two left", []Member{leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3))}, "c", true},
		{"a healthy voter of five, two down: two healthy of four left", []Member{leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3), down(healthy("d", 4)), down(healthy("e", 5))}, "c", false},
		{"a healthy voter of five, one down: three healthy of four left", []Member{leader(healthy("a", 1)), healthy("b", 2), healthy("c", 3), healthy("d", 4), down(healthy("e", 5))}, "c", true},
		{"a healthy voter of three, all healthy", three(), "c", true},
		{"the last voter", []Member{leader(healthy("a", 1))}, "a", false},
		{"a learner, with one voter of three down", []Member{leader(healthy("a", 1)), healthy("b", 2), down(healthy("c", 3)), learner(healthy("d", 4))}, "d", true},
		{"even a learner, while the healthy voters are no quorum already", []Member{leader(healthy("a", 1)), down(healthy("b", 2)), down(healthy("c", 3)), learner(healthy("d", 4))}, "d", false},
		{"a voter cannot go while the healthy voters are no quorum already", []Member{leader(healthy("a", 1)), down(healthy("b", 2)), down(healthy("c", 3)), learner(healthy("d", 4))}, "c", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := formed(tc.members...)
			m := index(o.Members)[tc.remove]
			step, ok := removeIfSafe(o, m, OpScalingDown, "test")
			if ok != tc.allowed {
				t.Fatalf("removeIfSafe(%s) = %+v, %v; want allowed=%v", tc.remove, step, ok, tc.allowed)
			}
			if ok && (step.Action != RemoveMember || step.Member != m.Name || step.MemberID != m.ID) {
				t.Errorf("removeIfSafe(%s) = %+v, want RemoveMember of it", tc.remove, step)
			}
		})
	}
}

// A learner whose pod has not started is removed only when the cluster has one member too many
// with it, or once its pod has had LearnerStartTimeout to start: not a moment before.
func TestLearnerNotStartedIsRemovedOnlyPastItsBounds(t *testing.T) {
	pending := Member{Name: "d", ID: 4, IsLearner: true, PodExists: true, PVCExists: true, PodCreated: t0}
	for _, tc := range []struct {
		name        string
		desiredSize int
		after       time.Duration
		want        Action
	}{
		{"the learner is one of the desired members: waited for", 4, time.Second, Wait},
		{"the learner is a member too many: removed at once", 3, time.Second, RemoveMember},
		{"at the start timeout exactly: still waited for", 4, LearnerStartTimeout, Wait},
		{"past the start timeout: removed", 4, LearnerStartTimeout + time.Nanosecond, RemoveMember},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := formed(append(three(), pending)...)
			o.DesiredSize, o.Now = tc.desiredSize, t0.Add(tc.after)
			got := Next(o)
			if got.Action != tc.want || got.Member != "d" {
				t.Fatalf("Next = %+v, want %s of d", got, tc.want)
			}
		})
	}
}

// A learner is promoted only if, voting, the healthy voters are still a quorum: exactly a
// quorum is enough, one fewer is not.
func TestPromotionKeepsQuorumAtItsBoundary(t *testing.T) {
	c := healthy("c", 3)
	c.Healthy = false
	learner := Member{Name: "d", ID: 4, IsLearner: true, Started: true, PodExists: true, PVCExists: true, Healthy: true}
	o := formed(leader(healthy("a", 1)), healthy("b", 2), c, learner)
	if !promotionKeepsQuorum(o, learner) {
		t.Errorf("a, b and the learner healthy of 4 voters (quorum 3): promotion refused")
	}
	learner.Healthy = false
	o.Members[3] = learner
	if promotionKeepsQuorum(o, learner) {
		t.Errorf("a and b healthy of 4 voters (quorum 3): promotion allowed")
	}
}

// The wait for a learner says what keeps its pod from starting, when something does.
func TestLearnerWaitSaysWhyItsPodDoesNotStart(t *testing.T) {
	o := formed(append(three(), Member{Name: "d", ID: 4, IsLearner: true, PodExists: true, PVCExists: true, PodCreated: t0,
		PodProblem: "ImagePullBackOff: etcd:v3.6.99 not found"})...)
	o.DesiredSize, o.Now = 4, t0.Add(time.Second)
	got := Next(o)
	if got.Action != Wait || !strings.HasSuffix(got.Reason, ": ImagePullBackOff: etcd:v3.6.99 not found") {
		t.Errorf("Next = %+v, want a Wait whose reason ends with the pod's problem", got)
	}
	o.Members[3].PodProblem = ""
	if got := Next(o); got.Reason != "waiting for the learner to start" {
		t.Errorf("with no problem: reason %q, want only that it waits", got.Reason)
	}
}

// The reason of a recovery names what was lost, and only that: no empty list of members, no
// empty clause, whichever of lost and stranded members there are.
func TestQuorumLossReasonNamesOnlyWhatHappened(t *testing.T) {
	abc := []string{"a", "b", "c"}
	lostFor := func(o Observed) Observed {
		o.Recovery.Automatic, o.Recovery.After = true, 10*time.Minute
		o.Now, o.Recovery.LostSince = time.Unix(10000, 0), time.Unix(10000, 0).Add(-10*time.Minute)
		return o
	}
	for _, tc := range []struct {
		name     string
		observed Observed
		says     []string
	}{
		{"lost only", lostFor(lostQuorum(abc, survivor("a", 100))), []string{"(members b, c lost their data)"}},
		{"stranded only", lostFor(lostQuorum(abc, survivor("a", 100),
			unscheduledFor(10*time.Minute, survivor("b", 0)), unscheduledFor(10*time.Minute, survivor("c", 0)))),
			[]string{"(the pods of members b, c have found no node for 10m0s (spec.quorumLossRecovery.after): their volumes' nodes may be gone)"}},
		{"both", lostFor(lostQuorum(abc, survivor("a", 100), unscheduledFor(10*time.Minute, survivor("c", 0)))),
			[]string{"(members b lost their data; the pods of members c have found no node"}},
		{"a claim being deleted, its pod gone", lostFor(lostQuorum(abc, survivor("a", 100),
			with(noPod(survivor("b", 0)), func(m *Member) { m.PVCExists, m.PVCDeleting = false, true }))),
			[]string{"(members c lost their data; the claims of members b are being deleted)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Next(tc.observed)
			if got.Action != BeginRecovery || got.Member != "a" {
				t.Fatalf("Next = %+v, want BeginRecovery from a", got)
			}
			for _, part := range tc.says {
				if !strings.Contains(got.Reason, part) {
					t.Errorf("reason %q does not say %q", got.Reason, part)
				}
			}
			for _, empty := range []string{"members  ", "; )", "(; "} {
				if strings.Contains(got.Reason, empty) {
					t.Errorf("reason %q holds %q: an empty list or clause", got.Reason, empty)
				}
			}
		})
	}
}

// Defragmentation starts at the policy's bounds exactly (minimum size, free share), and takes
// the most wasteful follower first in whatever order the members are listed.
func TestDefragmentBounds(t *testing.T) {
	policy := DefragPolicy{Enabled: true, ThresholdPercent: 50, MinBytes: 100}
	for _, tc := range []struct {
		name    string
		members []Member
		want    Step
	}{
		{"a file of the minimum size exactly", []Member{leader(healthy("a", 1)), fragmented(healthy("b", 2), 100, 40), healthy("c", 3)},
			Step{Action: Defragment, Member: "b", MemberID: 2}},
		{"a free share of the threshold exactly", []Member{leader(healthy("a", 1)), fragmented(healthy("b", 2), 400, 200), healthy("c", 3)},
			Step{Action: Defragment, Member: "b", MemberID: 2}},
		{"just under the threshold", []Member{leader(healthy("a", 1)), fragmented(healthy("b", 2), 400, 201), healthy("c", 3)},
			Step{Action: Wait}},
		{"the most wasteful follower listed first", []Member{leader(healthy("a", 1)), fragmented(healthy("b", 2), 400, 100), fragmented(healthy("c", 3), 300, 100)},
			Step{Action: Defragment, Member: "b", MemberID: 2}},
		{"the most wasteful follower listed last", []Member{leader(healthy("a", 1)), fragmented(healthy("b", 2), 300, 100), fragmented(healthy("c", 3), 400, 100)},
			Step{Action: Defragment, Member: "c", MemberID: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := formed(tc.members...)
			o.Defrag = policy
			got := Next(o)
			if got.Action != tc.want.Action || got.Member != tc.want.Member || got.MemberID != tc.want.MemberID {
				t.Fatalf("Next = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Under NOSPACE the alarm stays while the live data is within 10% of the quota, the bound
// included; a quota the members did not report (0) is not read as a full one.
func TestNoSpaceDisarmBounds(t *testing.T) {
	for _, tc := range []struct {
		name         string
		inUse, quota int64
		want         Action
	}{
		{"live data at 90% of the quota exactly", 900, 1000, Wait},
		{"just under", 899, 1000, DisarmNoSpace},
		{"no quota reported", 900, 0, DisarmNoSpace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := formed(leader(fragmented(healthy("a", 1), tc.inUse, tc.inUse)), healthy("b", 2), healthy("c", 3))
			o.NoSpaceAlarm, o.QuotaBytes = true, tc.quota
			if got := Next(o); got.Action != tc.want {
				t.Fatalf("Next = %+v, want %s", got, tc.want)
			}
		})
	}
}

// A restore from the newest backup begins once quorum has been lost for spec.quorumLossRecovery.after
// exactly, and not a moment before.
func TestRestoreFromBackupBeginsAtAfterExactly(t *testing.T) {
	o := lostQuorum([]string{"a", "b", "c"})
	o.Recovery.Automatic, o.Recovery.FromBackup, o.Recovery.LatestBackup = true, true, "nightly"
	o.Recovery.LostSince = o.Now.Add(-MinRecoveryAfter)
	if got := Next(o); got.Action != BeginRecovery || got.Backup != "nightly" {
		t.Errorf("lost for after exactly: Next = %+v, want BeginRecovery from nightly", got)
	}
	o.Recovery.LostSince = o.Now.Add(-MinRecoveryAfter + time.Nanosecond)
	if got := Next(o); got.Action != Wait {
		t.Errorf("lost for a nanosecond less than after: Next = %+v, want Wait", got)
	}
}
