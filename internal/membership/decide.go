// Package membership decides the one next safe step for an etcd cluster, as a pure function of
// what the reconciler observed: etcd's member list and each member's health, the pods and the
// claims. It never acts; the reconciler carries the step out and observes again.
//
// The invariants it keeps:
//   - at most one membership change (add, promote, remove) per step;
//   - a learner is promoted only when, voting, the healthy voters are still a quorum;
//   - never a step that leaves fewer healthy voters than a quorum of the voters that remain;
//   - a member whose data is gone is removed and replaced, never restarted under its old ID;
//   - a cluster that once formed is never bootstrapped again;
//   - "healthy" means what the next step needs of the members that remain: etcd answers with
//     no error, the member has applied the log to within MaxLagEntries of the leader, and its
//     pod is ready (clients reach it);
//   - quorum lost for good (a majority of the last voters' data is gone, or out of reach: their
//     pods have found no node for spec.quorumLossRecovery.after, or a person declared them
//     lost) is recovered only by the policy's leave (and after spec.quorumLossRecovery.after,
//     never less than MinRecoveryAfter) or the user's; never while members on nodes that
//     stopped answering, with the survivors that do not answer, could be a quorum (a node that
//     stopped answering is not an etcd that stopped), nor while a member counted lost answers
//     a probe; the members done without are fenced before the force; from the
//     surviving member with the most recent log (as it reports it, or as its WAL records it
//     when it cannot answer; a log that cannot be read is not guessed at) or the one the user
//     named; a recovery, once
//     begun, is carried through from that member; its data is copied before it is rewritten;
//     never is a member forced while another runs forced; a cluster whose every member lost
//     its data is restored from its newest backup only under policy FromLatestBackup; and no
//     recovery begins while an in-place restore of the cluster runs;
//   - nothing waits forever on a member that cannot start: a learner whose pod never starts is
//     removed after LearnerStartTimeout (learners do not count towards quorum), and a member
//     stuck on a new version can be rolled back to the running one.
package membership

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Member joins what etcd, the pod and the claim say about one member, keyed by name.
type Member struct {
	Name string

	// From etcd.
	ID        uint64 // 0 when etcd does not list the member
	Started   bool   // it has run at least once (published its client URLs)
	IsLearner bool
	// Healthy: answered its status call with no error, caught up with the leader's log, and
	// (voters) its pod is ready.
	Healthy   bool
	IsLeader  bool
	Version   string // the etcd version it reports
	RaftIndex uint64
	// DBSizeBytes and DBSizeInUseBytes are the database file size and its live part.
	DBSizeBytes      int64
	DBSizeInUseBytes int64

	// From Kubernetes.
	PodExists      bool
	PodTerminating bool
	// PodFenced: the pod is out of the client Service's selection, taken out by a quorum
	// recovery (FenceMembers). A pod that is not may still receive clients.
	PodFenced bool
	// PodStopDue is the pod's deletion timestamp: by then, its grace period over, a kubelet
	// that answers has stopped its containers and the pod is gone. Zero while not deleted.
	PodStopDue time.Time
	PodCreated time.Time
	PodVersion string // the etcd version of the pod's image
	// UnscheduledSince is when the pod, not yet placed on a node, was made; zero once it is
	// placed, or with no pod. A member whose pod finds no node for long (its volume's node is
	// gone) has its data out of reach.
	UnscheduledSince time.Time
	// NodeLostSince is when the pod's node was found gone: the pod, placed on it, was evicted
	// for the node's NoExecute taint (the node stopped answering) and is still there, as no
	// kubelet confirms its end. Zero otherwise. Its data, on that node's volume, is out of reach
	// as long as the node is.
	NodeLostSince time.Time
	// PodProblem says why the pod cannot run (unschedulable, image not pullable, crash-looping),
	// or is empty. A pod placed on a node that has not started there (its volume cannot be
	// attached, its sandbox made) has none: only events say so, and they are reported, not
	// decided on.
	PodProblem string
	// PodOutdated: the pod was made from an earlier spec (pod template, tuning, repository)
	// than the current one; the version is compared on its own (PodVersion).
	PodOutdated bool
	// PodSpecUnrecorded: the pod predates the spec hash (made by an older operator).
	PodSpecUnrecorded bool
	PVCExists         bool
	// PVCDeleting: the claim is being deleted (PVCExists is then false), and kept with its data
	// while a pod uses it (pvc-protection): the member's etcd may run on it until its pod stops.
	PVCDeleting bool
	// ForcedNewCluster: the pod restarts the member with --force-new-cluster, as a cluster of
	// its own, to recover a lost quorum.
	ForcedNewCluster bool
	// PVCUnboundOutdated: the claim was never bound and asks for another storage class or
	// size than the spec now does: it holds no data and can be made again.
	PVCUnboundOutdated bool
	// PVCTooSmall: the claim requests less than spec.storage.size.
	PVCTooSmall bool
	// InitialClusterStale: a learner that has not started, whose pod was made with an initial
	// cluster that no longer matches etcd's members (one was removed since): etcd refuses to
	// start it ("error validating peerURLs"), for ever.
	InitialClusterStale bool
	// LogUnreadable says why the member's log could not be read from its data (a read-log Job
	// failed), or is empty. Only read while quorum is lost for good and etcd does not answer.
	LogUnreadable string

	// While etcd does not answer a member list (quorum lost):
	// Answering: the member answered the operator's status call itself.
	Answering bool
	// FollowsLeader is the ID of the leader the answering member follows, or 0. A member
	// follows a leader only while it hears from one (else it campaigns): a leader with a
	// quorum serves somewhere the operator does not reach.
	FollowsLeader uint64
	// Answered is the address at which a probe of a member that did not answer its status call
	// found something listening, or "": probed at every address it is known by (its pod's IP,
	// its DNS name; client and peer ports).
	Answered string
	// DeclaredLost: a person declared the member lost (etcdv1alpha1.AnnotationLostMembers),
	// having checked that its machine is down.
	DeclaredLost bool
	// Corrupt is the evidence that the member's data diverged from the others' (etcd's CORRUPT
	// alarm, its start-up check, the operator's hash comparison), or "" (corruption.go).
	Corrupt string
}

