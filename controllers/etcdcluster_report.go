package controllers

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// report writes into status what this reconcile observed and decided. Nothing in it is
// assumed: a member that did not answer is reported unhealthy, an unreachable cluster keeps
// its last known membership with every member unhealthy.
func report(c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step, actErr error) {
	s := &c.Status
	s.ObservedGeneration = c.Generation
	s.Selector = labels.SelectorFromSet(resources.Selector(c)).String()
	s.ClientService = resources.ClientServiceName(c.Name)
	s.ClientEndpoint = resources.ClientEndpoint(c)
	s.Certificates = nil
	if obs.access.tls != nil {
		s.Certificates = obs.access.tls.certificates
	}

	if obs.reachable {
		s.ClusterID = etcd.FormatID(obs.clusterID)
		s.Members = memberStatuses(c, obs)
	} else {
		for i := range s.Members {
			s.Members[i].Healthy, s.Members[i].IsLeader = false, false
		}
	}
	s.Size = int32(len(s.Members))
	s.ReadyMembers, s.Leader = 0, ""
	voters := 0
	for _, m := range s.Members {
		if !m.IsLearner {
			voters++
			if m.Healthy {
				s.ReadyMembers++
			}
		}
		if m.IsLeader {
			s.Leader = m.Name
		}
	}
	if v := lowestVersion(s.Members); v != "" {
		s.CurrentVersion = v
	}
	setConditions(c, obs.reachable, voters, step, actErr)
}

