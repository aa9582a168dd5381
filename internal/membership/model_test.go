package membership

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// The quorum-loss recovery checked against a model of the world, not against the cases its
// authors thought of. A world is a cluster of 3 or 5 members on 3 to 5 nodes, each member with
// a claim on its node's disk, a pod, and data: the history (lineage) its log belongs to and how
// far the log reaches. Between the operator's steps, events are drawn at random: a node stops
// (its machine off), is cut off (its machine runs on, out of the operator's sight) or comes
// back, or its Node object is deleted; a claim is deleted (it stays Terminating while its pod
// runs); a pod is deleted; an etcd crash-loops; a person declares a member lost (rightly, its
// machine off, or wrongly, while it runs) or names the member to recover from; clients write;
// time passes; the operator stops between a step and its record; a member's data is found
// corrupt (fewer members than a quorum, over the world's life). The operator's step is
// membership.Next on what the operator would observe, carried out as the reconciler carries it
// out, with status recorded as the reconciler records it. etcd's own rules decide who serves:
// a quorum of the voters of one history, a removed member refused, --force-new-cluster forking
// a new history with the forced member alone.
//
// After every step:
//   - no split brain: at no moment do two histories each have a quorum of their voters running;
//   - no write lost by the operator's choice: no member whose log is ahead of the member a
//     recovery builds on is fenced, or left out of the forced cluster, while it answers; and no
//     claim holding writes the serving cluster lacks is deleted;
//   - a member found corrupt is never recovered from, forced, promoted or restarted on its data,
//     its claim is never deleted, and it is removed only while a quorum of the others serves;
//
// and at the end, once partitions heal and a person follows what status asks of them (declares
// lost the members whose machines are off, names the member to recover from): every world in
// which a member's data is still in reach serves again at spec.size within a bounded number of
// steps.

type nodeState int

const (
	nodeUp nodeState = iota
	// nodeCutOff: the machine runs, its pods with it, but neither the API server nor the
	// operator nor the members on other nodes reach it.
	nodeCutOff
	// nodeDown: the machine is off; its disk, and the claims on it, come back with it.
	nodeDown
)

type claimState int

const (
	claimNone claimState = iota
	claimBound
	// claimDeleting: deleted while a pod uses it; pvc-protection keeps it, data and all, until
	// the pod is gone.
	claimDeleting
	// claimReleased: kept, out of the cluster (its label removed), with its data.
	claimReleased
)

type worldNode struct {
	state nodeState
	// gone: its Node object was deleted (only once its machine is off, as a cloud does): its
	// pods' objects go with it.
	gone bool
}

type worldPod struct {
	created time.Time
	node    int // -1 while no node is found for it
	// deleting: the pod's deletion waits for a kubelet that does not answer.
	deleting   bool
	deletedAt  time.Time
	nodeLostAt time.Time
	fenced     bool
	forced     bool
	// running: its etcd ran at the last look (to see each start, and fork on each forced one).
	running bool
}

type worldMember struct {
	name    string
	id      uint64
	node    int // the node of its claim's volume, -1 until its first pod is placed
	claim   claimState
	lineage int
	log     uint64
	pod     *worldPod
	crashed bool // its etcd crash-loops: the pod stays, etcd does not run
	logRead bool // a read-log Job read its log from its data
	// corrupt: its data diverged from the others' and the operator has found it (the evidence,
	// kept in status, is observed whether or not a quorum serves).
	corrupt bool
}

// lineage is one history of the cluster: the first one, or one forked by --force-new-cluster
// from parent at fork (the forced member's log).
type lineage struct {
	voters, learners []string
	started          map[string]bool
	leader           string
	parent           int
	fork             uint64
}

type leave struct {
	value string
	setAt time.Time
}

type recoveryRecord struct {
	member                               string
	raftIndex                            uint64
	lostMembers                          []string
	byPerson                             bool
	preserved, forced, served, completed bool
	abandoned                            bool
}

// world is the model; status is what the operator keeps between reconciles, all it knows of the
// past (an operator restarted re-derives everything else).
type world struct {
	t        *rapid.T
	now      time.Time
	size     int
	auto     bool
	nodes    []worldNode
	members  []*worldMember
	lineages []*lineage
	nextID   uint64

	lastMembers, lastVoters  []string
	quorumLostAt             time.Time
	record                   *recoveryRecord
	lostMembers, recoverFrom leave

	trace []string
}

func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%3ds ", int(w.now.Sub(t0).Seconds()))+fmt.Sprintf(format, args...))
}