// InEtcd says whether etcd lists the member.
func (m Member) InEtcd() bool { return m.ID != 0 }

// Observed is everything the decision depends on.
type Observed struct {
	// Now is the time of the observation, for the bounded waits.
	Now time.Time
	// Reachable is true when etcd answered a member list: a quorum is serving.
	Reachable bool
	// EverFormed is true once the cluster has been seen formed (status.clusterID is set):
	// from then on it is never bootstrapped again.
	EverFormed bool
	// BootstrapPlan is the --initial-cluster member names recorded on bootstrap members'
	// pods and claims, while the cluster has not formed.
	BootstrapPlan []string
	Members       []Member

	DesiredSize    int
	DesiredVersion string
	// DataSurvivesPod is false with ephemeral storage: a member's data dies with its pod.
	DataSurvivesPod bool
	Paused          bool
	// AwaitingRestore names the EtcdRestore preparing the first member's data: until it has,
	// the cluster must not form, or it would form empty.
	AwaitingRestore string
	// RestoreSeed is, during an in-place restore, the first of the members whose claims hold
	// the restored data; its claim's plan (BootstrapPlan) names them all. The old members are
	// stopped, and the cluster forms again from the restored members alone (restore.go).
	RestoreSeed string
	// AuthPending: the spec asks for authentication and etcd does not have it on yet.
	AuthPending bool
	// RootPasswordOutdated: authentication is on, and etcd's root password is not the one in
	// the spec's Secret (the user rotated it).
	RootPasswordOutdated bool
	// Defragmenting is the member being defragmented (in the background), or "": nothing else
	// is done meanwhile, as the member answers nothing until it is done.
	Defragmenting string
	// Defrag is the defragmentation policy.
	Defrag DefragPolicy
	// NoSpaceAlarm: etcd raised NOSPACE and refuses writes.
	NoSpaceAlarm bool
	// CorruptAlarms are the member IDs etcd raised CORRUPT for (members removed since
	// included): while one is raised, etcd refuses every write.
	CorruptAlarms []uint64
	// QuotaBytes is the backend quota the members run with.
	QuotaBytes int64

	// LastVoters are the voting members etcd listed when it last answered: what a lost quorum
	// is counted against while it does not.
	LastVoters []string
	// LastMembers are all the members etcd listed when it last answered, learners included:
	// while it does not, only their pods are made again. A member it no longer listed was
	// removed, or left out of a forced cluster, and its data belongs to a membership that must
	// never serve again.
	LastMembers []string
	// Recovery says what may be done when quorum is lost for good.
	Recovery RecoveryPolicy
}

// RecoveryPolicy is what the user allows once quorum is lost for good, and how far a recovery
// under way has gone (recorded in status.quorumRecovery).
type RecoveryPolicy struct {
	// Automatic: spec.quorumLossRecovery.policy is ForceNewCluster or FromLatestBackup.
	Automatic bool
	// FromBackup: the policy is FromLatestBackup; with no member's data left, the cluster is
	// restored in place from LatestBackup, the EtcdBackup of the cluster with the newest
	// completed snapshot ("" if it has none).
	FromBackup   bool
	LatestBackup string
	// After is how long quorum must have been lost before an automatic recovery begins, and
	// LostSince when it was lost (the cluster stopped being available): a blip is not a
	// disaster.
	After     time.Duration
	LostSince time.Time
	// From is the member the user asked to recover from (the recover-from annotation), or "".
	From string
	// Underway is the member a recovery under way builds on, or "". Once begun, a recovery is
	// carried through from that member: its pod is stopped to copy its data, and its raft
	// index cannot be read again meanwhile.
	Underway string
	// UnderwayIndex is how far Underway's log reached when the recovery began (0: not known);
	// Named, that the user named it (recover-from), whatever its log.
	UnderwayIndex uint64
	Named         bool
	// Preserved: a copy of Underway's data is kept.
	Preserved bool
	// Forced: Underway's pod was made with --force-new-cluster. From then on it may serve as
	// a cluster of its own, and the recovery is never given up for another member.
	Forced bool
	// Served: Underway has served as a cluster of one since its forced restart. The rewriting
	// is over; the usual steps add the other members back.
	Served bool
	// UnderwayRestore is the EtcdRestore a recovery from a backup under way is carried out by,
	// or ""; RestoreExists says whether it exists. Once the restored member serves (Served),
	// the usual steps add the other members back.
	UnderwayRestore string
	RestoreExists   bool
	// DoneWithout are the last voters the recovery under way does without (recorded when it
	// began): before each of its steps none may answer, and before the force their pods are
	// stopped.
	DoneWithout []string
	// Forsaken is the forced member of a recovery given up after the force, before it served:
	// its data is a history of its own, which acknowledged no write. It never runs again on it:
	// while etcd does not answer it counts as lost, its claim kept, and while a quorum serves it
	// is removed and replaced.
	Forsaken string
}

