package resources

import (
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// platformTerm is the one required node selector term of a pod's affinity, or fails.
func platformTerm(t *testing.T, what string, a *corev1.Affinity) corev1.NodeSelectorTerm {
	t.Helper()
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		len(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) != 1 {
		t.Fatalf("%s: affinity %+v, want one required node selector term", what, a)
	}
	term := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
	want := []corev1.NodeSelectorRequirement{
		{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64", "arm64"}},
		{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}},
	}
	if !reflect.DeepEqual(term.MatchExpressions, want) {
		t.Errorf("%s: node requirements %+v, want %+v", what, term.MatchExpressions, want)
	}
	return term
}

// By default members need a node of a platform the etcd image is built for, and prefer
// another zone, then another node, than their peers'; neither preference keeps a member
// Pending when zones or nodes are fewer than members.
func TestMembersSpreadOverZonesAndNodesByDefault(t *testing.T) {
	c := testCluster()
	pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16"}, EtcdImages{Repository: "etcd"})
	platformTerm(t, "member", pod.Spec.Affinity)

	anti := pod.Spec.Affinity.PodAntiAffinity
	if anti == nil || anti.RequiredDuringSchedulingIgnoredDuringExecution != nil || len(anti.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		anti.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" ||
		!reflect.DeepEqual(anti.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels, Selector(c)) {
		t.Errorf("pod anti-affinity %+v, want one preferred term by hostname over the cluster's members", anti)
	}

	spread := pod.Spec.TopologySpreadConstraints
	if len(spread) != 1 || spread[0].TopologyKey != "topology.kubernetes.io/zone" || spread[0].MaxSkew != 1 ||
		spread[0].WhenUnsatisfiable != corev1.ScheduleAnyway || !reflect.DeepEqual(spread[0].LabelSelector.MatchLabels, Selector(c)) {
		t.Errorf("topology spread %+v, want the members over zones, ScheduleAnyway", spread)
	}
}

// Each part of the affinity the user sets replaces the default's, and only that part: a
// required anti-affinity keeps the platform requirement. Spread constraints of the user's
// replace the zone spread, with the members' selector filled in where left out.
func TestTheUsersPlacementWins(t *testing.T) {
	c := testCluster()
	required := &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: Selector(c)}, TopologyKey: "kubernetes.io/hostname",
	}}}
	c.Spec.PodTemplate.Affinity = &corev1.Affinity{PodAntiAffinity: required}
	c.Spec.PodTemplate.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "rack", WhenUnsatisfiable: corev1.DoNotSchedule,
	}}
	pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16"}, EtcdImages{Repository: "etcd"})
	platformTerm(t, "member with the user's anti-affinity", pod.Spec.Affinity)
	if pod.Spec.Affinity.PodAntiAffinity != required {
		t.Errorf("pod anti-affinity %+v, want the user's %+v", pod.Spec.Affinity.PodAntiAffinity, required)
	}
	spread := pod.Spec.TopologySpreadConstraints
	if len(spread) != 1 || spread[0].TopologyKey != "rack" || spread[0].WhenUnsatisfiable != corev1.DoNotSchedule ||
		spread[0].LabelSelector == nil || !reflect.DeepEqual(spread[0].LabelSelector.MatchLabels, Selector(c)) {
		t.Errorf("topology spread %+v, want the user's only, with the members' selector", spread)
	}

	// A repository built for other platforms: the user's node affinity says where it runs.
	s390x := &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"s390x"}}},
	}}}}
	c.Spec.PodTemplate.Affinity = &corev1.Affinity{NodeAffinity: s390x}
	pod = MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16"}, EtcdImages{Repository: "etcd"})
	if pod.Spec.Affinity.NodeAffinity != s390x || pod.Spec.Affinity.PodAntiAffinity == nil {
		t.Errorf("affinity %+v, want the user's node affinity and the default anti-affinity", pod.Spec.Affinity)
	}
}

// Every agent Job runs on a node of a platform the operator's image is built for; the one
// placed on a member's node requires both in one term (terms are alternatives).
func TestAgentJobsRunOnBuiltPlatforms(t *testing.T) {
	c := testCluster()
	jobs := agentJobsOf(t, c)
	for what, job := range jobs {
		pod := job.Spec.Template.Spec
		if term := platformTerm(t, what, pod.Affinity); len(term.MatchFields) != 0 {
			t.Errorf("%s: placed on a node: %+v", what, term.MatchFields)
		}
	}

	onNode, err := ReadLogJob(c, "prod-abcde", "node-1", time.Now(), "img", nil)
	if err != nil {
		t.Fatal(err)
	}
	term := platformTerm(t, "read-log on node-1", onNode.Spec.Template.Spec.Affinity)
	if len(term.MatchFields) != 1 || term.MatchFields[0].Key != "metadata.name" || !slices.Equal(term.MatchFields[0].Values, []string{"node-1"}) {
		t.Errorf("read-log on node-1: fields %+v, want the node", term.MatchFields)
	}
	if jobs["backup"].Spec.Template.Spec.Affinity.NodeAffinity == onNode.Spec.Template.Spec.Affinity.NodeAffinity {
		t.Error("Jobs share one node affinity: placing one on a node places them all")
	}
}
