package metrics

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// OperationNone is the operation label of a cluster with no change under way.
const OperationNone = "None"

// alarmsAlwaysReported are the alarms whose series exist at 0 while no member raises them, so
// that an alert or a panel over them has data before the first one is raised.
var alarmsAlwaysReported = []string{"NOSPACE", "CORRUPT"}

// ClusterValues is what the series of one EtcdCluster say, all read from its status and spec.
type ClusterValues struct {
	DesiredMembers       int
	Members              int
	HealthyMembers       int
	VotingMembers        int
	HealthyVotingMembers int
	LearnerMembers       int
	// Quorum is how many voting members must be healthy for the cluster to serve.
	Quorum          int
	Leader          string
	QuotaBytes      int64
	HighestRevision int64
	// Alarms counts the members raising each alarm.
	Alarms       map[string]int
	MemberValues []MemberValues
	Certificates []CertificateValues
	Operation    string
}

// MemberValues is what the series of one member say.
type MemberValues struct {
	Name             string
	Healthy          bool
	DBSizeBytes      int64
	DBSizeInUseBytes int64
}

// CertificateValues is the expiry of one certificate the cluster's members or the operator use.
type CertificateValues struct {
	Name     string
	Secret   string
	NotAfter time.Time
}

// ClusterValuesOf reads the series' values from a cluster's status, as report wrote it.
func ClusterValuesOf(c *etcdv1alpha1.EtcdCluster) ClusterValues {
	s := &c.Status
	v := ClusterValues{
		DesiredMembers:  int(c.Spec.Size),
		Members:         len(s.Members),
		Leader:          s.Leader,
		QuotaBytes:      resources.QuotaBackendBytes(c),
		HighestRevision: s.HighestRevision,
		Alarms:          map[string]int{},
		Operation:       OperationNone,
	}
	for _, a := range alarmsAlwaysReported {
		v.Alarms[a] = 0
	}
	for _, m := range s.Members {
		if m.IsLearner {
			v.LearnerMembers++
		} else {
			v.VotingMembers++
		}
		if m.Healthy {
			v.HealthyMembers++
			if !m.IsLearner {
				v.HealthyVotingMembers++
			}
		}
		for _, e := range m.Errors {
			// report.go writes each active alarm as one "alarm: TYPE" error of the member.
			if alarm, ok := strings.CutPrefix(e, "alarm: "); ok {
				v.Alarms[alarm]++
			}
		}
		if slices.ContainsFunc(v.MemberValues, func(mv MemberValues) bool { return mv.Name == m.Name }) {
			continue // one series per member name, or the scrape fails
		}
		v.MemberValues = append(v.MemberValues, MemberValues{
			Name: m.Name, Healthy: m.Healthy, DBSizeBytes: m.DBSizeBytes, DBSizeInUseBytes: m.DBSizeInUseBytes,
		})
	}
	v.Quorum = membership.Quorum(v.VotingMembers)
	for _, cs := range s.Certificates {
		if cs.NotAfter != nil {
			v.Certificates = append(v.Certificates, CertificateValues{Name: cs.Name, Secret: cs.SecretName, NotAfter: cs.NotAfter.Time})
		}
	}
	if s.Operation != nil {
		v.Operation = s.Operation.Type
	}
	return v
}

type clusterEntry struct {
	values ClusterValues
	// lastLeader is the last leader seen, kept across reconciles that saw none, so that a
	// change through an election without a leader still counts.
	lastLeader    string
	leaderChanges float64
	lastSuccess   time.Time
	errors        map[string]float64
}

// ClusterCollector emits the series of every EtcdCluster recorded and not forgotten.
type ClusterCollector struct {
	entries store[clusterEntry]

	desiredMembers, members, healthyMembers, votingMembers, healthyVotingMembers, learnerMembers,
	quorum, hasLeader, leaderChanges, quota, highestRevision, alarm, operation,
	lastSuccess, reconcileErrors,
	memberHealthy, memberDBSize, memberDBSizeInUse,
	certificateNotAfter *prometheus.Desc
}