func memberStatuses(c *etcdv1alpha1.EtcdCluster, obs *observation) []etcdv1alpha1.MemberStatus {
	out := make([]etcdv1alpha1.MemberStatus, 0, len(obs.members))
	for _, em := range obs.members {
		name := memberName(c, em)
		if name == "" {
			continue
		}
		ms := etcdv1alpha1.MemberStatus{
			Name:      name,
			ID:        em.IDString(),
			PeerURL:   first(em.PeerURLs),
			ClientURL: first(em.ClientURLs),
			IsLearner: em.IsLearner,
			IsLeader:  em.ID == obs.leaderID,
		}
		// Not the raft index, which moves with every write: status would be rewritten on every
		// look at a busy cluster (etcdctl endpoint status shows it).
		if st, ok := obs.statuses[em.ID]; ok {
			ms.Healthy = len(st.Errors) == 0
			ms.Version = st.Version
			ms.DBSizeBytes = st.DBSizeBytes
			ms.DBSizeInUseBytes = st.DBSizeInUseBytes
			ms.Errors = slices.Clone(st.Errors)
			for _, a := range st.Alarms {
				ms.Errors = append(ms.Errors, "alarm: "+a)
			}
		} else if em.Name == "" {
			ms.Errors = []string{"not started yet"}
		} else {
			ms.Errors = []string{"did not answer its status request"}
		}
		out = append(out, ms)
	}
	slices.SortFunc(out, func(a, b etcdv1alpha1.MemberStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func setConditions(c *etcdv1alpha1.EtcdCluster, reachable bool, voters int, step membership.Step, actErr error) {
	s := &c.Status
	set := func(condType string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: condType, Status: status, Reason: reason, Message: message, ObservedGeneration: c.Generation,
		})
	}
	quorate := reachable && int(s.ReadyMembers) >= membership.Quorum(voters)
	switch {
	case quorate:
		set(etcdv1alpha1.ConditionAvailable, metav1.ConditionTrue, etcdv1alpha1.ReasonQuorumHealthy,
			fmt.Sprintf("%d of %d voting members healthy; clients are served at %s", s.ReadyMembers, voters, s.ClientEndpoint))
	case s.ClusterID == "":
		set(etcdv1alpha1.ConditionAvailable, metav1.ConditionFalse, etcdv1alpha1.ReasonBootstrapping, "the cluster has not formed yet")
	default:
		set(etcdv1alpha1.ConditionAvailable, metav1.ConditionFalse, etcdv1alpha1.ReasonQuorumLost,
			fmt.Sprintf("fewer than a quorum of %d voting members answer; the operator takes no destructive action%s", voters, recoveryNote(c)))
	}

	switch {
	case actErr != nil:
		set(etcdv1alpha1.ConditionProgressing, metav1.ConditionTrue, reasonOf(step), fmt.Sprintf("%s failed, will retry: %v", step.Action, actErr))
	case step.Operation == membership.OpPaused:
		set(etcdv1alpha1.ConditionProgressing, metav1.ConditionFalse, etcdv1alpha1.ReasonPaused, step.Reason)
	case step.Action == membership.Wait && slices.Contains([]string{membership.OpNone, membership.OpUnhealthy, membership.OpQuorumLost, membership.OpNoSpace}, step.Operation):
		set(etcdv1alpha1.ConditionProgressing, metav1.ConditionFalse, etcdv1alpha1.ReasonReconciled, "no change under way")
	default:
		set(etcdv1alpha1.ConditionProgressing, metav1.ConditionTrue, reasonOf(step), step.Reason+membersSuffix(step))
	}

	unhealthy := unhealthyMembers(s.Members)
	alarms := alarmsOf(s.Members)
	switch {
	case s.ClusterID != "" && !quorate:
		set(etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonQuorumLost,
			"quorum is lost: see docs/concepts.md for recovery")
	case len(alarms) > 0:
		set(etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonAlarm,
			"etcd alarms raised: "+strings.Join(alarms, ", ")+"; see docs/concepts.md")
	case len(unhealthy) > 0:
		set(etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonMembersUnhealthy,
			"unhealthy members: "+strings.Join(unhealthy, "; "))
	default:
		set(etcdv1alpha1.ConditionDegraded, metav1.ConditionFalse, etcdv1alpha1.ReasonQuorumHealthy, "every member is healthy")
	}
}

func alarmsOf(members []etcdv1alpha1.MemberStatus) []string {
	var out []string
	for _, m := range members {
		for _, e := range m.Errors {
			if a, ok := strings.CutPrefix(e, "alarm: "); ok && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// recoveryNote is honest about the opt-in this version cannot carry out yet.
func recoveryNote(c *etcdv1alpha1.EtcdCluster) string {
	if c.Spec.QuorumLossRecovery.Policy == etcdv1alpha1.QuorumLossRecoveryForceNewCluster {
		return " (quorumLossRecovery.policy ForceNewCluster is not implemented in this version: recover by hand, see docs/concepts.md)"
	}
	return ""
}

func reasonOf(step membership.Step) string {
	if step.Operation == "" {
		return etcdv1alpha1.ReasonReconciled
	}
	return step.Operation
}

func unhealthyMembers(members []etcdv1alpha1.MemberStatus) []string {
	var out []string
	for _, m := range members {
		if !m.Healthy {
			out = append(out, m.Name+" ("+strings.Join(m.Errors, ", ")+")")
		}
	}
	return out
}

// lowestVersion is the oldest version any member reports: the version the cluster as a whole
// is guaranteed to run.
func lowestVersion(members []etcdv1alpha1.MemberStatus) string {
	var lowest string
	for _, m := range members {
		if m.Version != "" && (lowest == "" || versionLess(m.Version, lowest)) {
			lowest = m.Version
		}
	}
	return lowest
}

func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x < y
		}
	}
	return len(pa) < len(pb)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// setAccessError reports certificates or credentials the operator could not issue or read.
func setAccessError(c *etcdv1alpha1.EtcdCluster, err error) {
	c.Status.ObservedGeneration = c.Generation
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: etcdv1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: accessErrorReason(err),
		Message: err.Error(), ObservedGeneration: c.Generation,
	})
}

// setUnsupportedConditions reports a spec this build cannot run.
func setUnsupportedConditions(c *etcdv1alpha1.EtcdCluster, message string) {
	c.Status.ObservedGeneration = c.Generation
	for _, condType := range []string{etcdv1alpha1.ConditionAvailable, etcdv1alpha1.ConditionDegraded} {
		status := metav1.ConditionFalse
		if condType == etcdv1alpha1.ConditionDegraded {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
			Type: condType, Status: status, Reason: etcdv1alpha1.ReasonNotYetImplemented, Message: message, ObservedGeneration: c.Generation,
		})
	}
}