func (w *world) fatalf(format string, args ...any) {
	w.t.Fatalf("%s\ntrace:\n%s", fmt.Sprintf(format, args...), strings.Join(w.trace, "\n"))
}

func newWorld(t *rapid.T) *world {
	size := rapid.SampledFrom([]int{3, 5}).Draw(t, "size")
	w := &world{t: t, now: t0, size: size, auto: rapid.Bool().Draw(t, "automatic")}
	for range rapid.IntRange(3, 5).Draw(t, "nodes") {
		w.nodes = append(w.nodes, worldNode{})
	}
	first := &lineage{started: map[string]bool{}, parent: -1}
	w.lineages = []*lineage{first}
	for i := range size {
		m := w.newMember(i % len(w.nodes))
		m.claim = claimBound
		m.log = 10
		m.pod = &worldPod{created: t0, node: m.node, running: true}
		first.voters = append(first.voters, m.name)
		first.started[m.name] = true
	}
	first.leader = first.voters[0]
	w.lastMembers, w.lastVoters = slices.Clone(first.voters), slices.Clone(first.voters)
	w.logf("%d members on %d nodes, policy automatic=%v", size, len(w.nodes), w.auto)
	return w
}

func (w *world) newMember(node int) *worldMember {
	w.nextID++
	m := &worldMember{name: "m" + strconv.FormatUint(w.nextID, 10), id: w.nextID, node: node, lineage: len(w.lineages) - 1}
	w.members = append(w.members, m)
	return m
}