// DefragPolicy says when a member's database is worth defragmenting.
type DefragPolicy struct {
	Enabled bool
	// ThresholdPercent of the file that must be free space.
	ThresholdPercent int64
	// MinBytes below which a file is left alone.
	MinBytes int64
	// MinFreeBytes is the least free space worth a defragmentation. bbolt keeps a few free
	// pages after any defragmentation, so a small file shows a share free right after one: by
	// the share alone, it would be defragmented again at every look, the member blocked each
	// time for nothing.
	MinFreeBytes int64
}

// Action is the kind of step.
type Action string

const (
	// Wait: nothing to do now, or nothing safe; Reason says which.
	Wait Action = "Wait"
	// Bootstrap: create Size members that form the cluster together.
	Bootstrap Action = "Bootstrap"
	// CreateBootstrapMembers: create the pods (and claims) of the bootstrap plan still missing.
	CreateBootstrapMembers Action = "CreateBootstrapMembers"
	// RestartMembers: recreate the pods of members whose data is intact on their claims.
	RestartMembers Action = "RestartMembers"
	// StartMember: create the claim and pod of a member etcd lists but that never started (a new
	// learner, or a bootstrap member whose pod was never made).
	StartMember Action = "StartMember"
	// AddLearner: add a new member to etcd as a learner, then create its claim and pod.
	AddLearner Action = "AddLearner"
	// PromoteLearner: make a caught-up learner a voter.
	PromoteLearner Action = "PromoteLearner"
	// MoveLeader: hand leadership from Member to Target before Member is removed or upgraded.
	MoveLeader Action = "MoveLeader"
	// RemoveMember: remove Member from etcd (its pod and claim go next, as orphans).
	RemoveMember Action = "RemoveMember"
	// DeleteOrphans: delete pods and claims of members etcd no longer lists.
	DeleteOrphans Action = "DeleteOrphans"
	// UpgradeMember: restart Member's pod on the desired version.
	UpgradeMember Action = "UpgradeMember"
	// EnableAuth: create the root user and turn authentication on, once the cluster is
	// complete and healthy.
	EnableAuth Action = "EnableAuth"
	// ChangeRootPassword: give etcd's root user the password of the spec's Secret.
	ChangeRootPassword Action = "ChangeRootPassword"
	// Defragment: rewrite Member's database file to give back freed space.
	Defragment Action = "Defragment"
	// DisarmNoSpace: clear the NOSPACE alarm once the space is back.
	DisarmNoSpace Action = "DisarmNoSpace"
	// StopMembers: delete the pods of Members, keeping their claims (an in-place restore, or
	// members of a cluster that never formed, to be made again from a corrected spec).
	StopMembers Action = "StopMembers"
	// ResetBootstrapMembers: delete the pods and never-bound claims of Members of a cluster
	// that never formed, so that the bootstrap makes them again from the corrected spec.
	ResetBootstrapMembers Action = "ResetBootstrapMembers"
	// RollMember: delete Member's pod so that it is made again from the current spec, on the
	// same claim (its data survives).
	RollMember Action = "RollMember"
	// RecordPodSpec: record on Members' pods, made by an earlier operator version, that they
	// run the current spec (nothing restarts).
	RecordPodSpec Action = "RecordPodSpec"
	// ExpandClaims: raise Members' claims to spec.storage.size.
	ExpandClaims Action = "ExpandClaims"
	// BeginRecovery: record that quorum, lost for good, is recovered from Member (nothing
	// changes yet: the record makes the choice stick while the member is stopped).
	BeginRecovery Action = "BeginRecovery"
	// PreserveData: stop Member and keep a copy of its data before a recovery rewrites it.
	PreserveData Action = "PreserveData"
	// FenceMembers: delete the pods of Members, the members a recovery does without, before
	// the survivor is forced: none may serve beside it.
	FenceMembers Action = "FenceMembers"
	// ForceNewCluster: restart Member with --force-new-cluster, a cluster of one with its data.
	ForceNewCluster Action = "ForceNewCluster"
	// RestoreFromBackup: create the in-place EtcdRestore of the recovery under way, from its
	// recorded backup (no member's data survived).
	RestoreFromBackup Action = "RestoreFromBackup"
	// ReadLogs: read how far the raft logs of Members reach from their data, with a Job each
	// (quorum is lost for good and they do not answer). Read-only: nothing is stopped.
	ReadLogs Action = "ReadLogs"
	// AbandonRecovery: close the record of the recovery under way, which can no longer be
	// carried through (its member's data is gone); the loss is then decided afresh.
	AbandonRecovery Action = "AbandonRecovery"
	// FenceFromClients: take the pods of Members out of the client Service, leaving them
	// running (a corrupt member's vote may still be needed for the quorum).
	FenceFromClients Action = "FenceFromClients"
	// DisarmCorrupt: clear etcd's CORRUPT alarm for MemberID, replaced.
	DisarmCorrupt Action = "DisarmCorrupt"
)

// Step is the one thing to do next.
type Step struct {
	Action Action
	// Member acted on, for single-member actions.
	Member string
	// MemberID is etcd's ID of Member, when it has one.
	MemberID uint64
	// Target is the member leadership moves to (MoveLeader).
	Target uint64
	// Members acted on, for actions on several members at once (bootstrap, restarts, orphans).
	Members []string
	// Size of a new bootstrap.
	Size int
	// Unforced: AbandonRecovery of a recovery whose forced pod never ran: the member's data was
	// never rewritten, and the record no longer says it was forced.
	Unforced bool
	// Backup is the EtcdBackup a recovery restores (BeginRecovery with no surviving member).
	Backup string
	// Reason says why, for events and conditions.
	Reason string
	// Operation is the condition reason the step belongs to (ScalingUp, Upgrading, ...).
	Operation string
}

