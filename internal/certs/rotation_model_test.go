package certs

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// The CA rotation checked against a model of the world, not against the cases its authors
// thought of. A world is a cluster of 1, 3 or 5 members. Each member's pod mounts the trust
// bundle and its leaf Secrets; the kubelet refreshes a mount some time after the Secret changes
// (a pod made anew mounts what the Secret holds then). A running etcd trusts the bundle it read
// at start and presents the leaf on its mount (etcd reads the leaf at each handshake). Between
// the operator's steps, events are drawn: a member's etcd crashes and restarts in its pod
// (reading its mount, refreshed or not), a member is slow for a while, the kubelet refreshes a
// member's mounts, the operator stops before recording a step. The operator's step is
// NextRotationStep on what it observes live (each running member's trust and presented leaf),
// carried out as the reconciler would.
//
// After every step:
//   - every running member trusts the CA of the leaf every other running member presents, and
//     of the operator's client certificate;
//   - the operator restarts a member only while every other member is healthy, and never the
//     leader of a cluster of more than one member (it moves leadership to a healthy member
//     first);
//   - the bundle lacks the old CA only while no member presents a leaf of it.
//
// At the end, once members stop failing and the kubelet has caught up, the rotation completes
// within a bounded number of steps: the bundle, every member's trust and every leaf are the
// new CA's.

const (
	oldCA = "old-ca"
	newCA = "new-ca"
)

type modelMember struct {
	name       string
	running    bool // its etcd runs (restarting members' does not)
	slow       bool // running, but not healthy for now
	loaded     []string
	mountTrust []string
	mountLeaf  string
}

type rotationModel struct {
	t          *rapid.T
	members    []*modelMember
	rotation   Rotation
	bundle     []string
	leavesFrom string
	client     string
	// leader is the member that leads raft, or "" while none does (an election).
	leader string
	log    []string
}

func newRotationModel(t *rapid.T, n int) *rotationModel {
	w := &rotationModel{t: t, rotation: Rotation{Phase: RotationPrepare, Old: oldCA},
		bundle: []string{oldCA}, leavesFrom: oldCA, client: oldCA, leader: "m0"}
	for i := range n {
		w.members = append(w.members, &modelMember{name: fmt.Sprintf("m%d", i), running: true,
			loaded: []string{oldCA}, mountTrust: []string{oldCA}, mountLeaf: oldCA})
	}
	return w
}

// observe is what the operator sees live: a member that does not run or is slow answers no
// handshake.
func (w *rotationModel) observe() RotationWorld {
	obs := RotationWorld{Rotation: w.rotation, Bundle: slices.Clone(w.bundle), LeavesFrom: w.leavesFrom, OperatorClientFrom: w.client}
	for _, m := range w.members {
		om := RotationMember{Name: m.name, Healthy: m.running && !m.slow, Restarting: !m.running, IsLeader: m.name == w.leader}
		if om.Healthy {
			om.Trusts, om.Presents = slices.Clone(m.loaded), m.mountLeaf
		}
		obs.Members = append(obs.Members, om)
	}
	return obs
}

// operatorStep takes one step; with record false the operator stops before a phase it
// decided on is recorded.
func (w *rotationModel) operatorStep(record bool) RotationStep {
	obs := w.observe()
	step := NextRotationStep(obs)
	w.log = append(w.log, fmt.Sprintf("operator: %s %s %v %s (%s)", step.Action, step.Member, step.Bundle, step.Phase, step.Reason))
	switch step.Action {
	case MakeNewCA:
		if record {
			w.rotation.New = newCA
		}
	case PublishBundle:
		w.bundle = slices.Clone(step.Bundle)
		if !slices.Contains(w.bundle, w.rotation.Old) {
			for _, m := range w.members {
				if m.running && m.mountLeaf == w.rotation.Old {
					w.t.Fatalf("the old CA left the bundle while member %s presents a leaf of it\n%s", m.name, w.trace())
				}
			}
		}
	case RestartMember:
		for _, m := range w.members {
			if m.name != step.Member && (!m.running || m.slow) {
				w.t.Fatalf("member %s restarted while member %s was not healthy\n%s", step.Member, m.name, w.trace())
			}
		}
		if step.Member == w.leader && len(w.members) > 1 {
			w.t.Fatalf("member %s restarted while it leads\n%s", step.Member, w.trace())
		}
		m := w.member(step.Member)
		m.running, m.slow = false, false
		if w.leader == m.name {
			w.leader = ""
		}
		// The pod is made anew: its mounts hold what the Secrets hold now.
		m.mountTrust, m.mountLeaf = slices.Clone(w.bundle), w.leavesFrom
	case MoveLeadership:
		if t := w.member(step.Target); !t.running || t.slow || step.Member != w.leader {
			w.t.Fatalf("leadership moved from %s (leader %q) to %s, which is not healthy\n%s", step.Member, w.leader, step.Target, w.trace())
		}
		w.leader = step.Target
	case ReissueLeaves:
		// The leaves first, then the operator's own client certificate: it may stop between.
		w.leavesFrom = w.rotation.New
		if record {
			w.client = w.rotation.New
		}
	case RecordPhase:
		if record {
			w.rotation.Phase = step.Phase
		}
	}
	return step
}