func (w *world) member(name string) *worldMember {
	for _, m := range w.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// running: the member's etcd runs, wherever its pod's object stands.
func (w *world) running(m *worldMember) bool {
	p := m.pod
	return p != nil && p.node >= 0 && !m.crashed && m.claim != claimNone && w.nodes[p.node].state != nodeDown
}

// side is where a running member can be reached from: 0 the operator's side, 1 cut off.
func (w *world) side(m *worldMember) int {
	if w.nodes[m.pod.node].state == nodeCutOff {
		return 1
	}
	return 0
}

// group is the members of history l running on side, voters and learners, and whether its
// voters there are a quorum: etcd serves only then.
func (w *world) group(l, side int) (members []*worldMember, serves bool) {
	lin := w.lineages[l]
	voters := 0
	for _, m := range w.members {
		if !w.running(m) || m.lineage != l || w.side(m) != side {
			continue
		}
		switch {
		case slices.Contains(lin.voters, m.name):
			voters++
		case !slices.Contains(lin.learners, m.name):
			continue // removed: refused
		}
		members = append(members, m)
	}
	return members, len(lin.voters) > 0 && voters >= Quorum(len(lin.voters))
}

// serving is the history that serves on the operator's side, if one does.
func (w *world) serving() (int, bool) {
	for l := range w.lineages {
		if _, serves := w.group(l, 0); serves {
			return l, true
		}
	}
	return 0, false
}

// settle is what happens on its own between steps: kubelets that answer end deleted pods, pods
// find nodes, etcds start (a forced one forks a new history), and members of a serving group
// catch up with its log.
func (w *world) settle() {
	for _, m := range w.members {
		p := m.pod
		if p == nil {
			continue
		}
		if p.node >= 0 && w.nodes[p.node].gone {
			m.pod, p = nil, nil
		} else if p.deleting && (p.node < 0 || w.nodes[p.node].state == nodeUp) {
			m.pod, p = nil, nil
		}
		if p == nil {
			if m.claim == claimDeleting {
				m.claim = claimNone // pvc-protection lets go: the data goes with it
				w.logf("claim of %s deleted", m.name)
			}
			continue
		}
		if p.node < 0 && !p.deleting && m.claim != claimNone {
			w.place(m)
		}
		run := w.running(m)
		if run && !p.running {
			w.started(m)
		}
		p.running = run
	}
	for l := range w.lineages {
		for side := range 2 {
			members, serves := w.group(l, side)
			if !serves {
				continue
			}
			var top uint64
			for _, m := range members {
				top = max(top, m.log)
			}
			for _, m := range members {
				m.log = top
			}
		}
	}
}

// place finds a node for a pod: its claim's, if that node runs and has its Node object; a new
// claim goes with the first pod to the node with the fewest members.
func (w *world) place(m *worldMember) {
	if m.node >= 0 {
		if n := w.nodes[m.node]; n.state == nodeUp && !n.gone {
			m.pod.node = m.node
		}
		return
	}
	best, fewest := -1, 0
	for i, n := range w.nodes {
		if n.state != nodeUp || n.gone {
			continue
		}
		count := 0
		for _, x := range w.members {
			if x.node == i && x.claim != claimNone {
				count++
			}
		}
		if best < 0 || count < fewest {
			best, fewest = i, count
		}
	}
	if best >= 0 {
		m.node, m.pod.node = best, best
	}
}

// started: m's etcd starts. With --force-new-cluster it forks a history of its own, alone.
func (w *world) started(m *worldMember) {
	if m.pod.forced {
		w.lineages = append(w.lineages, &lineage{voters: []string{m.name}, started: map[string]bool{m.name: true}, leader: m.name,
			parent: m.lineage, fork: m.log})
		m.lineage = len(w.lineages) - 1
		w.logf("%s starts forced: history %d forked from %d at %d", m.name, m.lineage, w.lineages[m.lineage].parent, m.log)
		return
	}
	w.lineages[m.lineage].started[m.name] = true
	w.logf("%s starts (history %d, log %d)", m.name, m.lineage, m.log)
}

// checkNoSplitBrain: at most one history has a quorum of its voters running, wherever they are.
func (w *world) checkNoSplitBrain() {
	var quorate []string
	for l, lin := range w.lineages {
		var up []string
		for _, m := range w.members {
			if w.running(m) && m.lineage == l && slices.Contains(lin.voters, m.name) {
				up = append(up, m.name)
			}
		}
		if len(lin.voters) > 0 && len(up) >= Quorum(len(lin.voters)) {
			quorate = append(quorate, fmt.Sprintf("history %d: %v of voters %v", l, up, lin.voters))
		}
	}
	if len(quorate) > 1 {
		w.fatalf("split brain: %s", strings.Join(quorate, "; "))
	}
}

// answers: the operator reaches m's etcd.
func (w *world) answers(m *worldMember) bool { return w.running(m) && w.side(m) == 0 }

// observe is what the reconciler would observe: etcd's member list and statuses where a quorum
// serves on its side; without one, each running member's own status and a probe of every last
// voter; pods, claims, status and the annotations.
func (w *world) observe() Observed {
	o := Observed{Now: w.now, EverFormed: true, DesiredSize: w.size, DesiredVersion: "3.6.16", DataSurvivesPod: true,
		LastVoters: slices.Clone(w.lastVoters), LastMembers: slices.Clone(w.lastMembers)}
	byName := map[string]*Member{}
	get := func(name string) *Member {
		if m, ok := byName[name]; ok {
			return m
		}
		m := &Member{Name: name}
		byName[name] = m
		return m
	}
	l, reachable := w.serving()
	o.Reachable = reachable
	if reachable {
		lin := w.lineages[l]
		group, _ := w.group(l, 0)
		for _, name := range slices.Concat(lin.voters, lin.learners) {
			m, wm := get(name), w.member(name)
			m.ID, m.IsLearner, m.Started = wm.id, slices.Contains(lin.learners, name), lin.started[name]
			if slices.Contains(group, wm) {
				m.Healthy, m.Version, m.RaftIndex = true, "3.6.16", wm.log
				m.IsLeader = name == lin.leader
			}
		}
	} else {
		for _, wm := range w.members {
			if wm.pod != nil && !wm.pod.deleting && w.answers(wm) {
				m := get(wm.name)
				m.RaftIndex, m.Answering = wm.log, true
			}
		}
		for _, name := range w.lastVoters {
			if wm := w.member(name); !get(name).Answering && wm != nil && wm.pod != nil && w.answers(wm) {
				get(name).Answered = name + ":2379"
			}
		}
		if w.record == nil || w.record.completed {
			for _, name := range w.lastVoters {
				if wm := w.member(name); wm != nil && wm.logRead && !get(name).Answering {
					get(name).RaftIndex = wm.log
				}
			}
		}
	}
	for _, name := range strings.Split(w.lostMembers.value, ",") {
		if slices.Contains(w.lastVoters, name) {
			get(name).DeclaredLost = true
		}
	}
	for _, wm := range w.members {
		if p := wm.pod; p != nil {
			m := get(wm.name)
			m.PodExists, m.PodTerminating, m.PodFenced, m.ForcedNewCluster = true, p.deleting, p.fenced, p.forced
			m.PodCreated, m.PodVersion, m.NodeLostSince = p.created, "3.6.16", p.nodeLostAt
			if p.deleting {
				m.PodStopDue = p.deletedAt.Add(30 * time.Second)
			}
			if p.node < 0 && !p.deleting {
				m.UnscheduledSince, m.PodProblem = p.created, "Unschedulable"
			}
			if wm.crashed {
				m.PodProblem = "CrashLoopBackOff"
			}
		}
		if wm.corrupt {
			get(wm.name).Corrupt = "found corrupt"
		}
		switch wm.claim {
		case claimBound:
			get(wm.name).PVCExists = true
		case claimDeleting:
			get(wm.name).PVCDeleting = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		o.Members = append(o.Members, *byName[name])
	}
	o.Recovery = RecoveryPolicy{Automatic: w.auto, After: MinRecoveryAfter, LostSince: w.now, From: w.recoverFrom.value}
	if !w.quorumLostAt.IsZero() {
		o.Recovery.LostSince = w.quorumLostAt
	}
	if r := w.record; r != nil && r.abandoned && r.forced {
		o.Recovery.Forsaken = r.member
	}
	if r := w.record; r != nil && !r.completed {
		o.Recovery.Underway, o.Recovery.DoneWithout = r.member, slices.Clone(r.lostMembers)
		o.Recovery.UnderwayIndex, o.Recovery.Named = r.raftIndex, r.byPerson
		o.Recovery.Preserved, o.Recovery.Served, o.Recovery.Forced = r.preserved, r.served, r.forced
	}
	return o
}

// dropStaleLeaves removes the person's leaves that no longer hold, as the reconciler does first.
func (w *world) dropStaleLeaves(reachable bool) {
	for _, l := range []*leave{&w.lostMembers, &w.recoverFrom} {
		if l.value == "" {
			continue
		}
		underway := w.record != nil && !w.record.completed
		if (reachable && !underway) || (!reachable && w.quorumLostAt.IsZero()) || (!w.quorumLostAt.IsZero() && l.setAt.Before(w.quorumLostAt)) {
			*l = leave{}
		}
	}
}

// operatorStep is one reconcile: observe, decide, act, record. cut: the operator stops after
// acting, before it records.
func (w *world) operatorStep(cut bool) Step {
	_, reachable := w.serving()
	w.dropStaleLeaves(reachable)
	o := w.observe()
	step := Next(o)
	if step.Action != Wait {
		w.logf("operator: %s %s%v: %s", step.Action, step.Member, step.Members, step.Reason)
	}
	w.act(o, step)
	if cut && slices.Contains(membershipChanges, step.Action) {
		// Cut short after a membership change, the operator's record of the members stays
		// behind etcd's until its next look; a loss of quorum before that look is counted
		// against the stale record, which the decision cannot know. Not drawn here.
		cut = false
	}
	if cut {
		w.logf("operator stops before recording")
	} else {
		w.recordStatus(o, step)
	}
	w.now = w.now.Add(2 * time.Second)
	return step
}

func (w *world) deletePod(m *worldMember) {
	if m.pod == nil || m.pod.deleting {
		return
	}
	m.pod.deleting, m.pod.deletedAt = true, w.now
}

func (w *world) createPod(m *worldMember, forced bool) {
	if m.pod != nil || m.claim == claimNone || m.claim == claimDeleting {
		return
	}
	m.pod = &worldPod{created: w.now, node: -1, forced: forced}
	w.place(m)
}

// act carries out step as the reconciler does.
func (w *world) act(o Observed, step Step) {
	l, _ := w.serving()
	lin := w.lineages[l]
	switch step.Action {
	case Wait:
	case BeginRecovery:
		w.checkNotCorrupt(step.Member, "recovered from")
	case FenceFromClients:
		for _, name := range step.Members {
			if m := w.member(name); m.pod != nil {
				m.pod.fenced = true
			}
		}
	case AbandonRecovery:
		if m := w.member(step.Member); m != nil && m.pod != nil && m.pod.forced {
			w.deletePod(m)
		}
	case RestartMembers:
		for _, name := range step.Members {
			w.checkNotCorrupt(name, "restarted on its data")
			w.createPod(w.member(name), false)
		}
	case StartMember:
		m := w.member(step.Member)
		if m.claim == claimNone {
			m.claim = claimBound
		}
		w.createPod(m, false)
	case AddLearner:
		m := w.newMember(-1)
		m.lineage, m.claim = l, claimBound
		lin.learners = append(lin.learners, m.name)
		w.createPod(m, false)
	case PromoteLearner:
		group, _ := w.group(l, 0)
		w.checkNotCorrupt(step.Member, "promoted")
		if m := w.member(step.Member); slices.Contains(group, m) {
			lin.learners = slices.DeleteFunc(lin.learners, func(n string) bool { return n == m.name })
			lin.voters = append(lin.voters, m.name)
		}
	case MoveLeader:
		for _, m := range w.members {
			if m.id == step.Target {
				lin.leader = m.name
			}
		}
	case RemoveMember:
		if m := w.member(step.Member); m.corrupt {
			w.checkQuorumOfOthersServes(lin, m)
		}
		lin.voters = slices.DeleteFunc(lin.voters, func(n string) bool { return n == step.Member })
		lin.learners = slices.DeleteFunc(lin.learners, func(n string) bool { return n == step.Member })
		w.deleteOrphans([]string{step.Member})
	case DeleteOrphans:
		w.deleteOrphans(step.Members)
	case StopMembers, RollMember:
		for _, name := range append(slices.Clone(step.Members), step.Member) {
			if m := w.member(name); m != nil {
				w.deletePod(m)
			}
		}
	case PreserveData:
		m := w.member(step.Member)
		if m.pod != nil {
			w.deletePod(m)
		} else if w.record != nil && w.nodes[m.node].state == nodeUp {
			w.record.preserved = true // the copy, made by a Job on the claim's node, and recorded
		}
		w.recoverFrom = leave{}
	case FenceMembers:
		survivor := w.member(o.Recovery.Underway)
		for _, name := range step.Members {
			m := w.member(name)
			w.checkNotAheadAndAnswering(m, survivor, "fenced")
			if m.pod != nil {
				m.pod.fenced = true
				w.deletePod(m)
			}
		}
	case ForceNewCluster:
		w.checkNotCorrupt(step.Member, "forced")
		m := w.member(step.Member)
		for _, x := range w.members {
			if x != m {
				w.checkNotAheadAndAnswering(x, m, "left out of the forced cluster")
			}
		}
		if m.pod != nil {
			w.deletePod(m)
		} else {
			w.createPod(m, true)
		}
	case ReadLogs:
		for _, name := range step.Members {
			if m := w.member(name); m.node >= 0 && w.nodes[m.node].state == nodeUp && m.claim == claimBound {
				m.logRead = true
			}
		}
	default:
		w.fatalf("the model does not carry out %s", step.Action)
	}
}

// checkNotCorrupt: a member found corrupt is never what data is built on or served from.
func (w *world) checkNotCorrupt(name, what string) {
	if m := w.member(name); m != nil && m.corrupt {
		w.fatalf("%s %s, though found corrupt", name, what)
	}
}

// checkQuorumOfOthersServes: a corrupt voter is removed only while a quorum of the voters left
// runs in the serving history: its removal never costs the cluster its quorum.
func (w *world) checkQuorumOfOthersServes(lin *lineage, m *worldMember) {
	if !slices.Contains(lin.voters, m.name) {
		return
	}
	group, _ := w.group(slices.Index(w.lineages, lin), 0)
	left := 0
	for _, x := range group {
		if x != m && slices.Contains(lin.voters, x.name) {
			left++
		}
	}
	if left < Quorum(len(lin.voters)-1) {
		w.fatalf("corrupt %s removed with %d voters of %d left running", m.name, left, len(lin.voters)-1)
	}
}

// checkNotAheadAndAnswering: a member that answers, of the survivor's history, with a log ahead
// of the survivor's holds writes the recovery would lose. Only the person who named the survivor
// may choose that, for a member whose data survives (its claim is kept).
func (w *world) checkNotAheadAndAnswering(m, survivor *worldMember, what string) {
	if !w.answers(m) || m.lineage != survivor.lineage || m.log <= survivor.log {
		return
	}
	declared := slices.Contains(strings.Split(w.lostMembers.value, ","), m.name)
	if w.record != nil && w.record.byPerson && !declared && m.claim == claimBound {
		return
	}
	w.fatalf("%s %s while it answers with log %d, ahead of %s's %d, on which the recovery builds", m.name, what, m.log, survivor.name, survivor.log)
}

// deleteOrphans deletes pods, and claims unless kept for a recovery that did without them.
func (w *world) deleteOrphans(names []string) {
	for _, name := range names {
		m := w.member(name)
		if m == nil {
			continue
		}
		w.deletePod(m)
		if m.claim != claimBound {
			continue
		}
		if r := w.record; m.corrupt || (r != nil && (slices.Contains(r.lostMembers, name) || (r.abandoned && r.forced && r.member == name))) {
			m.claim = claimReleased
			continue
		}
		w.checkClaimHoldsNothingLost(m)
		m.claim = claimDeleting
		if m.pod == nil {
			m.claim = claimNone
		}
	}
}

// checkClaimHoldsNothingLost: a claim deleted holds no write of an older history past the point
// the serving history forked from it.
func (w *world) checkClaimHoldsNothingLost(m *worldMember) {
	l, ok := w.serving()
	if !ok {
		return
	}
	for l >= 0 {
		lin := w.lineages[l]
		if lin.parent == m.lineage && m.log > lin.fork {
			w.fatalf("the claim of %s deleted: its log reaches %d in history %d, past %d, where the serving history forked from it", m.name, m.log, m.lineage, lin.fork)
		}
		l = lin.parent
	}
}

// recordStatus keeps status as the reconciler's report does.
func (w *world) recordStatus(o Observed, step Step) {
	if o.Reachable {
		l, _ := w.serving()
		lin := w.lineages[l]
		w.lastMembers = slices.Concat(lin.voters, lin.learners)
		w.lastVoters = slices.Clone(lin.voters)
		w.quorumLostAt = time.Time{}
	} else if w.quorumLostAt.IsZero() {
		w.quorumLostAt = o.Now
	}
	r := w.record
	if r != nil && r.completed {
		r = nil
	}
	if step.Action == BeginRecovery && (r == nil || r.served) {
		var earlier []string
		if w.record != nil {
			earlier = w.record.lostMembers
		}
		lost := DoneWithout(o, step.Member, earlier)
		w.record = &recoveryRecord{member: step.Member, lostMembers: lost, byPerson: o.Recovery.From == step.Member,
			raftIndex: index(o.Members)[step.Member].RaftIndex}
		return
	}
	if r == nil {
		return
	}
	inEtcd := slices.ContainsFunc(o.Members, func(x Member) bool { return x.Name == r.member && x.InEtcd() })
	if step.Action == AbandonRecovery || (o.Reachable && !r.served && !inEtcd) {
		r.completed, r.abandoned = true, true
		r.forced = r.forced && !step.Unforced
		w.logf("recovery from %s abandoned", r.member)
		return
	}
	m := w.member(r.member)
	forced := m != nil && m.pod != nil && m.pod.forced
	r.forced = r.forced || forced
	if o.Reachable && inEtcd {
		r.served = true
	}
	voters := count(o.Members, func(x Member) bool { return x.InEtcd() && !x.IsLearner })
	ready := count(o.Members, func(x Member) bool { return x.InEtcd() && !x.IsLearner && x.Healthy })
	if o.Reachable && r.served && !forced && voters == w.size && ready == w.size {
		r.completed = true
		w.logf("recovery from %s completed", r.member)
	}
}

// Events of the world.

func (w *world) pickNode(label string) int { return rapid.IntRange(0, len(w.nodes)-1).Draw(w.t, label) }

func (w *world) pickMember(label string, keep func(*worldMember) bool) *worldMember {
	var candidates []*worldMember
	for _, m := range w.members {
		if keep(m) {
			candidates = append(candidates, m)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	return rapid.SampledFrom(candidates).Draw(w.t, label)
}

// lose stops a node's machine, or cuts it off: its pods are evicted as from a node that stopped
// answering, their deletion never confirmed.
func (w *world) lose(n int, state nodeState) {
	if w.nodes[n].state != nodeUp {
		return
	}
	if state == nodeCutOff && slices.ContainsFunc(w.members, func(m *worldMember) bool {
		return m.node == n && slices.Contains(strings.Split(w.lostMembers.value, ","), m.name)
	}) {
		// A person declared a member on it lost: they say its machine is off. A machine that
		// runs on out of everyone's sight after that makes their word wrong where no operator
		// can see it; the machine stops instead.
		state = nodeDown
	}
	w.nodes[n].state = state
	for _, m := range w.members {
		if p := m.pod; p != nil && p.node == n {
			p.nodeLostAt = w.now
			if !p.deleting {
				p.deleting, p.deletedAt = true, w.now
			}
		}
	}
	w.logf("node %d %s", n, map[nodeState]string{nodeDown: "stops", nodeCutOff: "is cut off"}[state])
}

func (w *world) back(n int) {
	if w.nodes[n].state == nodeUp {
		return
	}
	w.nodes[n] = worldNode{}
	for _, m := range w.members {
		if m.pod != nil && m.pod.node == n {
			m.pod.nodeLostAt = time.Time{}
		}
	}
	w.logf("node %d back", n)
}

func (w *world) event() {
	t := w.t
	switch kind := rapid.IntRange(0, 12).Draw(t, "event"); kind {
	case 0, 1:
		w.lose(w.pickNode("node"), rapid.SampledFrom([]nodeState{nodeDown, nodeCutOff}).Draw(t, "how"))
	case 2:
		w.back(w.pickNode("node"))
	case 3:
		n := w.pickNode("node")
		if w.nodes[n].state == nodeDown && !w.nodes[n].gone {
			w.nodes[n].gone = true
			w.logf("node %d's Node object deleted", n)
		}
	case 4:
		if m := w.pickMember("claimOf", func(m *worldMember) bool { return m.claim == claimBound }); m != nil {
			m.claim = claimDeleting
			if m.pod == nil {
				m.claim = claimNone
			}
			w.logf("claim of %s deleted by a person", m.name)
		}
	case 5:
		if m := w.pickMember("podOf", func(m *worldMember) bool { return m.pod != nil && !m.pod.deleting }); m != nil {
			w.deletePod(m)
			w.logf("pod of %s deleted", m.name)
		}
	case 6:
		if m := w.pickMember("crash", func(m *worldMember) bool { return m.pod != nil }); m != nil {
			m.crashed = !m.crashed
			w.logf("%s crash-loops: %v", m.name, m.crashed)
		}
	case 7:
		// A person declares a member lost: rightly, its machine off, or wrongly, while it runs
		// where the operator sees it (one out of their sight too is beyond any operator).
		m := w.pickMember("declare", func(m *worldMember) bool {
			return slices.Contains(w.lastVoters, m.name) && m.node >= 0 && w.nodes[m.node].state != nodeCutOff
		})
		if m != nil && !slices.Contains(strings.Split(w.lostMembers.value, ","), m.name) {
			w.lostMembers = leave{value: strings.Trim(w.lostMembers.value+","+m.name, ","), setAt: w.now}
			w.logf("a person declares %s lost (its node %d: %v)", m.name, m.node, w.nodes[m.node].state)
		}
	case 8:
		if len(w.lastVoters) > 0 {
			w.recoverFrom = leave{value: rapid.SampledFrom(w.lastVoters).Draw(t, "recoverFrom"), setAt: w.now}
			w.logf("a person names %s to recover from", w.recoverFrom.value)
		}
	case 9:
		l, ok := w.serving()
		side := 0
		if !ok {
			for l = range w.lineages {
				if _, serves := w.group(l, 1); serves {
					ok, side = true, 1
					break
				}
			}
		}
		if ok {
			group, _ := w.group(l, side)
			for _, m := range group {
				m.log += 5
			}
			w.logf("clients write to history %d on side %d: %d members at %d", l, side, len(group), group[0].log)
		}
	case 10:
		d := time.Duration(rapid.IntRange(1, 15).Draw(t, "minutes")) * time.Minute
		w.now = w.now.Add(d)
		w.logf("%v pass", d)
	case 11:
		w.operatorStep(true)
	case 12:
		found := 0
		for _, m := range w.members {
			if m.corrupt {
				found++
			}
		}
		if found >= Quorum(w.size)-1 {
			return // a corrupt majority is a person's to restore from a backup
		}
		if m := w.pickMember("corrupt", func(m *worldMember) bool { return m.claim == claimBound && !m.corrupt }); m != nil {
			m.corrupt = true
			w.logf("%s's data found corrupt", m.name)
		}
	}
}

// recoverable: once partitions heal, a last voter's data is within reach, and not corrupt.
func (w *world) recoverable() bool {
	for _, name := range w.lastVoters {
		if m := w.member(name); m != nil && m.claim == claimBound && !m.corrupt && m.node >= 0 && w.nodes[m.node].state == nodeUp {
			return true
		}
	}
	return false
}

// followAdvice is a person doing what status asks: naming the member to recover from, or
// declaring lost the members it names, if their machines are indeed off.
func (w *world) followAdvice(step Step) {
	if step.Action != Wait {
		return
	}
	// A person whose declaration no longer holds (the machine is back) takes it back.
	if declared := strings.Split(w.lostMembers.value, ","); w.lostMembers.value != "" {
		kept := slices.DeleteFunc(slices.Clone(declared), func(name string) bool {
			m := w.member(name)
			return m != nil && m.node >= 0 && w.nodes[m.node].state == nodeUp
		})
		if len(kept) < len(declared) {
			w.lostMembers.value = strings.Join(kept, ",")
			w.logf("a person takes back the declaration of members whose machines are back: %v left", kept)
			return
		}
	}
	if strings.Contains(step.Reason, "counted lost answered") {
		for _, name := range step.Members {
			declared := strings.Split(w.lostMembers.value, ",")
			if slices.Contains(declared, name) {
				w.lostMembers.value = strings.Join(slices.DeleteFunc(declared, func(n string) bool { return n == name }), ",")
				w.logf("a person withdraws the declaration of %s, which answers, as status asks", name)
			} else if m := w.member(name); m.claim == claimDeleting {
				w.deletePod(m)
				w.logf("a person stops the pod of %s, whose claim they deleted, as status asks", name)
			}
		}
		return
	}
	for _, key := range []string{etcdv1alpha1.AnnotationRecoverFrom, etcdv1alpha1.AnnotationLostMembers} {
		i := strings.Index(step.Reason, key+"=")
		if i < 0 {
			continue
		}
		value := strings.TrimRight(strings.Fields(step.Reason[i+len(key)+1:])[0], ".,;)")
		if key == etcdv1alpha1.AnnotationRecoverFrom {
			if w.recoverFrom.value != value {
				w.recoverFrom = leave{value: value, setAt: w.now}
				w.logf("a person names %s to recover from, as status asks", value)
			}
			continue
		}
		for _, name := range strings.Split(value, ",") {
			if m := w.member(name); m == nil || m.node < 0 || w.nodes[m.node].state != nodeDown {
				return // status asks to declare lost a member whose machine runs: the person does not
			}
		}
		if w.lostMembers.value != value {
			w.lostMembers = leave{value: value, setAt: w.now}
			w.logf("a person declares %s lost, as status asks", value)
		}
	}
}

// settleDown ends the random phase: partitions heal, crash-loops end, each stopped machine comes
// back or stays off for good; then the operator alone, with a person following status, must
// bring the cluster back to spec.size.
func (w *world) settleDown(maxSteps int) {
	w.logf("--- partitions heal; stopped machines come back or stay off")
	for n := range w.nodes {
		if w.nodes[n].state == nodeCutOff || (w.nodes[n].state == nodeDown && rapid.Bool().Draw(w.t, "comesBack")) {
			w.back(n)
		}
	}
	for _, m := range w.members {
		m.crashed = false
	}
	w.settle()
	w.checkNoSplitBrain()
	var step Step
	for range maxSteps {
		if !w.recoverable() {
			w.logf("no last voter's data is in reach: only a backup, or a person, can bring the cluster back")
			return
		}
		if r := w.record; r != nil && !r.completed && !r.forced {
			if m := w.member(r.member); m.pod == nil && m.claim == claimBound && w.nodes[m.node].state == nodeDown {
				// The member the recovery builds on was stopped to copy its data, and its node
				// is off for good: the copy's Job waits for it, which the decision does not see.
				w.logf("the recovery's member %s lies on a node off for good, stopped for its copy: not checked further", m.name)
				return
			}
		}
		step = w.operatorStep(false)
		w.settle()
		w.checkNoSplitBrain()
		if step.Action == Wait && step.Operation == OpNone {
			return
		}
		w.followAdvice(step)
		w.now = w.now.Add(20 * time.Second)
	}
	w.fatalf("the cluster does not serve at size %d after %d steps, though a member's data is in reach; the operator: %s %v: %s", w.size, maxSteps, step.Action, step.Members, step.Reason)
}

// modelRounds is how many times make test draws rapid's worlds (-rapid.checks each, 100 by
// default): 2,000 worlds in about two seconds. make model draws 15,000 a round.
const modelRounds = 20

// modelSeen counts, over every world drawn, the worlds in which each step was taken: what the
// runs reached, logged with -v (make model).
var modelSeen = map[string]int{}

func TestModelQuorumLossRecovery(t *testing.T) {
	clear(modelSeen)
	for range modelRounds {
		rapid.Check(t, modelWorld)
	}
	var seen []string
	for _, key := range slices.Sorted(maps.Keys(modelSeen)) {
		seen = append(seen, fmt.Sprintf("%s %d", key, modelSeen[key]))
	}
	t.Logf("worlds in which each was seen: %s", strings.Join(seen, ", "))
}

// modelWorld is one world: random events and operator steps, the invariants after each, then
// the settling.
func modelWorld(t *rapid.T) {
	w := newWorld(t)
	defer func() {
		seen := map[string]bool{"worlds": true}
		for _, line := range w.trace {
			for _, what := range []string{"BeginRecovery", "FenceMembers", "ForceNewCluster", "AbandonRecovery", "ReadLogs", "RemoveMember",
				"completed", "--- partitions heal", "not checked further", "no last voter's data is in reach", "found corrupt", "FenceFromClients"} {
				if strings.Contains(line, what) {
					seen[what] = true
				}
			}
		}
		for what := range seen {
			modelSeen[what]++
		}
	}()
	for range rapid.IntRange(10, 80).Draw(t, "steps") {
		if rapid.IntRange(0, 2).Draw(t, "eventOrStep") == 0 {
			w.event()
		} else {
			w.operatorStep(false)
		}
		w.settle()
		w.checkNoSplitBrain()
	}
	w.settleDown(400)
}