// Operation names: the EtcdCluster condition reasons they are reported under.
const (
	OpBootstrapping        = etcdv1alpha1.ReasonBootstrapping
	OpScalingUp            = etcdv1alpha1.ReasonScalingUp
	OpScalingDown          = etcdv1alpha1.ReasonScalingDown
	OpReplacingMember      = etcdv1alpha1.ReasonReplacingMember
	OpPromoting            = etcdv1alpha1.ReasonPromotingLearner
	OpUpgrading            = etcdv1alpha1.ReasonUpgrading
	OpRecovering           = etcdv1alpha1.ReasonRecoveringMembers
	OpQuorumLost           = etcdv1alpha1.ReasonQuorumLost
	OpPaused               = etcdv1alpha1.ReasonPaused
	OpRestoring            = etcdv1alpha1.ReasonRestoring
	OpUnhealthy            = etcdv1alpha1.ReasonMembersUnhealthy
	OpEnablingAuth         = etcdv1alpha1.ReasonEnablingAuth
	OpChangingRootPassword = etcdv1alpha1.ReasonChangingRootPassword
	OpDefragmenting        = etcdv1alpha1.ReasonDefragmenting
	OpNoSpace              = etcdv1alpha1.ReasonAlarm
	OpRollingOut           = etcdv1alpha1.ReasonRollingOut
	OpRecoveringQuorum     = etcdv1alpha1.ReasonRecoveringQuorum
	OpReplacingCorrupt     = etcdv1alpha1.ReasonReplacingCorruptMember
	// OpRotatingCA is never decided here: a CA rotation (internal/certs) moves only once the
	// cluster is Settled, and its restarts are RollMember steps of this operation.
	OpRotatingCA = etcdv1alpha1.ReasonRotatingCA
	OpNone       = ""
)

// LearnerStartTimeout is how long a learner's pod may take to start before the learner is
// removed again: long enough for an image pull and a slow volume, short enough that a pod that
// can never run (unschedulable, no image) does not hold scale-down, upgrades or auth for good.
const LearnerStartTimeout = 5 * time.Minute

// MaxLagEntries is how far behind the leader's log a member may be and still count as caught
// up: a few seconds of writes at most, while a member replaying after a restart is far behind.
const MaxLagEntries = 1000

// Quorum is the number of voters needed for a majority of n.
func Quorum(n int) int { return n/2 + 1 }

// Next decides the next step.
func Next(o Observed) Step {
	if o.Paused {
		return Step{Action: Wait, Operation: OpPaused, Reason: "spec.paused is true: no changes are made"}
	}
	if o.RestoreSeed != "" {
		if step, ok := restoreInPlace(o); ok {
			return step
		}
	} else if o.AwaitingRestore != "" && !o.EverFormed {
		return Step{Action: Wait, Operation: OpRestoring,
			Reason: "EtcdRestore " + o.AwaitingRestore + " is preparing the first member's data from a snapshot"}
	}
	if !o.Reachable {
		return nextWithoutQuorum(o)
	}
	forced := names(o.Members, func(m Member) bool { return m.ForcedNewCluster && m.PodExists && !m.PodTerminating })
	if len(forced) > 0 {
		// Before anything joins: restarted with the flag again, it would drop every member
		// added since.
		return Step{Action: RollMember, Member: forced[0], Operation: OpRecoveringQuorum,
			Reason: "the member serves as a cluster of its own: restarting it without --force-new-cluster before members are added back"}
	}
	if o.Defragmenting != "" {
		return Step{Action: Wait, Member: o.Defragmenting, Operation: OpDefragmenting,
			Reason: "defragmenting the member's database; it answers nothing until done"}
	}
	if o.RootPasswordOutdated {
		// A credential change waits for nothing but a quorum: a rotated password may be one
		// that leaked, and no member's health makes the old one safer.
		return Step{Action: ChangeRootPassword, Operation: OpChangingRootPassword,
			Reason: "changing the root password to the one in spec.auth.rootSecretName"}
	}
	for _, decide := range []func(Observed) (Step, bool){
		replaceCorrupt,
		startOrReplaceMissingPods,
		replaceMembersOnLostNodes,
		deleteOrphans,
		promoteLearner,
		scaleUp,
		scaleDown,
		upgrade,
		rollOutdated,
	} {
		if step, ok := decide(o); ok {
			return step
		}
	}
	unhealthy := names(o.Members, func(m Member) bool { return m.InEtcd() && !m.Healthy })
	if len(unhealthy) > 0 {
		return Step{Action: Wait, Operation: OpUnhealthy, Members: unhealthy, Reason: "waiting for unhealthy members to recover"}
	}
	if step, ok := corruptRemains(o); ok {
		return step
	}
	if step, ok := disarmCorrupt(o); ok {
		return step
	}
	if o.AuthPending {
		return Step{Action: EnableAuth, Operation: OpEnablingAuth, Reason: "creating the root user and enabling authentication"}
	}
	if step, ok := maintainSpace(o); ok {
		return step
	}
	if step, ok := expandClaims(o); ok {
		return step
	}
	if step, ok := recordPodSpec(o); ok {
		return step
	}
	return Step{Action: Wait, Reason: reasonSettled}
}

const reasonSettled = "cluster matches its spec"

// Settled says whether step is the one of a cluster with nothing to do: every member healthy,
// the spec met.
func Settled(step Step) bool {
	return step.Action == Wait && step.Operation == OpNone && step.Reason == reasonSettled
}

