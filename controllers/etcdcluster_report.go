package controllers

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// report writes into status what this reconcile observed and decided. Nothing in it is
// assumed: a member that did not answer is reported unhealthy, an unreachable cluster keeps
// its last known membership with every member unhealthy.
func report(c *etcdv1alpha1.EtcdCluster, obs *observation, step membership.Step, actErr error, now time.Time) {
	s := &c.Status
	s.ObservedGeneration = c.Generation
	s.Selector = labels.SelectorFromSet(resources.Selector(c)).String()
	s.ClientService = resources.ClientServiceName(c.Name)
	s.ClientEndpoint = resources.ClientEndpoint(c)
	s.Certificates = nil
	if obs.access.tls != nil {
		s.Certificates = obs.access.tls.certificates
	}

	s.HighestRevision = highestRevision(s.HighestRevision, obs)
	if obs.reachable {
		s.ClusterID = etcd.FormatID(obs.clusterID)
		s.Members = reportedMembers(c, obs)
		s.QuorumLostTime = nil
	} else {
		if s.ClusterID != "" && s.QuorumLostTime == nil {
			s.QuorumLostTime = ptrTime(now)
		}
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
	recordCorruption(c, obs, now)
	setConditions(c, obs, voters, step, actErr)
	s.Operation = operation(s.Operation, step, now)
	recordQuorumRecovery(c, obs, step, now)
}

// highestRevision is the high-water mark of the keyspace's revision: the highest any member
// answered with, now or before. It never goes down: a client may hold any revision it was ever
// handed, and a restore must start past it.
func highestRevision(before int64, obs *observation) int64 {
	for _, st := range obs.statuses {
		before = max(before, st.Revision)
	}
	return before
}

// operation reports the change under way, keeping its start time while its type stays.
func operation(previous *etcdv1alpha1.OperationStatus, step membership.Step, now time.Time) *etcdv1alpha1.OperationStatus {
	if !underway(step) {
		return nil
	}
	op := &etcdv1alpha1.OperationStatus{Type: reasonOf(step), Action: string(step.Action), Members: step.Members, StartTime: metav1.NewTime(now)}
	if step.Member != "" {
		op.Members = []string{step.Member}
	}
	if previous != nil && previous.Type == op.Type {
		op.StartTime = previous.StartTime
	}
	return op
}

// underway: the step belongs to a change being carried out, rather than a wait in a steady,
// paused or stuck state.
func underway(step membership.Step) bool {
	switch {
	case step.Operation == membership.OpPaused:
		return false
	case step.Action == membership.Wait:
		return !slices.Contains([]string{membership.OpNone, membership.OpUnhealthy, membership.OpQuorumLost, membership.OpNoSpace}, step.Operation)
	}
	return true
}

// reportedMembers is status.members: etcd's member list, each with what was observed of it.
func reportedMembers(c *etcdv1alpha1.EtcdCluster, obs *observation) []etcdv1alpha1.MemberStatus {
	out := make([]etcdv1alpha1.MemberStatus, 0, len(obs.members))
	specHash := resources.MemberPodSpecHash(c)
	for _, em := range obs.members {
		name := memberName(c, em)
		if name == "" {
			continue
		}
		why, unhealthy := obs.unhealthy[em.ID]
		ms := etcdv1alpha1.MemberStatus{
			Name:      name,
			ID:        em.IDString(),
			PeerURL:   first(em.PeerURLs),
			ClientURL: first(em.ClientURLs),
			IsLearner: em.IsLearner,
			IsLeader:  em.ID == obs.leaderID,
			Healthy:   !unhealthy,
		}
		if unhealthy {
			ms.Errors = []string{why}
		}
		if pod := obs.pods[name]; pod != nil {
			ms.Outdated, _ = podSpecOutdated(specHash, pod)
		}
		if pvc := obs.pvcs[name]; pvc != nil && claimTooSmall(c, pvc) {
			ms.Outdated = true
		}
		// Not the raft index, which moves with every write: status would be rewritten on every
		// look at a busy cluster (etcdctl endpoint status shows it).
		if st, ok := obs.statuses[em.ID]; ok {
			ms.Version = st.Version
			ms.DBSizeBytes = st.DBSizeBytes
			ms.DBSizeInUseBytes = st.DBSizeInUseBytes
			for _, a := range st.Alarms {
				ms.Errors = append(ms.Errors, "alarm: "+a)
			}
		}
		out = append(out, ms)
	}
	slices.SortFunc(out, func(a, b etcdv1alpha1.MemberStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// setConditions sets the three conditions, each decided in its own function. etcd answering a
// member list (obs.reachable) is the one evidence of a quorum: that call is linearizable, so a
// majority of voters took part in it, whether or not their pods are Ready yet.
func setConditions(c *etcdv1alpha1.EtcdCluster, obs *observation, voters int, step membership.Step, actErr error) {
	notRunning := membersNotRunning(obs)
	setAvailable(c, obs.reachable, voters, readyMemberPods(obs), quorumNote(step))
	setProgressing(c, step, actErr)
	setDegraded(c, obs.reachable, notRunning, quorumNote(step))
	setCertificateProblem(c, obs)
}

func setCondition(c *etcdv1alpha1.EtcdCluster, condType string, status metav1.ConditionStatus, reason, message string) {
	setConditionAt(&c.Status.Conditions, c, condType, status, reason, "%s", message)
}

// setAvailable: clients are served only when a quorum of voters is healthy in etcd and as many
// member pods are Ready, since the client Service sends clients to Ready pods alone.
func setAvailable(c *etcdv1alpha1.EtcdCluster, etcdAnswers bool, voters, readyPods int, quorumNote string) {
	s := &c.Status
	quorum := membership.Quorum(voters)
	switch {
	case etcdAnswers && int(s.ReadyMembers) >= quorum && readyPods >= quorum:
		setCondition(c, etcdv1alpha1.ConditionAvailable, metav1.ConditionTrue, etcdv1alpha1.ReasonQuorumHealthy,
			fmt.Sprintf("%d of %d voting members healthy; clients are served at %s", s.ReadyMembers, voters, s.ClientEndpoint))
	case etcdAnswers:
		setCondition(c, etcdv1alpha1.ConditionAvailable, metav1.ConditionFalse, etcdv1alpha1.ReasonMembersNotReady,
			fmt.Sprintf("etcd has a quorum, but only %d of %d voting members are healthy and %d member pods Ready: the client Service cannot reach a quorum yet (Degraded says why)", s.ReadyMembers, voters, readyPods))
	case s.ClusterID == "":
		setCondition(c, etcdv1alpha1.ConditionAvailable, metav1.ConditionFalse, etcdv1alpha1.ReasonBootstrapping, "the cluster has not formed yet")
	default:
		setCondition(c, etcdv1alpha1.ConditionAvailable, metav1.ConditionFalse, etcdv1alpha1.ReasonQuorumLost,
			fmt.Sprintf("fewer than a quorum of %d voting members answer: %s", voters, quorumNote))
	}
}

// setProgressing says which change is under way, or that none is.
func setProgressing(c *etcdv1alpha1.EtcdCluster, step membership.Step, actErr error) {
	switch {
	case actErr != nil:
		setCondition(c, etcdv1alpha1.ConditionProgressing, metav1.ConditionTrue, reasonOf(step), fmt.Sprintf("%s failed, will retry: %v", step.Action, actErr))
	case step.Operation == membership.OpPaused:
		setCondition(c, etcdv1alpha1.ConditionProgressing, metav1.ConditionFalse, etcdv1alpha1.ReasonPaused, step.Reason)
	case !underway(step):
		setCondition(c, etcdv1alpha1.ConditionProgressing, metav1.ConditionFalse, etcdv1alpha1.ReasonReconciled, "no change under way")
	default:
		setCondition(c, etcdv1alpha1.ConditionProgressing, metav1.ConditionTrue, reasonOf(step), step.Reason+membersSuffix(step))
	}
}

// setDegraded names what needs attention, the worst first. It is False only when every member
// the spec asks for runs and etcd reports each healthy.
func setDegraded(c *etcdv1alpha1.EtcdCluster, etcdAnswers bool, notRunning []string, quorumNote string) {
	s := &c.Status
	unhealthy := unhealthyMembers(s.Members)
	alarms := alarmsOf(s.Members)
	switch {
	case s.ClusterID != "" && !etcdAnswers:
		message := "quorum is lost: " + quorumNote
		if len(notRunning) > 0 {
			message += "; members not running: " + strings.Join(notRunning, "; ")
		}
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonQuorumLost, message)
	case corruptMessage(c) != "":
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonCorruptMember, corruptMessage(c))
	case noMajorityAgrees(c):
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonCorruptMember,
			"the members' keyspaces differ and "+c.Status.LastConsistencyCheck.Message+": no member is replaced, as none can be told apart from the others; compare their data, or restore from a backup")
	case len(notRunning) > 0:
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonMembersNotRunning,
			"members not running: "+strings.Join(notRunning, "; "))
	case len(alarms) > 0:
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonAlarm,
			"etcd alarms raised: "+strings.Join(alarms, ", ")+"; see docs/concepts.md")
	case len(unhealthy) > 0:
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonMembersUnhealthy,
			"unhealthy members: "+strings.Join(unhealthy, "; "))
	case s.ClusterID == "":
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionFalse, etcdv1alpha1.ReasonBootstrapping,
			"the cluster has not formed yet; no member reports a problem")
	case resources.QuotaNotBelowStorage(c):
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonQuotaNotBelowStorage,
			fmt.Sprintf("tuning.quotaBackendBytes (%s) is not below the member's volume (%s): the volume would fill up before etcd raises NOSPACE, and the member would stop instead of refusing writes; lower the quota (unset, it is min(2Gi, 3/4 of storage.size)) or raise storage.size",
				c.Spec.Tuning.QuotaBackendBytes.String(), ptr.To(resources.MemberStorageSize(c)).String()))
	case c.Spec.Size == 2:
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, etcdv1alpha1.ReasonNoFaultTolerance,
			"a two-member cluster needs both members for quorum, so it tolerates no failure, no more than one member does; three tolerate one: use 3")
	default:
		setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionFalse, etcdv1alpha1.ReasonQuorumHealthy, "every member is healthy")
	}
}

