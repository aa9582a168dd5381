package membership

import (
	"slices"
	"strings"
	"testing"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// lostQuorum is a cluster whose etcd does not answer, with the members given and the voters
// etcd last listed.
func lostQuorum(lastVoters []string, members ...Member) Observed {
	return Observed{EverFormed: true, Members: members, DesiredSize: len(lastVoters), DesiredVersion: "3.6.16",
		DataSurvivesPod: true, LastVoters: lastVoters, LastMembers: lastVoters, Now: time.Unix(10000, 0),
		Recovery: RecoveryPolicy{LostSince: time.Unix(10000, 0).Add(-time.Hour)}}
}

// unscheduledFor: the member's pod has found no node for d before the observation (lostFor's
// clock); its etcd does not run, so it does not answer (a raft index it has is as read earlier).
func unscheduledFor(d time.Duration, m Member) Member {
	m.UnscheduledSince, m.Answering = time.Unix(10000, 0).Add(-d), false
	return m
}

// nodeLostFor: the member's pod was evicted for its node's NoExecute taint d before the
// observation (lostFor's clock), and is still there.
func nodeLostFor(d time.Duration, m Member) Member {
	m.NodeLostSince, m.PodTerminating = time.Unix(10000, 0).Add(-d), true
	return m
}

// withLearner adds a learner of the last membership, running on its claim and answering with
// raftIndex.
func withLearner(name string, raftIndex uint64, o Observed) Observed {
	o.Members = append(o.Members, Member{Name: name, IsLearner: true, PodExists: true, PVCExists: true, RaftIndex: raftIndex, Answering: true, PodVersion: "3.6.16"})
	o.LastMembers = append(slices.Clone(o.LastMembers), name)
	return o
}

// survivor runs on its claim but, without a quorum, only reports its own raft index (0: it does
// not answer).
func survivor(name string, raftIndex uint64) Member {
	return Member{Name: name, PodExists: true, PVCExists: true, RaftIndex: raftIndex, Answering: raftIndex > 0, PodVersion: "3.6.16"}
}

func TestQuorumLostForGood(t *testing.T) {
	abc := []string{"a", "b", "c"}
	abcde := []string{"a", "b", "c", "d", "e"}
	automatic := func(o Observed) Observed { o.Recovery.Automatic = true; return o }
	underway := func(name string, o Observed) Observed { o.Recovery.Underway = name; return o }
	preserved := func(name string, o Observed) Observed { o = underway(name, o); o.Recovery.Preserved = true; return o }
	from := func(name string, o Observed) Observed { o.Recovery.From = name; return o }
	fromBackup := func(latest string, o Observed) Observed {
		o = automatic(o)
		o.Recovery.FromBackup, o.Recovery.LatestBackup = true, latest
		return o
	}
	restoring := func(restore string, exists bool, o Observed) Observed {
		o.Recovery.UnderwayRestore, o.Recovery.RestoreExists = restore, exists
		return o
	}
	userRestore := func(o Observed) Observed { o.AwaitingRestore = "users-restore"; return o }
	doneWithout := func(names []string, o Observed) Observed { o.Recovery.DoneWithout = names; return o }
	declaredLost := func(m Member) Member { m.DeclaredLost = true; return m }
	answering := func(m Member) Member { m.Answering = true; return m }
	noPVC := func(m Member) Member { m.PVCExists = false; return m }
	lostForAfter := func(d, after time.Duration, o Observed) Observed {
		o.Recovery.After, o.Now, o.Recovery.LostSince = after, time.Unix(10000, 0), time.Unix(10000, 0).Add(-d)
		return o
	}
	lostFor := func(d time.Duration, o Observed) Observed {
		o.Recovery.After, o.Now, o.Recovery.LostSince = 10*time.Minute, time.Unix(10000, 0), time.Unix(10000, 0).Add(-d)
		return o
	}
	cases := []struct {
		name     string
		observed Observed
		want     Step
		reason   string // a part of the reason, when it matters
	}{
		{"a member that answers while following a leader holds the recovery: a quorum leads out of reach",
			lostFor(10*time.Minute, automatic(lostQuorum(abc, with(survivor("a", 100), func(m *Member) { m.FollowsLeader = 0x1f }), noPVC(survivor("b", 0))))),
			Step{Action: Wait, Members: []string{"a"}, Operation: OpQuorumLost}, "member a follows a leader (ID 1f)"},
		{"under way, a member following a leader holds it before the force",
			doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)), with(survivor("b", 0), func(m *Member) { m.Answering, m.FollowsLeader = true, 2 }))))),
			Step{Action: Wait, Members: []string{"b"}, Operation: OpRecoveringQuorum}, "member b follows a leader (ID 2)"},
		{"a forced member on a node that stopped answering may serve there: nothing else is recovered, and status says how to go on",
			lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100), with(nodeLostFor(time.Hour, survivor("b", 0)), func(m *Member) { m.ForcedNewCluster = true })))),
			Step{Action: Wait, Members: []string{"b"}, Operation: OpQuorumLost}, "the nodes of forced members b stopped answering"},
		{"a forsaken member is recovered from again, never restarted on its data",
			func() Observed {
				o := lostFor(10*time.Minute, automatic(lostQuorum(abc, noPod(survivor("a", 0)), noPVC(survivor("b", 0)), noPVC(survivor("c", 0)))))
				o.Recovery.Forsaken = "a"
				return o
			}(),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, "the recovery from member a was given up after its forced start"},
		{"a forsaken member does not count towards the quorum of the others",
			func() Observed {
				o := lostFor(10*time.Minute, automatic(lostQuorum(abc, noPod(survivor("a", 0)), survivor("b", 90), noPVC(survivor("c", 0)))))
				o.Recovery.Forsaken = "a"
				return o
			}(),
			Step{Action: ReadLogs, Members: []string{"a"}, Operation: OpQuorumLost}, "members a do not answer"},
		{"a restore from a backup under way is not given up for a member answering with a log",
			doneWithout(abc, restoring("r", true, underway("", fromBackup("nightly", lostQuorum(abc, survivor("a", 5)))))),
			Step{Action: Wait, Operation: OpRecoveringQuorum}, "EtcdRestore r restores the cluster"},
		{"a member done without that answers with a further log gives a recovery not yet forced up",
			func() Observed {
				o := doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)), survivor("b", 120)))))
				o.Recovery.UnderwayIndex = 100
				return o
			}(),
			Step{Action: AbandonRecovery, Member: "a", Operation: OpQuorumLost}, "answers with its log at 120, further than member a's when it began (100"},
		{"but not one the user named",
			func() Observed {
				o := doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)), survivor("b", 120)))))
				o.Recovery.UnderwayIndex, o.Recovery.Named = 100, true
				return o
			}(),
			Step{Action: FenceMembers, Members: []string{"b"}, Operation: OpRecoveringQuorum}, ""},
		{"nor one whose log is no further",
			func() Observed {
				o := doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)), survivor("b", 100)))))
				o.Recovery.UnderwayIndex = 100
				return o
			}(),
			Step{Action: FenceMembers, Members: []string{"b"}, Operation: OpRecoveringQuorum}, ""},
		{"a forced pod that found no node for spec.quorumLossRecovery.after never ran: given up, no longer forced",
			func() Observed {
				o := lostFor(10*time.Minute, doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc,
					with(unscheduledFor(10*time.Minute, survivor("a", 0)), func(m *Member) { m.ForcedNewCluster = true }))))))
				o.Recovery.Forced = true
				return o
			}(),
			Step{Action: AbandonRecovery, Member: "a", Unforced: true, Operation: OpQuorumLost}, "has found no node for 10m0s: it never ran"},
		{"a learner answering with a log further than every surviving voter's holds the recovery: only a person may give its writes up",
			withLearner("d", 150, lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100))))),
			Step{Action: Wait, Member: "a", Members: []string{"d"}, Operation: OpQuorumLost},
			"learners d answer with logs reaching 150, further than member a's (100, 0 if not known), the furthest of the voters whose data survives: they may hold acknowledged writes no surviving voter has, and a learner cannot be recovered from. To recover from member a, losing those writes, annotate the EtcdCluster with " + etcdv1alpha1.AnnotationRecoverFrom + "=a"},
		{"the person names the survivor: recovered from it, the learner done without",
			from("a", withLearner("d", 150, lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100)))))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, "as annotated"},
		{"a learner whose log is no further holds nothing",
			withLearner("d", 100, lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100))))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, "whose log reaches furthest"},
		{"under way, a learner done without that answers behind the survivor is fenced, not waited for",
			func() Observed {
				o := doneWithout([]string{"b", "c", "d"}, preserved("a", withLearner("d", 90, automatic(lostQuorum(abc, noPod(survivor("a", 0)))))))
				o.Recovery.UnderwayIndex = 100
				return o
			}(),
			Step{Action: FenceMembers, Members: []string{"d"}, Operation: OpRecoveringQuorum}, ""},
		{"under way, a learner done without that answers further gives a recovery not yet forced up",
			func() Observed {
				o := doneWithout([]string{"b", "c", "d"}, preserved("a", withLearner("d", 150, automatic(lostQuorum(abc, noPod(survivor("a", 0)))))))
				o.Recovery.UnderwayIndex = 100
				return o
			}(),
			Step{Action: AbandonRecovery, Member: "a", Operation: OpQuorumLost}, "member d, which the recovery under way does without, answers with its log at 150"},
		{"a member counted lost whose pod still runs on its claim being deleted, and answers, holds the recovery",
			lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100),
				with(answering(survivor("b", 120)), func(m *Member) { m.PVCExists, m.PVCDeleting = false, true })))),
			Step{Action: Wait, Members: []string{"b"}, Operation: OpQuorumLost}, "member b answered its status call (raft index 120), its claim being deleted while its pod runs on it"},
		{"a forced member whose node stopped answering may serve there alone: nothing else is recovered until it is declared lost",
			func() Observed {
				o := lostFor(10*time.Minute, doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc,
					with(nodeLostFor(time.Minute, survivor("a", 0)), func(m *Member) { m.ForcedNewCluster = true }))))))
				o.Recovery.Forced = true
				return o
			}(),
			Step{Action: Wait, Member: "a", Operation: OpRecoveringQuorum}, "stopped answering after it was forced: it may serve there as a cluster of its own, so no other member is recovered from. " +
				"Once you have checked that its machine is down, declare it lost to recover from another: annotate the EtcdCluster with " +
				etcdv1alpha1.AnnotationLostMembers + "=a"},
		{"the underway member declared lost, silent: given up",
			doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, declaredLost(noPod(survivor("a", 0))))))),
			Step{Action: AbandonRecovery, Member: "a", Operation: OpQuorumLost}, "was declared lost"},
		{"the underway member declared lost but answering: carried on",
			doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, declaredLost(answering(noPod(survivor("a", 0)))))))),
			Step{Action: ForceNewCluster, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"pods that found no node for spec.quorumLossRecovery.after: their data is out of reach, the survivor recovers",
			lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100), unscheduledFor(10*time.Minute, survivor("b", 0)), unscheduledFor(10*time.Minute, survivor("c", 0))))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, "the pods of members b, c have found no node for 10m0s"},
		{"not before they have been without a node that long: they may yet start",
			lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100), unscheduledFor(9*time.Minute, survivor("b", 0)), unscheduledFor(10*time.Minute, survivor("c", 0))))),
			Step{Action: Wait, Operation: OpQuorumLost}, "no destructive action"},
		{"a majority whose nodes stopped answering is never counted lost, however long: their etcd may still serve",
			lostFor(10*time.Hour, automatic(lostQuorum(abc, survivor("a", 100), nodeLostFor(10*time.Hour, survivor("b", 0)), nodeLostFor(10*time.Hour, survivor("c", 0))))),
			Step{Action: Wait, Members: []string{"b", "c"}, Operation: OpQuorumLost},
			"could split the cluster in two. Once you have checked that those machines are down, declare them lost: annotate the EtcdCluster with " + etcdv1alpha1.AnnotationLostMembers + "=b,c"},
		{"nor when their claims are gone too: a claim is released only once its pod is confirmed ended",
			lostFor(10*time.Hour, automatic(lostQuorum(abc, survivor("a", 100), nodeLostFor(10*time.Hour, noPVC(survivor("b", 0))), nodeLostFor(10*time.Hour, noPVC(survivor("c", 0)))))),
			Step{Action: Wait, Members: []string{"b", "c"}, Operation: OpQuorumLost}, etcdv1alpha1.AnnotationLostMembers + "=b,c"},
		{"nor on the user's choice of survivor: it says nothing of the others",
			from("a", lostQuorum(abc, survivor("a", 100), nodeLostFor(10*time.Hour, survivor("b", 0)), nodeLostFor(10*time.Hour, survivor("c", 0)))),
			Step{Action: Wait, Members: []string{"b", "c"}, Operation: OpQuorumLost}, etcdv1alpha1.AnnotationLostMembers + "=b,c"},
		{"declared lost by a person: recovered from the survivor",
			lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100), declaredLost(nodeLostFor(time.Minute, survivor("b", 0))), declaredLost(nodeLostFor(time.Minute, survivor("c", 0)))))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, "members b, c were declared lost (" + etcdv1alpha1.AnnotationLostMembers + ")"},
		{"one member out of sight is no quorum: the other lost its data, the survivor recovers",
			lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100), nodeLostFor(10*time.Minute, survivor("b", 0))))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, "members c lost their data; the nodes of members b stopped answering"},
		{"out of sight: members on unanswering nodes and survivors that run but do not answer, together a quorum",
			lostFor(10*time.Minute, automatic(lostQuorum(abcde, answering(survivor("a", 100)), survivor("b", 0), nodeLostFor(time.Hour, survivor("c", 0)), nodeLostFor(time.Hour, survivor("d", 0))))),
			Step{Action: Wait, Members: []string{"c", "d"}, Operation: OpQuorumLost}, etcdv1alpha1.AnnotationLostMembers + "=c,d"},
		{"a survivor that answers is in sight: two out of sight of five are no quorum",
			lostFor(10*time.Minute, automatic(lostQuorum(abcde, answering(survivor("a", 100)), answering(survivor("b", 90)), nodeLostFor(time.Hour, survivor("c", 0)), nodeLostFor(time.Hour, survivor("d", 0))))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"a member counted lost that answers a probe holds the recovery",
			lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100), with(noPVC(survivor("b", 0)), func(m *Member) { m.Answered = "10.0.0.5:2380" })))),
			Step{Action: Wait, Members: []string{"b"}, Operation: OpQuorumLost}, "member b at 10.0.0.5:2380"},
		{"so does a stranded one", lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100),
			with(unscheduledFor(10*time.Minute, survivor("b", 0)), func(m *Member) { m.Answered = "b.q-peer:2379" }), unscheduledFor(10*time.Minute, survivor("c", 0))))),
			Step{Action: Wait, Members: []string{"b"}, Operation: OpQuorumLost}, "member b at b.q-peer:2379"},
		{"and the reading of logs", automatic(lostQuorum(abcde, survivor("a", 90), survivor("b", 0), with(noPVC(survivor("c", 0)), func(m *Member) { m.Answered = "10.0.0.7:2379" }))),
			Step{Action: Wait, Members: []string{"c"}, Operation: OpQuorumLost}, "no recovery step is taken while they answer"},
		{"a survivor's answer does not hold it", automatic(lostQuorum(abc, with(survivor("a", 100), func(m *Member) { m.Answered = "10.0.0.5:2379" }))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"begun: a member it does without that answers holds the copy", doneWithout([]string{"b", "c"}, underway("a", automatic(lostQuorum(abc, survivor("a", 100),
			with(noPVC(survivor("b", 0)), func(m *Member) { m.Answered = "10.0.0.5:2380" }))))),
			Step{Action: Wait, Members: []string{"b"}, Operation: OpRecoveringQuorum}, "member b at 10.0.0.5:2380"},
		{"and the force", doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)),
			with(declaredLost(survivor("c", 0)), func(m *Member) { m.Answered = "10.0.0.6:2379" }))))),
			Step{Action: Wait, Members: []string{"c"}, Operation: OpRecoveringQuorum}, ""},
		{"fenced before the force: the pods of the members done without are stopped", doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)),
			declaredLost(survivor("b", 0)), nodeLostFor(time.Hour, survivor("c", 0)))))),
			Step{Action: FenceMembers, Members: []string{"b", "c"}, Operation: OpRecoveringQuorum}, "before member a is forced"},
		{"a pod being deleted still receives clients until it is out of the client Service: fenced too", doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)),
			with(survivor("b", 0), func(m *Member) { m.PodTerminating, m.PodFenced = true, true }), nodeLostFor(time.Hour, survivor("c", 0)))))),
			Step{Action: FenceMembers, Members: []string{"c"}, Operation: OpRecoveringQuorum}, "out of the client Service"},
		{"fenced, on a node that answers: the force waits for the pod to be gone", doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)),
			with(survivor("b", 0), func(m *Member) {
				m.PodTerminating, m.PodFenced, m.PodStopDue = true, true, time.Unix(10000, 0).Add(20*time.Second)
			}),
			with(nodeLostFor(time.Hour, survivor("c", 0)), func(m *Member) { m.PodFenced = true }))))),
			Step{Action: Wait, Members: []string{"b"}, Operation: OpRecoveringQuorum}, "waiting for the pods of members b to stop"},
		{"fenced: then forced", doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)),
			noPod(survivor("b", 0)),
			with(nodeLostFor(time.Hour, survivor("c", 0)), func(m *Member) { m.PodFenced = true }))))),
			Step{Action: ForceNewCluster, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"a fenced pod long past its grace period: its kubelet does not answer either, forced", doneWithout([]string{"b", "c"}, preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0)),
			with(survivor("b", 0), func(m *Member) {
				m.PodTerminating, m.PodFenced, m.PodStopDue = true, true, time.Unix(10000, 0).Add(-time.Minute)
			}),
			with(nodeLostFor(time.Hour, survivor("c", 0)), func(m *Member) { m.PodFenced = true }))))),
			Step{Action: ForceNewCluster, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"spec.quorumLossRecovery.after has a floor: not before quorum has been lost for it",
			lostForAfter(time.Minute, 10*time.Second, automatic(lostQuorum(abc, survivor("a", 100)))),
			Step{Action: Wait, Member: "a", Operation: OpQuorumLost}, "once quorum has been lost for 2m0s"},
		{"once it has", lostForAfter(MinRecoveryAfter, 10*time.Second, automatic(lostQuorum(abc, survivor("a", 100)))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"nor is a pod that found no node for less than the floor counted lost",
			lostForAfter(time.Hour, 0, automatic(lostQuorum(abc, survivor("a", 100), unscheduledFor(time.Minute, survivor("b", 0)), unscheduledFor(time.Minute, survivor("c", 0))))),
			Step{Action: Wait, Operation: OpQuorumLost}, "no destructive action"},
		{"every member's data out of reach or out of sight: no restore from a backup",
			lostFor(10*time.Hour, fromBackup("nightly", lostQuorum(abc, nodeLostFor(10*time.Hour, survivor("a", 0))))),
			Step{Action: Wait, Members: []string{"a"}, Operation: OpQuorumLost}, "no member's data can be read"},
		{"one lost, one stranded: both named",
			lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100), unscheduledFor(10*time.Minute, survivor("c", 0))))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, "members b lost their data; the pods of members c have found no node"},
		{"a stranded member is never the survivor", lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 90), unscheduledFor(10*time.Minute, survivor("b", 120))))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"every member stranded: no restore over data that may come back with its nodes",
			lostFor(10*time.Minute, fromBackup("nightly", lostQuorum(abc, unscheduledFor(10*time.Minute, survivor("a", 0)), unscheduledFor(10*time.Minute, survivor("b", 0))))),
			Step{Action: Wait, Members: []string{"a", "b"}, Operation: OpQuorumLost}, "bring their nodes back, or delete their claims"},
		{"manual: names the survivor and the one command", lostQuorum(abc, survivor("a", 100)),
			Step{Action: Wait, Member: "a", Operation: OpQuorumLost}, etcdv1alpha1.AnnotationRecoverFrom + "=a"},
		{"automatic: the recovery begins from the survivor", automatic(lostQuorum(abc, survivor("a", 100))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, "members b, c lost their data"},
		{"automatic: not before quorum has been lost for spec.quorumLossRecovery.after", lostFor(9*time.Minute, automatic(lostQuorum(abc, survivor("a", 100)))),
			Step{Action: Wait, Member: "a", Operation: OpQuorumLost}, "once quorum has been lost for 10m0s"},
		{"automatic: once it has", lostFor(10*time.Minute, automatic(lostQuorum(abc, survivor("a", 100)))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"begun: a copy of the survivor's data first", underway("a", automatic(lostQuorum(abc, survivor("a", 100)))),
			Step{Action: PreserveData, Member: "a", Operation: OpRecoveringQuorum}, "keeping a copy"},
		{"begun: the survivor stopped for its copy is not restarted", underway("a", automatic(lostQuorum(abc, noPod(survivor("a", 0))))),
			Step{Action: PreserveData, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"data kept: force a new cluster from it", preserved("a", automatic(lostQuorum(abc, noPod(survivor("a", 0))))),
			Step{Action: ForceNewCluster, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"the survivor with the furthest log is chosen", automatic(lostQuorum(abcde, survivor("a", 90), survivor("b", 120))),
			Step{Action: BeginRecovery, Member: "b", Operation: OpRecoveringQuorum}, ""},
		{"begun: carried through from its member, whatever the others report", underway("a", automatic(lostQuorum(abcde, noPod(survivor("a", 0)), survivor("b", 120)))),
			Step{Action: PreserveData, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"begun: the member's claim is gone: given up, to be decided afresh", underway("a", automatic(lostQuorum(abcde, survivor("b", 120)))),
			Step{Action: AbandonRecovery, Member: "a", Operation: OpQuorumLost}, "the recovery is given up, and the loss decided afresh"},
		{"a survivor that reports no index has its log read from its data", automatic(lostQuorum(abcde, survivor("a", 90), survivor("b", 0))),
			Step{Action: ReadLogs, Members: []string{"b"}, Operation: OpQuorumLost}, "members b do not answer: reading how far their logs reach"},
		{"so does every survivor that reports none (password authentication needs a quorum)", lostQuorum(abcde, survivor("a", 0), survivor("b", 0)),
			Step{Action: ReadLogs, Members: []string{"a", "b"}, Operation: OpQuorumLost}, ""},
		{"a log that cannot be read is not guessed at: the user names the member",
			automatic(lostQuorum(abcde, survivor("a", 90), with(survivor("b", 0), func(m *Member) { m.LogUnreadable = "the WAL in /var/lib/etcd/member/wal holds no WAL file" }))),
			Step{Action: Wait, Members: []string{"b"}, Operation: OpQuorumLost}, "member b: the WAL in /var/lib/etcd/member/wal holds no WAL file): name the member to recover from with the annotation"},
		{"one survivor needs no index", automatic(lostQuorum(abc, survivor("a", 0))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"the user's choice is followed", from("a", lostQuorum(abcde, survivor("a", 90), survivor("b", 120))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, "as annotated"},
		{"the user's choice needs no raft index", from("a", lostQuorum(abcde, survivor("a", 0), survivor("b", 0))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"the user's choice does not wait for spec.quorumLossRecovery.after", from("a", lostFor(time.Minute, lostQuorum(abc, survivor("a", 100)))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"the user's choice must be a survivor", from("c", lostQuorum(abc, survivor("a", 100))),
			Step{Action: Wait, Operation: OpQuorumLost}, "not a member whose data survives (a): annotate the EtcdCluster with etcd.database.dev/recover-from=a"},
		{"a quorum's data survives: its pods come back, nothing is forced", automatic(lostQuorum(abc, survivor("a", 100), survivor("b", 0))),
			Step{Action: Wait, Operation: OpQuorumLost}, "no destructive action"},
		{"a survivor without a pod is restarted first", automatic(lostQuorum(abc, noPod(survivor("a", 0)))),
			Step{Action: RestartMembers, Members: []string{"a"}, Operation: OpRecovering}, ""},
		{"no member's data survives: a restore is the way", automatic(lostQuorum(abc)),
			Step{Action: Wait, Operation: OpQuorumLost}, "or set spec.quorumLossRecovery.policy FromLatestBackup"},
		{"no member's data survives, FromLatestBackup: restored from the newest backup", fromBackup("nightly", lostQuorum(abc)),
			Step{Action: BeginRecovery, Backup: "nightly", Operation: OpRecoveringQuorum}, "from EtcdBackup nightly"},
		{"FromLatestBackup: not before quorum has been lost for spec.quorumLossRecovery.after", lostFor(time.Minute, fromBackup("nightly", lostQuorum(abc))),
			Step{Action: Wait, Backup: "nightly", Operation: OpQuorumLost}, "once quorum has been lost for 10m0s"},
		{"FromLatestBackup with no completed backup: says where else to restore from", fromBackup("", lostQuorum(abc)),
			Step{Action: Wait, Operation: OpQuorumLost}, "no EtcdBackup of this cluster has a completed snapshot"},
		{"FromLatestBackup with a survivor: recovered from the survivor, whose data is newer", fromBackup("nightly", lostQuorum(abc, survivor("a", 100))),
			Step{Action: BeginRecovery, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"begun from a backup: its EtcdRestore is made", restoring("r", false, underway("", fromBackup("nightly", lostQuorum(abc)))),
			Step{Action: RestoreFromBackup, Operation: OpRecoveringQuorum}, "EtcdRestore r"},
		{"begun from a backup: its EtcdRestore carries it through", restoring("r", true, underway("", fromBackup("nightly", lostQuorum(abc)))),
			Step{Action: Wait, Operation: OpRecoveringQuorum}, "EtcdRestore r restores the cluster"},
		{"begun from a backup: carried through even if a member's claim shows up again", restoring("r", true, underway("", fromBackup("nightly", lostQuorum(abc, survivor("a", 0))))),
			Step{Action: Wait, Operation: OpRecoveringQuorum}, "EtcdRestore r restores the cluster"},
		{"no recovery while the user's in-place restore runs", userRestore(automatic(lostQuorum(abc, survivor("a", 100)))),
			Step{Action: Wait, Operation: OpRestoring}, "EtcdRestore users-restore restores this cluster in place"},
		{"nor a recovery from a backup", userRestore(fromBackup("nightly", lostQuorum(abc))),
			Step{Action: Wait, Operation: OpRestoring}, "no quorum recovery while it runs"},
		{"ephemeral members: nothing to recover from", func() Observed {
			o := automatic(lostQuorum(abc, survivor("a", 100)))
			o.DataSurvivesPod = false
			return o
		}(),
			Step{Action: Wait, Operation: OpQuorumLost}, "no destructive action"},
		{"never forced twice: the forced member is waited for", automatic(lostQuorum(abc, with(survivor("a", 100), func(m *Member) { m.ForcedNewCluster = true }))),
			Step{Action: Wait, Members: []string{"a"}, Operation: OpRecoveringQuorum}, ""},
		{"never forced twice: nor while the recovery records it", preserved("a", automatic(lostQuorum(abc, with(survivor("a", 0), func(m *Member) { m.ForcedNewCluster = true })))),
			Step{Action: Wait, Member: "a", Operation: OpRecoveringQuorum}, ""},
		{"served alone: the forced member restarts normally, on its data", func() Observed {
			o := preserved("a", automatic(lostQuorum([]string{"a"}, noPod(survivor("a", 0)))))
			o.Recovery.Served = true
			return o
		}(),
			Step{Action: RestartMembers, Members: []string{"a"}, Operation: OpRecovering}, ""},
		{"the forced member serves: it restarts normally before anything joins",
			func() Observed {
				o := formed(with(leader(healthy("a", 1)), func(m *Member) { m.ForcedNewCluster = true }))
				o.DesiredSize = 3
				return o
			}(),
			Step{Action: RollMember, Member: "a", Operation: OpRecoveringQuorum}, "without --force-new-cluster"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Next(tc.observed)
			if got.Action != tc.want.Action || got.Member != tc.want.Member || !slices.Equal(got.Members, tc.want.Members) ||
				got.Operation != tc.want.Operation || got.Backup != tc.want.Backup {
				t.Fatalf("Next = %+v\nwant %+v", got, tc.want)
			}
			if !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("reason %q does not say %q", got.Reason, tc.reason)
			}
		})
	}
}

// A recovery that replaces the record of an earlier one keeps doing without the earlier one's
// members whose claims are still the cluster's (they may hold writes its survivor lacks), and
// only those: a member whose claim is gone has nothing left to keep.
func TestDoneWithoutKeepsTheEarlierRecoverysMembersWhoseClaimsRemain(t *testing.T) {
	o := lostQuorum([]string{"a", "b", "c"}, survivor("a", 10), noPod(survivor("b", 0)),
		Member{Name: "old1", PVCExists: true}, Member{Name: "old2", PVCDeleting: true}, Member{Name: "old3", PodExists: true})
	for _, tc := range []struct {
		member  string
		earlier []string
		want    []string
	}{
		{"a", nil, []string{"b", "c"}},
		{"", nil, []string{"a", "b", "c"}},
		{"a", []string{"old1", "old2", "old3", "old4"}, []string{"b", "c", "old1", "old2"}},
		{"a", []string{"b", "a"}, []string{"b", "c"}},
		{"old1", []string{"old1"}, []string{"a", "b", "c"}},
	} {
		if got := DoneWithout(o, tc.member, tc.earlier); !slices.Equal(got, tc.want) {
			t.Errorf("DoneWithout(%q, earlier %v) = %v, want %v", tc.member, tc.earlier, got, tc.want)
		}
	}
}