func (w *rotationModel) member(name string) *modelMember {
	for _, m := range w.members {
		if m.name == name {
			return m
		}
	}
	w.t.Fatalf("no member %s", name)
	return nil
}

// start runs a member's etcd: it reads its trust from its mount.
func (w *rotationModel) start(m *modelMember) {
	m.running, m.slow, m.loaded = true, false, slices.Clone(m.mountTrust)
	w.log = append(w.log, fmt.Sprintf("event: %s starts, trusting %v, presenting %s", m.name, m.loaded, m.mountLeaf))
}

func (w *rotationModel) refresh(m *modelMember) {
	m.mountTrust, m.mountLeaf = slices.Clone(w.bundle), w.leavesFrom
	w.log = append(w.log, fmt.Sprintf("event: the kubelet refreshes %s's mounts: %v, %s", m.name, m.mountTrust, m.mountLeaf))
}

func (w *rotationModel) check() {
	for _, m := range w.members {
		if !m.running {
			continue
		}
		if !slices.Contains(m.loaded, w.client) {
			w.t.Fatalf("member %s trusts %v, not the operator's client certificate's CA %s\n%s", m.name, m.loaded, w.client, w.trace())
		}
		for _, o := range w.members {
			if o != m && o.running && !slices.Contains(m.loaded, o.mountLeaf) {
				w.t.Fatalf("member %s trusts %v, not the CA %s of member %s's leaf: the peers cannot reach each other\n%s",
					m.name, m.loaded, o.mountLeaf, o.name, w.trace())
			}
		}
	}
}

func (w *rotationModel) trace() string { return strings.Join(w.log, "\n") }

func TestModelCARotation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := newRotationModel(t, rapid.SampledFrom([]int{1, 3, 5}).Draw(t, "members"))
		steps := rapid.IntRange(0, 80).Draw(t, "steps")
		for i := range steps {
			m := w.members[rapid.IntRange(0, len(w.members)-1).Draw(t, fmt.Sprintf("member%d", i))]
			switch rapid.IntRange(0, 10).Draw(t, fmt.Sprintf("event%d", i)) {
			case 0: // its etcd crashes; the container restarts in its pod, reading its mount
				if m.running {
					m.running = false
					if w.leader == m.name {
						w.leader = ""
					}
					w.log = append(w.log, "event: "+m.name+" crashes")
				}
			case 1:
				if !m.running {
					w.start(m)
				}
			case 2:
				if m.running {
					m.slow = !m.slow
					w.log = append(w.log, fmt.Sprintf("event: %s slow=%v", m.name, m.slow))
				}
			case 3:
				w.refresh(m)
			case 4: // an election: any running member may win it
				if m.running {
					w.leader = m.name
					w.log = append(w.log, "event: "+m.name+" leads")
				}
			case 5: // the operator stops before recording what it decided
				w.operatorStep(false)
			default:
				w.operatorStep(true)
			}
			w.check()
		}

		// Members stop failing, the kubelet catches up: the rotation completes.
		for i := 0; ; i++ {
			if i > 20*len(w.members)+20 {
				t.Fatalf("the rotation did not complete in %d steps once the world settled\n%s", i, w.trace())
			}
			for _, m := range w.members {
				if !m.running {
					w.start(m)
				}
				m.slow = false
				w.refresh(m)
			}
			w.check()
			if w.operatorStep(true).Action == RotationComplete {
				break
			}
			w.check()
		}
		for _, m := range w.members {
			if !m.running || !sameCAs(m.loaded, []string{newCA}) || m.mountLeaf != newCA {
				t.Fatalf("rotation complete, member %s trusts %v and presents %s\n%s", m.name, m.loaded, m.mountLeaf, w.trace())
			}
		}
		if !sameCAs(w.bundle, []string{newCA}) || w.client != newCA || w.leavesFrom != newCA {
			t.Fatalf("rotation complete, bundle %v, leaves from %s, client from %s\n%s", w.bundle, w.leavesFrom, w.client, w.trace())
		}
	})
}