// membersNotRunning names every member pod that cannot run or has not started for long, and
// why, sorted by member name.
func membersNotRunning(obs *observation) []string {
	var out []string
	for _, troubles := range []map[string]string{obs.podProblems, obs.stuckPods} {
		for name, trouble := range troubles {
			out = append(out, name+": "+trouble)
		}
	}
	slices.Sort(out)
	return out
}

// readyMemberPods counts the member pods the client Service can send clients to.
func readyMemberPods(obs *observation) int {
	n := 0
	for _, pod := range obs.pods {
		if podReady(pod) {
			n++
		}
	}
	return n
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

// quorumNote is what the decision says of a lost quorum: what it waits for, what it does, or
// the one command that lets it recover (docs/concepts.md explains the policies).
func quorumNote(step membership.Step) string {
	if step.Operation == membership.OpQuorumLost || step.Operation == membership.OpRecoveringQuorum {
		return step.Reason + membersSuffix(step)
	}
	return "the operator takes no destructive action; see docs/concepts.md for recovery"
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
		if m.Version == "" {
			continue
		}
		if older, _ := compareVersions(m.Version, lowest, false); lowest == "" || older < 0 {
			lowest = m.Version
		}
	}
	return lowest
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
	reason := accessErrorReason(err)
	setCondition(c, etcdv1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, err.Error())
	// Unobserved, not assumed: the cluster may still serve its clients, or may not.
	setCondition(c, etcdv1alpha1.ConditionAvailable, metav1.ConditionUnknown, reason,
		"the operator cannot reach etcd to tell whether clients are served: "+err.Error())
}

// announceDegraded posts a Warning event when Degraded turns True or says something new, so
// that the events tell what status says, once per change rather than at every look.
func (r *EtcdClusterReconciler) announceDegraded(c, before *etcdv1alpha1.EtcdCluster) {
	now := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	was := meta.FindStatusCondition(before.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	if now == nil || now.Status != metav1.ConditionTrue {
		return
	}
	if was != nil && was.Status == now.Status && was.Reason == now.Reason && was.Message == now.Message {
		return
	}
	postEvent(r.Recorder, c, corev1.EventTypeWarning, now.Reason, "Observe", "%s", now.Message)
}

// setReconcileError reports a reconcile that could not observe or prepare the cluster: the
// conditions say why instead of keeping what an earlier reconcile saw.
func setReconcileError(c *etcdv1alpha1.EtcdCluster, err error) {
	setCondition(c, etcdv1alpha1.ConditionProgressing, metav1.ConditionTrue, etcdv1alpha1.ReasonReconcileError,
		"the operator could not read or prepare the cluster's objects, will retry: "+err.Error())
}