func newClusterCollector() *ClusterCollector {
	return &ClusterCollector{
		desiredMembers:       desc("cluster_desired_members", "Members the EtcdCluster's spec.size asks for."),
		members:              desc("cluster_members", "Members etcd lists, voters and learners."),
		healthyMembers:       desc("cluster_healthy_members", "Members, voters and learners, that answered healthy at the last look."),
		votingMembers:        desc("cluster_voting_members", "Voting members etcd lists."),
		healthyVotingMembers: desc("cluster_healthy_voting_members", "Voting members that answered healthy at the last look; below cluster_quorum, the cluster serves no one."),
		learnerMembers:       desc("cluster_learner_members", "Learners etcd lists: members being added, not voting yet."),
		quorum:               desc("cluster_quorum", "Voting members that must be healthy for the cluster to serve: a majority of the voters."),
		hasLeader:            desc("cluster_has_leader", "1 when a member reported a leader at the last look, 0 otherwise."),
		leaderChanges:        desc("cluster_leader_changes_observed_total", "Leader changes the operator saw between its looks at the cluster; the members' etcd_server_leader_changes_seen_total counts every one."),
		quota:                desc("cluster_quota_backend_bytes", "The members' database size quota: a member whose database reaches it raises NOSPACE and refuses writes."),
		highestRevision:      desc("cluster_highest_revision", "The highest revision any member answered with, now or before: a restore starts past it."),
		alarm:                desc("cluster_alarm_members", "Members raising each etcd alarm (NOSPACE: writes refused; CORRUPT: data differs between members).", "alarm"),
		operation:            desc("cluster_operation", "1 for the change under way (ScalingUp, Upgrading, Restoring, RecoveringQuorum…), None when there is none.", "operation"),
		lastSuccess:          desc("cluster_last_successful_reconcile_timestamp_seconds", "When a reconcile of the cluster last ended without error: a heartbeat, since conditions can stay green while the reconcile fails."),
		reconcileErrors:      desc("cluster_reconcile_errors_total", "Reconciles of the cluster that ended in error, by the reason status gives.", "reason"),
		memberHealthy:        desc("member_healthy", "1 when the member answered healthy at the last look, 0 otherwise.", "member"),
		memberDBSize:         desc("member_db_size_bytes", "The size of the member's database file, which counts against the quota.", "member"),
		memberDBSizeInUse:    desc("member_db_size_in_use_bytes", "The part of the member's database file in use; the rest is freed by a defragmentation.", "member"),
		certificateNotAfter:  desc("certificate_not_after_timestamp_seconds", "When the certificate expires.", "certificate", "secret"),
	}
}

// Record records a cluster's status as the reconcile wrote it. leaderBefore is the leader in
// the status the reconcile read; errReason is why the reconcile failed, "" when it did not.
func (cc *ClusterCollector) Record(c *etcdv1alpha1.EtcdCluster, leaderBefore, errReason string, now time.Time) {
	values := ClusterValuesOf(c)
	cc.entries.update(types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, func(e clusterEntry) clusterEntry {
		if e.lastLeader == "" {
			e.lastLeader = leaderBefore
		}
		if values.Leader != "" {
			if e.lastLeader != "" && e.lastLeader != values.Leader {
				e.leaderChanges++
			}
			e.lastLeader = values.Leader
		}
		e.values = values
		if errReason == "" {
			e.lastSuccess = now
		} else {
			if e.errors == nil {
				e.errors = map[string]float64{}
			}
			e.errors[errReason]++
		}
		return e
	})
}

// Forget removes every series of a cluster that is deleted.
func (cc *ClusterCollector) Forget(key types.NamespacedName) {
	cc.entries.forget(key)
}

// Describe sends every descriptor of the family.
func (cc *ClusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		cc.desiredMembers, cc.members, cc.healthyMembers, cc.votingMembers, cc.healthyVotingMembers, cc.learnerMembers,
		cc.quorum, cc.hasLeader, cc.leaderChanges, cc.quota, cc.highestRevision, cc.alarm, cc.operation,
		cc.lastSuccess, cc.reconcileErrors, cc.memberHealthy, cc.memberDBSize, cc.memberDBSizeInUse, cc.certificateNotAfter,
	} {
		ch <- d
	}
}

// Collect sends the series of every recorded cluster.
func (cc *ClusterCollector) Collect(ch chan<- prometheus.Metric) {
	cc.entries.each(func(key types.NamespacedName, e clusterEntry) {
		out, v := emitter{ch: ch, key: key}, e.values
		out.gauge(cc.desiredMembers, float64(v.DesiredMembers))
		out.gauge(cc.members, float64(v.Members))
		out.gauge(cc.healthyMembers, float64(v.HealthyMembers))
		out.gauge(cc.votingMembers, float64(v.VotingMembers))
		out.gauge(cc.healthyVotingMembers, float64(v.HealthyVotingMembers))
		out.gauge(cc.learnerMembers, float64(v.LearnerMembers))
		out.gauge(cc.quorum, float64(v.Quorum))
		out.gauge(cc.hasLeader, boolValue(v.Leader != ""))
		out.counter(cc.leaderChanges, e.leaderChanges)
		out.gauge(cc.quota, float64(v.QuotaBytes))
		out.gauge(cc.highestRevision, float64(v.HighestRevision))
		for _, alarm := range slices.Sorted(maps.Keys(v.Alarms)) {
			out.gauge(cc.alarm, float64(v.Alarms[alarm]), alarm)
		}
		out.gauge(cc.operation, 1, v.Operation)
		if !e.lastSuccess.IsZero() {
			out.gauge(cc.lastSuccess, unixSeconds(e.lastSuccess))
		}
		for _, reason := range slices.Sorted(maps.Keys(e.errors)) {
			out.counter(cc.reconcileErrors, e.errors[reason], reason)
		}
		for _, m := range v.MemberValues {
			out.gauge(cc.memberHealthy, boolValue(m.Healthy), m.Name)
			if m.DBSizeBytes > 0 { // 0: the member did not answer; its size is unknown, not zero
				out.gauge(cc.memberDBSize, float64(m.DBSizeBytes), m.Name)
				out.gauge(cc.memberDBSizeInUse, float64(m.DBSizeInUseBytes), m.Name)
			}
		}
		for _, cert := range v.Certificates {
			out.gauge(cc.certificateNotAfter, unixSeconds(cert.NotAfter), cert.Name, cert.Secret)
		}
	})
}

func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}
