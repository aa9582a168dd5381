package certs

import (
	"fmt"
	"slices"
)

// A CA is replaced without downtime in four phases, one step at a time, each step taken only
// on what the members show live (a handshake with a certificate of each CA, not what a Secret
// or a pod spec says they should have loaded), and each phase recorded before the next begins,
// so that an operator restarted at any point resumes where the cluster is:
//
//	Prepare    the new CA is made; nothing any member loads changes.
//	TrustBoth  the trust bundle holds the old and the new CA; members are restarted one at a
//	           time (etcd reads its trusted CAs only at start), each only while every other
//	           member is healthy, until every member trusts both.
//	Reissue    every leaf (peer, server, the operator's and the users' client certificates) is
//	           issued from the new CA; members load a leaf from disk at each handshake, so none
//	           restarts. The phase ends once every member presents a leaf of the new CA and the
//	           operator's client certificate is one.
//	DropOld    the bundle holds the new CA alone; members are restarted one at a time again,
//	           until none trusts the old CA.
//
// What holds after every step, whatever fails in between (checked by the model in
// rotation_model_test.go):
//   - every member trusts the CA of the leaf every other member presents, and of the
//     operator's client certificate: peers and the operator always reach each other;
//   - the operator restarts a member only while every other member is healthy and none is
//     restarting: one member down at a time, by the operator's own action;
//   - the old CA leaves the bundle only once no member presents a leaf of it and the operator's
//     client certificate is not one: a member that restarts on its own then still trusts
//     every leaf in use.
//
// A cluster of one member is unavailable while it restarts: that is the price of a new trusted
// CA in etcd, which has no reload of it.

// RotationPhase is where a CA rotation stands.
type RotationPhase string

const (
	RotationPrepare   RotationPhase = "Prepare"
	RotationTrustBoth RotationPhase = "TrustBoth"
	RotationReissue   RotationPhase = "Reissue"
	RotationDropOld   RotationPhase = "DropOld"
	// RotationDone: the new CA is the only one trusted and used.
	RotationDone RotationPhase = "Done"
)

// Rotation is a rotation's record: its phase, and the CAs it replaces and introduces, by
// fingerprint. New is empty until the new CA exists.
type Rotation struct {
	Phase RotationPhase
	Old   string
	New   string
}

// RotationMember is one member as the operator observes it, live.
type RotationMember struct {
	Name string
	// Healthy: its etcd answers and is part of the quorum.
	Healthy bool
	// Restarting: its pod is being replaced and its etcd has not answered since.
	Restarting bool
	// Trusts are the CAs its running etcd accepts certificates of, as handshakes with a
	// certificate of each CA show; nil when it could not be asked.
	Trusts []string
	// Presents is the CA of the leaf it presents, as a handshake shows; "" when it could not
	// be asked.
	Presents string
	// IsLeader: it leads raft. A leader is restarted last, and only once leadership has moved
	// off it: restarted leading, it would stall every write for an election.
	IsLeader bool
}

// RotationWorld is what a rotation step is decided on.
type RotationWorld struct {
	Rotation Rotation
	// Bundle are the CAs of the trust bundle now: what a member started now loads.
	Bundle []string
	// LeavesFrom is the CA the leaf Secrets are issued from now.
	LeavesFrom string
	// OperatorClientFrom is the CA of the client certificate the operator connects with.
	OperatorClientFrom string
	Members            []RotationMember
}

// RotationAction is what the operator does next.
type RotationAction string

const (
	// MakeNewCA: make the new CA and record its fingerprint in Rotation.New.
	MakeNewCA RotationAction = "MakeNewCA"
	// PublishBundle: write Step.Bundle into the trust bundle.
	PublishBundle RotationAction = "PublishBundle"
	// RestartMember: replace Step.Member's pod, so that its etcd loads the bundle.
	RestartMember RotationAction = "RestartMember"
	// MoveLeadership: move raft leadership from Step.Member to Step.Target, before Step.Member
	// is restarted.
	MoveLeadership RotationAction = "MoveLeadership"
	// ReissueLeaves: issue every leaf, and the operator's client certificate, from the new CA.
	ReissueLeaves RotationAction = "ReissueLeaves"
	// RecordPhase: record Step.Phase; the next phase begins.
	RecordPhase RotationAction = "RecordPhase"
	// WaitForMembers: nothing to do until the members show what Step.Reason says.
	WaitForMembers RotationAction = "Wait"
	// RotationComplete: nothing left to do.
	RotationComplete RotationAction = "Complete"
)

