package metrics

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func cluster(size int32, members ...etcdv1alpha1.MemberStatus) *etcdv1alpha1.EtcdCluster {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etcd"}}
	c.Spec.Size = size
	c.Spec.Storage.Size = resource.NewQuantity(1<<30, resource.BinarySI)
	c.Status.Members = members
	for _, m := range members {
		if m.IsLeader {
			c.Status.Leader = m.Name
		}
	}
	return c
}

func TestClusterValuesOfStatus(t *testing.T) {
	notAfter := metav1.NewTime(t0.Add(90 * 24 * time.Hour))
	tests := []struct {
		name string
		c    *etcdv1alpha1.EtcdCluster
		want ClusterValues
	}{{
		name: "nothing formed yet",
		c:    cluster(3),
		want: ClusterValues{DesiredMembers: 3, Quorum: 1, QuotaBytes: 805306368, Alarms: map[string]int{"NOSPACE": 0, "CORRUPT": 0}, Operation: OperationNone},
	}, {
		name: "three healthy voters, one the leader",
		c: cluster(3,
			etcdv1alpha1.MemberStatus{Name: "a", Healthy: true, IsLeader: true, DBSizeBytes: 100, DBSizeInUseBytes: 60},
			etcdv1alpha1.MemberStatus{Name: "b", Healthy: true, DBSizeBytes: 90, DBSizeInUseBytes: 50},
			etcdv1alpha1.MemberStatus{Name: "c", Healthy: true, DBSizeBytes: 80, DBSizeInUseBytes: 40}),
		want: ClusterValues{DesiredMembers: 3, Members: 3, HealthyMembers: 3, VotingMembers: 3, HealthyVotingMembers: 3, Quorum: 2,
			Leader: "a", QuotaBytes: 805306368, Alarms: map[string]int{"NOSPACE": 0, "CORRUPT": 0}, Operation: OperationNone,
			MemberValues: []MemberValues{{"a", true, 100, 60}, {"b", true, 90, 50}, {"c", true, 80, 40}}},
	}, {
		name: "a learner joining, a voter down, alarms raised: counted by member, quorum by voters only",
		c: cluster(4,
			etcdv1alpha1.MemberStatus{Name: "a", Healthy: true, IsLeader: true, Errors: []string{"alarm: NOSPACE", "alarm: CORRUPT"}},
			etcdv1alpha1.MemberStatus{Name: "b", Healthy: true, Errors: []string{"alarm: NOSPACE"}},
			etcdv1alpha1.MemberStatus{Name: "c", Errors: []string{"did not answer its status request"}},
			etcdv1alpha1.MemberStatus{Name: "d", Healthy: true, IsLearner: true}),
		want: ClusterValues{DesiredMembers: 4, Members: 4, HealthyMembers: 3, VotingMembers: 3, HealthyVotingMembers: 2, LearnerMembers: 1, Quorum: 2,
			Leader: "a", QuotaBytes: 805306368, Alarms: map[string]int{"NOSPACE": 2, "CORRUPT": 1}, Operation: OperationNone,
			MemberValues: []MemberValues{{Name: "a", Healthy: true}, {Name: "b", Healthy: true}, {Name: "c"}, {Name: "d", Healthy: true}}},
	}, {
		name: "an operation under way, certificates, the quota set, the revision",
		c: func() *etcdv1alpha1.EtcdCluster {
			c := cluster(1, etcdv1alpha1.MemberStatus{Name: "a", Healthy: true})
			c.Spec.Tuning.QuotaBackendBytes = resource.NewQuantity(1<<20, resource.BinarySI)
			c.Status.HighestRevision = 42
			c.Status.Operation = &etcdv1alpha1.OperationStatus{Type: etcdv1alpha1.ReasonUpgrading}
			c.Status.Certificates = []etcdv1alpha1.CertificateStatus{{Name: "peer", SecretName: "etcd-peer", NotAfter: &notAfter}, {Name: "unread", SecretName: "x"}}
			return c
		}(),
		want: ClusterValues{DesiredMembers: 1, Members: 1, HealthyMembers: 1, VotingMembers: 1, HealthyVotingMembers: 1, Quorum: 1,
			QuotaBytes: 1 << 20, HighestRevision: 42, Alarms: map[string]int{"NOSPACE": 0, "CORRUPT": 0}, Operation: etcdv1alpha1.ReasonUpgrading,
			MemberValues: []MemberValues{{Name: "a", Healthy: true}},
			Certificates: []CertificateValues{{Name: "peer", Secret: "etcd-peer", NotAfter: notAfter.Time}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClusterValuesOf(tt.c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ClusterValuesOf:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestClusterSeriesFollowStatusAndGoWithTheCluster(t *testing.T) {
	cc := newClusterCollector()
	healthy := cluster(3,
		etcdv1alpha1.MemberStatus{Name: "a", Healthy: true, IsLeader: true, DBSizeBytes: 100, DBSizeInUseBytes: 60},
		etcdv1alpha1.MemberStatus{Name: "b", Healthy: true, DBSizeBytes: 90, DBSizeInUseBytes: 50},
		etcdv1alpha1.MemberStatus{Name: "c", Healthy: true, DBSizeBytes: 80, DBSizeInUseBytes: 40})
	cc.Record(healthy, "", "", t0)

	other := cluster(1, etcdv1alpha1.MemberStatus{Name: "x", Healthy: true, IsLeader: true})
	other.Namespace = "elsewhere"
	cc.Record(other, "", "", t0)

	// Member c is removed, b leads now, and the next reconcile fails twice.
	shrunk := cluster(2,
		etcdv1alpha1.MemberStatus{Name: "a", Healthy: true, DBSizeBytes: 100, DBSizeInUseBytes: 60},
		etcdv1alpha1.MemberStatus{Name: "b", Healthy: true, IsLeader: true, DBSizeBytes: 90, DBSizeInUseBytes: 50})
	shrunk.Status.Operation = &etcdv1alpha1.OperationStatus{Type: etcdv1alpha1.ReasonScalingDown}
	cc.Record(shrunk, "a", "", t0.Add(time.Minute))
	cc.Record(shrunk, "b", etcdv1alpha1.ReasonScalingDown, t0.Add(2*time.Minute))
	cc.Record(shrunk, "b", etcdv1alpha1.ReasonScalingDown, t0.Add(3*time.Minute))

	want := `
# HELP etcd_operator_cluster_healthy_voting_members Voting members that answered healthy at the last look; below cluster_quorum, the cluster serves no one.
# TYPE etcd_operator_cluster_healthy_voting_members gauge
etcd_operator_cluster_healthy_voting_members{name="etcd",namespace="elsewhere"} 1
etcd_operator_cluster_healthy_voting_members{name="etcd",namespace="ns"} 2
# HELP etcd_operator_cluster_leader_changes_observed_total Leader changes the operator saw between its looks at the cluster; the members' etcd_server_leader_changes_seen_total counts every one.
# TYPE etcd_operator_cluster_leader_changes_observed_total counter
etcd_operator_cluster_leader_changes_observed_total{name="etcd",namespace="elsewhere"} 0
etcd_operator_cluster_leader_changes_observed_total{name="etcd",namespace="ns"} 1
# HELP etcd_operator_cluster_operation 1 for the change under way (ScalingUp, Upgrading, Restoring, RecoveringQuorum…), None when there is none.
# TYPE etcd_operator_cluster_operation gauge
etcd_operator_cluster_operation{name="etcd",namespace="elsewhere",operation="None"} 1
etcd_operator_cluster_operation{name="etcd",namespace="ns",operation="ScalingDown"} 1
# HELP etcd_operator_cluster_last_successful_reconcile_timestamp_seconds When a reconcile of the cluster last ended without error: a heartbeat, since conditions can stay green while the reconcile fails.
# TYPE etcd_operator_cluster_last_successful_reconcile_timestamp_seconds gauge
etcd_operator_cluster_last_successful_reconcile_timestamp_seconds{name="etcd",namespace="elsewhere"} 1.7956872e+09
etcd_operator_cluster_last_successful_reconcile_timestamp_seconds{name="etcd",namespace="ns"} 1.79568726e+09
# HELP etcd_operator_cluster_reconcile_errors_total Reconciles of the cluster that ended in error, by the reason status gives.
# TYPE etcd_operator_cluster_reconcile_errors_total counter
etcd_operator_cluster_reconcile_errors_total{name="etcd",namespace="ns",reason="ScalingDown"} 2
# HELP etcd_operator_member_db_size_bytes The size of the member's database file, which counts against the quota.
# TYPE etcd_operator_member_db_size_bytes gauge
etcd_operator_member_db_size_bytes{member="a",name="etcd",namespace="ns"} 100
etcd_operator_member_db_size_bytes{member="b",name="etcd",namespace="ns"} 90
`
	names := []string{
		"etcd_operator_cluster_healthy_voting_members", "etcd_operator_cluster_leader_changes_observed_total",
		"etcd_operator_cluster_operation", "etcd_operator_cluster_last_successful_reconcile_timestamp_seconds",
		"etcd_operator_cluster_reconcile_errors_total", "etcd_operator_member_db_size_bytes",
	}
	if err := testutil.CollectAndCompare(cc, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	cc.Forget(types.NamespacedName{Namespace: "ns", Name: "etcd"})
	if err := testutil.CollectAndCompare(cc, strings.NewReader(`
# HELP etcd_operator_member_db_size_bytes The size of the member's database file, which counts against the quota.
# TYPE etcd_operator_member_db_size_bytes gauge
`), "etcd_operator_member_db_size_bytes"); err != nil {
		t.Errorf("after Forget: %v", err)
	}
	if n := testutil.CollectAndCount(cc); n != 16 {
		t.Errorf("after Forget, %d series remain; want the other cluster's 16 alone", n)
	}
}

func TestLeaderChangeCountsThroughAnElectionWithoutLeader(t *testing.T) {
	cc := newClusterCollector()
	leading := func(leader string) *etcdv1alpha1.EtcdCluster {
		c := cluster(3, etcdv1alpha1.MemberStatus{Name: "a"}, etcdv1alpha1.MemberStatus{Name: "b"})
		c.Status.Leader = leader
		return c
	}
	cc.Record(leading("a"), "", "", t0) // the first look: no change seen yet
	cc.Record(leading(""), "a", "", t0)
	cc.Record(leading("b"), "", "", t0)
	cc.Record(leading("b"), "b", "", t0)
	want := `
# HELP etcd_operator_cluster_leader_changes_observed_total Leader changes the operator saw between its looks at the cluster; the members' etcd_server_leader_changes_seen_total counts every one.
# TYPE etcd_operator_cluster_leader_changes_observed_total counter
etcd_operator_cluster_leader_changes_observed_total{name="etcd",namespace="ns"} 1
`
	if err := testutil.CollectAndCompare(cc, strings.NewReader(want), "etcd_operator_cluster_leader_changes_observed_total"); err != nil {
		t.Error(err)
	}

	restarted := newClusterCollector()
	restarted.Record(leading("b"), "a", "", t0) // status read said a: the change happened while no one counted
	if err := testutil.CollectAndCompare(restarted, strings.NewReader(want), "etcd_operator_cluster_leader_changes_observed_total"); err != nil {
		t.Errorf("a change between the status read and the first look after a restart: %v", err)
	}
}

func TestEveryClusterSeriesIsDescribedAndLints(t *testing.T) {
	cc := newClusterCollector()
	c := cluster(3, etcdv1alpha1.MemberStatus{Name: "a", Healthy: true, IsLeader: true, DBSizeBytes: 1})
	notAfter := metav1.NewTime(t0)
	c.Status.Certificates = []etcdv1alpha1.CertificateStatus{{Name: "peer", SecretName: "s", NotAfter: &notAfter}}
	cc.Record(c, "", "Oops", t0)
	cc.Record(c, "", "", t0)
	problems, err := testutil.CollectAndLint(cc)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}