func nextBootstrapStep(o Observed) Step {
	if step, ok := correctBootstrap(o); ok {
		return step
	}
	if len(o.BootstrapPlan) == 0 {
		if slices.ContainsFunc(o.Members, func(m Member) bool { return m.PodExists || m.PVCExists }) {
			// Pods or claims without a plan were not made by a bootstrap of this cluster:
			// never form a new cluster over them.
			return Step{Action: Wait, Operation: OpBootstrapping,
				Reason: "member pods or claims exist without a bootstrap plan; refusing to bootstrap over them"}
		}
		return Step{Action: Bootstrap, Size: o.DesiredSize, Operation: OpBootstrapping,
			Reason: "creating the initial members"}
	}
	byName := index(o.Members)
	var missing []string
	for _, name := range o.BootstrapPlan {
		if m, ok := byName[name]; !ok || !m.PodExists {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return Step{Action: CreateBootstrapMembers, Members: missing, Operation: OpBootstrapping,
			Reason: "creating the initial members still missing"}
	}
	return Step{Action: Wait, Operation: OpBootstrapping, Reason: "waiting for the initial members to form the cluster"}
}

// correctBootstrap applies a corrected spec to a cluster that never formed: members that cannot
// run (no image of that version, no such StorageClass, requests no node meets) hold no data,
// so they are made again rather than left waiting for a spec they no longer have. A member
// that runs is left to form the cluster.
func correctBootstrap(o Observed) (Step, bool) {
	cannotRun := func(m Member) bool { return m.PodExists && !m.PodTerminating && m.PodProblem != "" }
	reset := names(o.Members, func(m Member) bool { return m.PVCUnboundOutdated && (cannotRun(m) || !m.PodExists) })
	if len(reset) > 0 {
		return Step{Action: ResetBootstrapMembers, Members: reset, Operation: OpBootstrapping,
			Reason: "making again, from the corrected spec, members whose claims were never bound"}, true
	}
	version := names(o.Members, func(m Member) bool { return cannotRun(m) && m.PodVersion != o.DesiredVersion && !m.PodOutdated })
	if len(version) > 0 {
		return Step{Action: UpgradeMember, Member: version[0], Operation: OpBootstrapping,
			Reason: "starting the member, which cannot run as it is, on the corrected version " + o.DesiredVersion}, true
	}
	stop := names(o.Members, func(m Member) bool { return cannotRun(m) && m.PodOutdated })
	if len(stop) > 0 {
		return Step{Action: StopMembers, Members: stop, Operation: OpBootstrapping,
			Reason: "making again, from the corrected spec, member pods that cannot run"}, true
	}
	return Step{}, false
}

// startOrReplaceMissingPods handles members etcd lists but that have no pod: those that never
// started are started first, then the others restarted on their data or replaced. A member is
// never removed while a learner added before has not started: its pod names the members as they
// were when it was made.
func startOrReplaceMissingPods(o Observed) (Step, bool) {
	for _, m := range o.Members {
		if m.InEtcd() && !m.PodExists && !m.Started {
			return Step{Action: StartMember, Member: m.Name, MemberID: m.ID, Operation: OpScalingUp,
				Reason: "starting a member etcd already lists"}, true
		}
	}
	for _, m := range o.Members {
		if !m.InEtcd() || m.PodExists {
			continue
		}
		// (The comparison stands outside the switch: the mutation tester cannot see a test run a
		// switch case's expression.)
		restartable := o.DataSurvivesPod && m.PVCExists && m.Name != o.Recovery.Forsaken
		switch {
		case restartable:
			return Step{Action: RestartMembers, Members: []string{m.Name}, Operation: OpRecovering,
				Reason: "recreating the pod of a member whose data is intact"}, true
		default:
			// Its data is gone, or is a history of its own (forced, then given up): restarting
			// it under the same ID would let it vote without the log it acknowledged, or serve
			// that other history. Remove it; scale-up then adds a fresh member.
			if learner, ok := unstartedLearner(o); ok {
				return learnerNotStarted(o, learner)
			}
			if step, ok := removeIfSafe(o, m, OpReplacingMember, "member's data is gone; removing it to replace it"); ok {
				return step, true
			}
			return Step{Action: Wait, Member: m.Name, Operation: OpReplacingMember,
				Reason: "member's data is gone, but removing it now would lose quorum"}, true
		}
	}
	return Step{}, false
}

// replaceMembersOnLostNodes removes, while a quorum serves, a member whose data is out of reach
// for the recovery's wait: its node has not answered the API server (its pod evicted, never
// ending), or its pod has found no node (its volume's node is gone: deleted with its machine).
// It would otherwise be waited for as long as the node is gone. With a quorum serving here, the
// member cannot be part of another; removed, etcd refuses it should it come back, and scale-up
// adds a fresh member in its place. Only when the healthy voters left are a quorum
// (removeIfSafe).
func replaceMembersOnLostNodes(o Observed) (Step, bool) {
	for _, m := range o.Members {
		if !m.InEtcd() {
			continue
		}
		reason := ""
		if outOfReachFor(m.NodeLostSince, o) {
			reason = "the member's node has not answered for " + o.Recovery.after().String()
		} else if outOfReachFor(m.UnscheduledSince, o) && !m.Healthy {
			reason = "the member's pod has found no node for " + o.Recovery.after().String() + ": its volume's node may be gone"
		} else {
			continue
		}
		if step, ok := removeIfSafe(o, m, OpReplacingMember, reason+" (spec.quorumLossRecovery.after); removing it to replace it"); ok {
			return step, true
		}
		return Step{Action: Wait, Member: m.Name, Operation: OpReplacingMember,
			Reason: reason + ", but removing it now would lose quorum"}, true
	}
	return Step{}, false
}

func deleteOrphans(o Observed) (Step, bool) {
	// A terminating pod is waited for (the scale-down is not over while it holds its volume),
	// but not one whose node stopped answering: it may never end, and must not hold the
	// cluster's other steps.
	orphans := names(o.Members, func(m Member) bool {
		return !m.InEtcd() && ((m.PodExists && m.NodeLostSince.IsZero()) || m.PVCExists)
	})
	if len(orphans) == 0 {
		return Step{}, false
	}
	return Step{Action: DeleteOrphans, Members: orphans, Operation: OpScalingDown,
		Reason: "deleting the pods and claims of members no longer in the cluster"}, true
}

// unstartedLearner is a learner etcd lists that has not started yet.
func unstartedLearner(o Observed) (Member, bool) {
	i := slices.IndexFunc(o.Members, func(m Member) bool { return m.InEtcd() && m.IsLearner && !m.Started })
	if i < 0 {
		return Member{}, false
	}
	return o.Members[i], true
}

func promoteLearner(o Observed) (Step, bool) {
	for _, m := range o.Members {
		if m.InEtcd() && m.IsLearner {
			if !m.Started || !m.PodExists {
				return learnerNotStarted(o, m)
			}
			if !promotionKeepsQuorum(o, m) {
				return Step{Action: Wait, Member: m.Name, Operation: OpPromoting,
					Reason: "waiting for members to be healthy before promoting the learner: promoted now, the healthy voters would not be a quorum"}, true
			}
			return Step{Action: PromoteLearner, Member: m.Name, MemberID: m.ID, Operation: OpPromoting,
				Reason: "promoting the learner to a voting member"}, true
		}
	}
	return Step{}, false
}

// promotionKeepsQuorum: once learner votes, the healthy voters are still a quorum of the voters.
// A promoted learner that is not healthy (its pod not ready, behind the leader) is one voter more
// that cannot vote.
func promotionKeepsQuorum(o Observed, learner Member) bool {
	voters := count(o.Members, func(x Member) bool { return x.InEtcd() && !x.IsLearner })
	voters++ // the learner, once promoted
	healthy := count(o.Members, func(x Member) bool { return x.InEtcd() && !x.IsLearner && x.Healthy })
	if learner.Healthy {
		healthy++
	}
	return healthy >= Quorum(voters)
}

// learnerNotStarted waits for a learner's pod, for LearnerStartTimeout at most; then, or at
// once when a scale-down makes the learner surplus, it removes the learner, which never costs
// quorum. Its pod and claim go next, as orphans.
func learnerNotStarted(o Observed, m Member) (Step, bool) {
	surplus := count(o.Members, Member.InEtcd) > o.DesiredSize
	timedOut := m.PodExists && o.Now.Sub(m.PodCreated) > LearnerStartTimeout
	problem := ""
	if m.PodProblem != "" {
		problem = ": " + m.PodProblem
	}
	switch {
	case surplus:
		return Step{Action: RemoveMember, Member: m.Name, MemberID: m.ID, Operation: OpScalingDown,
			Reason: "removing a learner that has not started, as the cluster is scaling down" + problem}, true
	case m.PodExists && !m.PodTerminating && m.InitialClusterStale:
		return Step{Action: StopMembers, Members: []string{m.Name}, Operation: OpPromoting,
			Reason: "restarting the learner with the members as they are now: its pod names a member removed since it was made, and etcd refuses to start it"}, true
	case timedOut:
		return Step{Action: RemoveMember, Member: m.Name, MemberID: m.ID, Operation: OpPromoting,
			Reason: "removing a learner whose pod did not start within " + LearnerStartTimeout.String() + problem}, true
	}
	return Step{Action: Wait, Member: m.Name, Operation: OpPromoting, Reason: "waiting for the learner to start" + problem}, true
}

func scaleUp(o Observed) (Step, bool) {
	inEtcd := count(o.Members, Member.InEtcd)
	if inEtcd >= o.DesiredSize {
		return Step{}, false
	}
	unhealthy := names(o.Members, func(m Member) bool { return m.InEtcd() && !m.Healthy })
	if len(unhealthy) > 0 {
		return Step{Action: Wait, Members: unhealthy, Operation: OpScalingUp,
			Reason: "waiting for every member to be healthy before adding one"}, true
	}
	return Step{Action: AddLearner, Operation: OpScalingUp, Reason: "adding a member as a learner"}, true
}

func scaleDown(o Observed) (Step, bool) {
	inEtcd := filter(o.Members, Member.InEtcd)
	if len(inEtcd) <= o.DesiredSize {
		return Step{}, false
	}
	victim := slices.MinFunc(inEtcd, removalOrder)
	if victim.IsLeader {
		if target, ok := bestTransferee(inEtcd, victim); ok {
			return Step{Action: MoveLeader, Member: victim.Name, MemberID: victim.ID, Target: target.ID,
				Operation: OpScalingDown, Reason: "moving leadership off the member to be removed"}, true
		}
	}
	if step, ok := removeIfSafe(o, victim, OpScalingDown, "removing a member to scale down"); ok {
		return step, true
	}
	return Step{Action: Wait, Member: victim.Name, Operation: OpScalingDown,
		Reason: "removing a member now would lose quorum; waiting for members to recover"}, true
}

// removalOrder puts first the member whose removal costs least: unhealthy before healthy,
// learners before voters, followers before the leader, the newest before the oldest. It
// compares identities and facts, never names.
func removalOrder(a, b Member) int {
	return cmp.Or(
		boolFirst(!a.Healthy, !b.Healthy),
		boolFirst(a.IsLearner, b.IsLearner),
		boolFirst(!a.IsLeader, !b.IsLeader),
		b.PodCreated.Compare(a.PodCreated),
		cmp.Compare(b.ID, a.ID),
	)
}

// boolFirst orders true before false. (Its comparisons stand in ifs, not switch cases, here and
// in the recovery: the mutation tester cannot see a test run a switch case's expression.)
func boolFirst(a, b bool) int {
	if a == b {
		return 0
	}
	if a {
		return -1
	}
	return 1
}

// bestTransferee is the healthy voter, other than from and not corrupt, with the most of the
// log.
func bestTransferee(members []Member, from Member) (Member, bool) {
	candidates := filter(members, func(m Member) bool { return m.ID != from.ID && m.Healthy && !m.IsLearner && m.Corrupt == "" })
	if len(candidates) == 0 {
		return Member{}, false
	}
	return slices.MaxFunc(candidates, func(a, b Member) int { return cmp.Compare(a.RaftIndex, b.RaftIndex) }), true
}

// removeIfSafe removes m only if the healthy voters left are still a quorum of the voters left.
func removeIfSafe(o Observed, m Member, op, reason string) (Step, bool) {
	voters := count(o.Members, func(x Member) bool { return x.InEtcd() && !x.IsLearner })
	healthyVoters := count(o.Members, func(x Member) bool { return x.InEtcd() && !x.IsLearner && x.Healthy })
	if !m.IsLearner {
		voters--
		if m.Healthy {
			healthyVoters--
		}
	}
	if voters < 1 || healthyVoters < Quorum(voters) {
		return Step{}, false
	}
	return Step{Action: RemoveMember, Member: m.Name, MemberID: m.ID, Operation: op, Reason: reason}, true
}

// upgrade rolls one member at a time to the desired version, the leader last, each step only
// when every member is healthy and the previous one reports its new version.
func upgrade(o Observed) (Step, bool) {
	inEtcd := filter(o.Members, Member.InEtcd)
	pending := filter(inEtcd, func(m Member) bool { return m.PodVersion != o.DesiredVersion })
	if len(pending) == 0 {
		return Step{}, false
	}
	for _, m := range inEtcd {
		if m.PodVersion == o.DesiredVersion && (m.Version != o.DesiredVersion || !m.Healthy) {
			if m.PodProblem != "" {
				return Step{Action: Wait, Member: m.Name, Operation: OpUpgrading,
					Reason: "upgrade halted: the member cannot run version " + o.DesiredVersion + ": " + m.PodProblem +
						"; fix the cause, or set spec.version back to the version the other members run"}, true
			}
			return Step{Action: Wait, Member: m.Name, Operation: OpUpgrading,
				Reason: "waiting for the upgraded member to report the new version and be healthy"}, true
		}
	}
	unhealthy := filter(inEtcd, func(m Member) bool { return !m.Healthy })
	if len(unhealthy) == 1 && unhealthy[0].PodVersion != o.DesiredVersion && unhealthy[0].PodProblem != "" {
		// The one member down cannot run as it is and is itself due for a change of version (a
		// rollback of a stuck upgrade, or a member crash-looping on the old version):
		// restarting it costs no availability.
		m := unhealthy[0]
		return Step{Action: UpgradeMember, Member: m.Name, MemberID: m.ID, Operation: OpUpgrading,
			Reason: "restarting the unavailable member on version " + o.DesiredVersion}, true
	}
	if len(unhealthy) > 0 {
		return Step{Action: Wait, Operation: OpUpgrading, Reason: "waiting for every member to be healthy before the next upgrade step"}, true
	}
	next := slices.MinFunc(pending, func(a, b Member) int {
		return cmp.Or(boolFirst(!a.IsLeader, !b.IsLeader), cmp.Compare(a.ID, b.ID))
	})
	if next.IsLeader && len(inEtcd) > 1 {
		if target, ok := bestTransferee(inEtcd, next); ok {
			return Step{Action: MoveLeader, Member: next.Name, MemberID: next.ID, Target: target.ID,
				Operation: OpUpgrading, Reason: "moving leadership off the member to be upgraded"}, true
		}
	}
	return Step{Action: UpgradeMember, Member: next.Name, MemberID: next.ID, Operation: OpUpgrading,
		Reason: "restarting the member on the new version"}, true
}

// rollOutdated restarts, one at a time, the members whose pods were made from an earlier spec
// (pod template, tuning, repository), as an upgrade does: only while every member is healthy,
// followers first, the leader last after leadership has moved. The pod is made again on the
// same claim; with ephemeral storage the member's data goes with it, and the member is
// replaced the usual way.
func rollOutdated(o Observed) (Step, bool) {
	inEtcd := filter(o.Members, Member.InEtcd)
	outdated := filter(inEtcd, func(m Member) bool { return m.PodOutdated && m.PodExists })
	if len(outdated) == 0 {
		return Step{}, false
	}
	unhealthy := filter(inEtcd, func(m Member) bool { return !m.Healthy })
	if len(unhealthy) == 1 && unhealthy[0].PodOutdated && unhealthy[0].PodExists && unhealthy[0].PodProblem != "" {
		// The one member down cannot run on the spec it was made from (a nodeSelector no node
		// has, a limit it cannot start with) and the spec has changed since, typically reverted:
		// restarting it costs no availability.
		m := unhealthy[0]
		return Step{Action: RollMember, Member: m.Name, MemberID: m.ID, Operation: OpRollingOut,
			Reason: "restarting the unavailable member on the current spec: it cannot run on the one it was made from (" + m.PodProblem + ")"}, true
	}
	if len(unhealthy) > 0 {
		return Step{Action: Wait, Members: names(unhealthy, func(Member) bool { return true }), Operation: OpRollingOut,
			Reason: "waiting for every member to be healthy before restarting the next on the changed spec"}, true
	}
	next := slices.MinFunc(outdated, func(a, b Member) int {
		return cmp.Or(boolFirst(!a.IsLeader, !b.IsLeader), cmp.Compare(a.ID, b.ID))
	})
	if next.IsLeader && len(inEtcd) > 1 {
		if target, ok := bestTransferee(inEtcd, next); ok {
			return Step{Action: MoveLeader, Member: next.Name, MemberID: next.ID, Target: target.ID, Operation: OpRollingOut,
				Reason: "moving leadership off the member to be restarted on the changed spec"}, true
		}
	}
	return Step{Action: RollMember, Member: next.Name, MemberID: next.ID, Operation: OpRollingOut,
		Reason: "restarting the member on the changed spec (" + strconv.Itoa(len(outdated)) + " of " + strconv.Itoa(len(inEtcd)) + " outdated)"}, true
}

// expandClaims raises claims to a grown spec.storage.size; the volume grows under the running
// member where the StorageClass allows it.
func expandClaims(o Observed) (Step, bool) {
	small := names(o.Members, func(m Member) bool { return m.InEtcd() && m.PVCExists && m.PVCTooSmall })
	if len(small) == 0 {
		return Step{}, false
	}
	return Step{Action: ExpandClaims, Members: small, Operation: OpRollingOut, Reason: "expanding the members' claims to spec.storage.size"}, true
}

// recordPodSpec marks pods made by an earlier operator version as running the current spec: it
// cannot know better, and restarting every member on an operator upgrade would cost more than
// it proves.
func recordPodSpec(o Observed) (Step, bool) {
	unrecorded := names(o.Members, func(m Member) bool { return m.InEtcd() && m.PodExists && m.PodSpecUnrecorded })
	if len(unrecorded) == 0 {
		return Step{}, false
	}
	return Step{Action: RecordPodSpec, Members: unrecorded, Operation: OpRollingOut, Reason: "recording the spec that pods made by an earlier operator version run"}, true
}

// DefragMinFreeBytes is the least free space the operator defragments a member for
// (DefragPolicy.MinFreeBytes): far more than the few pages bbolt keeps free after any
// defragmentation, and little beside the database sizes worth defragmenting.
const DefragMinFreeBytes = 1 << 20

// noSpaceFreePercent is the free share that makes a member worth defragmenting while NOSPACE
// blocks writes, whatever the policy's threshold: any real gain lets writes through sooner.
const noSpaceFreePercent = 5

// maintainSpace defragments one member at a time, followers before the leader (defragmenting
// blocks the member, and a blocked leader stalls the cluster), the most wasteful first; under
// NOSPACE it then disarms the alarm, if the live data fits the quota again. It only runs while
// every member is healthy.
func maintainSpace(o Observed) (Step, bool) {
	if !o.Defrag.Enabled && !o.NoSpaceAlarm {
		return Step{}, false
	}
	threshold, minBytes, minFree := o.Defrag.ThresholdPercent, o.Defrag.MinBytes, o.Defrag.MinFreeBytes
	if o.NoSpaceAlarm {
		threshold, minBytes, minFree = noSpaceFreePercent, 0, 0
	}
	wasteful := filter(o.Members, func(m Member) bool {
		free := m.DBSizeBytes - m.DBSizeInUseBytes
		worthIt := free >= minFree && free*100 >= threshold*m.DBSizeBytes
		return m.InEtcd() && m.Started && m.DBSizeBytes >= minBytes && m.DBSizeBytes > 0 && worthIt
	})
	if len(wasteful) > 0 {
		m := slices.MinFunc(wasteful, func(a, b Member) int {
			return cmp.Or(boolFirst(!a.IsLeader, !b.IsLeader),
				cmp.Compare(b.DBSizeBytes-b.DBSizeInUseBytes, a.DBSizeBytes-a.DBSizeInUseBytes))
		})
		if m.IsLeader {
			// Defragmenting blocks the member; a blocked leader stalls every write.
			if target, ok := bestTransferee(o.Members, m); ok {
				return Step{Action: MoveLeader, Member: m.Name, MemberID: m.ID, Target: target.ID, Operation: OpDefragmenting,
					Reason: "moving leadership off the member to be defragmented"}, true
			}
		}
		return Step{Action: Defragment, Member: m.Name, MemberID: m.ID, Operation: OpDefragmenting,
			Reason: "defragmenting the member's database to give back free space"}, true
	}
	if !o.NoSpaceAlarm {
		return Step{}, false
	}
	for _, m := range o.Members {
		if o.QuotaBytes > 0 && m.DBSizeInUseBytes*10 >= o.QuotaBytes*9 {
			return Step{Action: Wait, Member: m.Name, Operation: OpNoSpace,
				Reason: "NOSPACE: the live data is within 10% of tuning.quotaBackendBytes; raise the quota or delete data"}, true
		}
	}
	return Step{Action: DisarmNoSpace, Operation: OpNoSpace, Reason: "space is back; disarming the NOSPACE alarm"}, true
}

func index(members []Member) map[string]Member {
	out := make(map[string]Member, len(members))
	for _, m := range members {
		out[m.Name] = m
	}
	return out
}

func filter(members []Member, keep func(Member) bool) []Member {
	var out []Member
	for _, m := range members {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

func count(members []Member, keep func(Member) bool) int { return len(filter(members, keep)) }

func names(members []Member, keep func(Member) bool) []string {
	var out []string
	for _, m := range filter(members, keep) {
		out = append(out, m.Name)
	}
	return out
}