// RotationStep is one step, with why.
type RotationStep struct {
	Action RotationAction
	Member string
	// Target is the member leadership moves to (MoveLeadership).
	Target string
	Bundle []string
	Phase  RotationPhase
	Reason string
}

// NextRotationStep decides the next step of the rotation w.Rotation describes.
func NextRotationStep(w RotationWorld) RotationStep {
	r := w.Rotation
	switch r.Phase {
	case RotationPrepare:
		if r.New == "" {
			return RotationStep{Action: MakeNewCA, Reason: "a new CA replaces " + r.Old}
		}
		return RotationStep{Action: RecordPhase, Phase: RotationTrustBoth, Reason: "new CA " + r.New + " made"}
	case RotationTrustBoth:
		both := []string{r.Old, r.New}
		if !sameCAs(w.Bundle, both) {
			return RotationStep{Action: PublishBundle, Bundle: both, Reason: "members must trust both CAs before any leaf of the new one is used"}
		}
		if step, restarting := restartOneNotTrusting(w, both); restarting {
			return step
		}
		return RotationStep{Action: RecordPhase, Phase: RotationReissue, Reason: "every member trusts " + r.Old + " and " + r.New}
	case RotationReissue:
		if w.LeavesFrom != r.New || w.OperatorClientFrom != r.New {
			return RotationStep{Action: ReissueLeaves, Reason: "every member trusts " + r.New}
		}
		for _, m := range w.Members {
			if m.Presents != r.New {
				return RotationStep{Action: WaitForMembers, Member: m.Name,
					Reason: fmt.Sprintf("member %s to present its leaf of %s (the kubelet refreshes mounted Secrets within about a minute)", m.Name, r.New)}
			}
		}
		return RotationStep{Action: RecordPhase, Phase: RotationDropOld, Reason: "every member presents a leaf of " + r.New}
	case RotationDropOld:
		only := []string{r.New}
		if !sameCAs(w.Bundle, only) {
			return RotationStep{Action: PublishBundle, Bundle: only, Reason: "no member presents a leaf of " + r.Old + " any more"}
		}
		if step, restarting := restartOneNotTrusting(w, only); restarting {
			return step
		}
		return RotationStep{Action: RecordPhase, Phase: RotationDone, Reason: "every member trusts " + r.New + " alone"}
	case RotationDone:
		return RotationStep{Action: RotationComplete}
	}
	return RotationStep{Action: WaitForMembers, Reason: fmt.Sprintf("unknown rotation phase %q", r.Phase)}
}

// restartOneNotTrusting restarts the first member whose etcd does not trust exactly want, if
// every other member is healthy and none is restarting; it waits otherwise. It returns false
// once every member trusts want.
func restartOneNotTrusting(w RotationWorld, want []string) (RotationStep, bool) {
	var behind []RotationMember
	for _, m := range w.Members {
		if m.Restarting || !m.Healthy || !sameCAs(m.Trusts, want) {
			behind = append(behind, m)
		}
	}
	if len(behind) == 0 {
		return RotationStep{}, false
	}
	for _, m := range w.Members {
		if m.Restarting {
			return RotationStep{Action: WaitForMembers, Member: m.Name, Reason: "member " + m.Name + " to answer after its restart"}, true
		}
	}
	// A member that restarts loads the bundle: the one to restart is one that has not loaded
	// it, and only while every other member is healthy, so that a quorum stays up. Followers
	// go first; the leader last, once leadership has moved to a healthy member.
	slices.SortStableFunc(behind, func(a, b RotationMember) int { return boolOrder(a.IsLeader, b.IsLeader) })
	for _, m := range behind {
		others := true
		for _, o := range w.Members {
			if o.Name != m.Name && !o.Healthy {
				others = false
			}
		}
		if sameCAs(m.Trusts, want) || m.Trusts == nil || !others {
			continue
		}
		if m.IsLeader {
			for _, o := range w.Members {
				if o.Name != m.Name && o.Healthy {
					return RotationStep{Action: MoveLeadership, Member: m.Name, Target: o.Name,
						Reason: "moving leadership off member " + m.Name + " before it restarts"}, true
				}
			}
		}
		return RotationStep{Action: RestartMember, Member: m.Name,
			Reason: fmt.Sprintf("member %s trusts %v; restarted, it loads %v", m.Name, m.Trusts, want)}, true
	}
	return RotationStep{Action: WaitForMembers, Member: behind[0].Name, Reason: "every member healthy before the next restart"}, true
}

// boolOrder sorts false before true.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func sameCAs(a, b []string) bool {
	if a == nil || len(a) != len(b) {
		return false
	}
	for _, ca := range b {
		if !slices.Contains(a, ca) {
			return false
		}
	}
	return true
}
