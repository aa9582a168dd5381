package controllers

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
)

func TestLowestVersionComparesNumbers(t *testing.T) {
	members := []etcdv1alpha1.MemberStatus{{Version: "3.10.0"}, {Version: "3.9.2"}, {}, {Version: "3.9.10"}}
	if got := lowestVersion(members); got != "3.9.2" {
		t.Fatalf("lowestVersion = %q, want 3.9.2", got)
	}
}

func TestConditionsTellQuorumLossAndTheUnimplementedRecovery(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{}
	c.Status.ClusterID = "abc"
	c.Status.Members = []etcdv1alpha1.MemberStatus{{Name: "a"}, {Name: "b"}, {Name: "c", Healthy: true}}
	c.Status.ReadyMembers = 1
	c.Spec.QuorumLossRecovery.Policy = etcdv1alpha1.QuorumLossRecoveryForceNewCluster
	setConditions(c, false, 3, membership.Step{Action: membership.Wait, Operation: membership.OpQuorumLost}, nil)

	available := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionAvailable)
	if available.Status != "False" || available.Reason != etcdv1alpha1.ReasonQuorumLost || !strings.Contains(available.Message, "ForceNewCluster is not implemented") {
		t.Errorf("Available = %+v", available)
	}
	if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d.Status != "True" || d.Reason != etcdv1alpha1.ReasonQuorumLost {
		t.Errorf("Degraded = %+v", d)
	}
	if p := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing); p.Status != "False" {
		t.Errorf("Progressing = %+v: waiting for members to come back is not progress", p)
	}
}

func TestAlarmsMakeTheClusterDegradedNotUnavailable(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{}
	c.Status.ClusterID = "abc"
	for _, name := range []string{"a", "b", "c"} {
		c.Status.Members = append(c.Status.Members, etcdv1alpha1.MemberStatus{Name: name, Healthy: true, Errors: []string{"alarm: NOSPACE"}})
	}
	c.Status.ReadyMembers = 3
	setConditions(c, true, 3, membership.Step{Action: membership.Defragment, Operation: membership.OpDefragmenting}, nil)
	if !meta.IsStatusConditionTrue(c.Status.Conditions, etcdv1alpha1.ConditionAvailable) {
		t.Error("a NOSPACE cluster still serves reads: it must stay Available")
	}
	if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d.Reason != etcdv1alpha1.ReasonAlarm || !strings.Contains(d.Message, "NOSPACE") {
		t.Errorf("Degraded = %+v", d)
	}
}
