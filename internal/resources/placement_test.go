package resources

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
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
	pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16"}, EtcdImages{Repository: "etcd"}, PodSettings{})
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
	pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16"}, EtcdImages{Repository: "etcd"}, PodSettings{})
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
	pod = MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16"}, EtcdImages{Repository: "etcd"}, PodSettings{})
	if pod.Spec.Affinity.NodeAffinity != s390x || pod.Spec.Affinity.PodAntiAffinity == nil {
		t.Errorf("affinity %+v, want the user's node affinity and the default anti-affinity", pod.Spec.Affinity)
	}
}

// Every agent Job runs on a node of a platform the operator's image is built for; the one
// placed on a member's node requires both in one term (terms are alternatives).
func TestAgentJobsRunOnBuiltPlatforms(t *testing.T) {
	c := testCluster()
	jobs := agentJobsOf(t, c, PodSettings{})
	for what, job := range jobs {
		pod := job.Spec.Template.Spec
		if term := platformTerm(t, what, pod.Affinity); len(term.MatchFields) != 0 {
			t.Errorf("%s: placed on a node: %+v", what, term.MatchFields)
		}
	}

	onNode, err := ReadLogJob(c, "prod-abcde", "node-1", time.Now(), "img", PodSettings{})
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

// placedCluster is a cluster whose pod template says where its pods may run (a node pool,
// dedicated by a taint, in one zone or with a local disk: node affinity terms, one of them
// empty, which matches no node), what priority its members have, and the secret that pulls
// from its private repository.
func placedCluster() *etcdv1alpha1.EtcdCluster {
	c := testCluster()
	c.Spec.Repository = "registry.private/etcd"
	c.Spec.PodTemplate = etcdv1alpha1.PodTemplate{
		NodeSelector: map[string]string{"pool": "etcd"},
		Tolerations:  []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "etcd", Effect: corev1.TaintEffectNoSchedule}},
		Affinity: &corev1.Affinity{
			NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpExists}}},
					{}, // matches no node
				}},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: corev1.NodeSelectorTerm{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"nvme"}}},
				}}},
			},
			PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: Selector(c)}, TopologyKey: corev1.LabelHostname,
			}}},
		},
		PriorityClassName: "etcd-critical",
		ImagePullSecrets:  []corev1.LocalObjectReference{{Name: "registry-private"}},
	}
	return c
}

// testNodes are nodes of every combination of architecture, pool, zone, disk and taint.
func testNodes() []corev1.Node {
	var nodes []corev1.Node
	for _, arch := range []string{"amd64", "s390x"} {
		for _, pool := range []string{"etcd", "batch"} {
			for _, zone := range []string{"a", "b"} {
				for _, disk := range []string{"", "nvme"} {
					for _, taint := range []string{"", "dedicated=etcd", "gpu=true"} {
						n := corev1.Node{ObjectMeta: metav1.ObjectMeta{
							Name:   fmt.Sprintf("%s-%s-%s-%s-%s", arch, pool, zone, cmp.Or(disk, "nodisk"), cmp.Or(strings.ReplaceAll(taint, "=", "-"), "untainted")),
							Labels: map[string]string{corev1.LabelArchStable: arch, corev1.LabelOSStable: "linux", "pool": pool, corev1.LabelTopologyZone: zone},
						}}
						if disk != "" {
							n.Labels["disk"] = disk
						}
						if key, value, ok := strings.Cut(taint, "="); ok {
							n.Spec.Taints = []corev1.Taint{{Key: key, Value: value, Effect: corev1.TaintEffectNoSchedule}}
						}
						nodes = append(nodes, n)
					}
				}
			}
		}
	}
	return nodes
}

// mayRunOn: the scheduler may place a pod of spec on node, by its nodeSelector, its required
// node affinity and the node's taints (what the scheduler's NodeAffinity and TaintToleration
// filters check).
func mayRunOn(t *testing.T, spec corev1.PodSpec, node corev1.Node) bool {
	t.Helper()
	if !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	for _, taint := range node.Spec.Taints {
		if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tolerates(tol, taint) }) {
			return false
		}
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	return slices.ContainsFunc(spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, func(term corev1.NodeSelectorTerm) bool {
		if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
			return false // an empty term matches no node
		}
		fields := labels.Set{"metadata.name": node.Name}
		return matchesAll(t, term.MatchExpressions, labels.Set(node.Labels)) && matchesAll(t, term.MatchFields, fields)
	})
}

func matchesAll(t *testing.T, reqs []corev1.NodeSelectorRequirement, set labels.Set) bool {
	t.Helper()
	ops := map[corev1.NodeSelectorOperator]selection.Operator{
		corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
		corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
		corev1.NodeSelectorOpGt: selection.GreaterThan, corev1.NodeSelectorOpLt: selection.LessThan,
	}
	for _, r := range reqs {
		req, err := labels.NewRequirement(r.Key, ops[r.Operator], r.Values)
		if err != nil {
			t.Fatalf("requirement %+v: %v", r, err)
		}
		if !req.Matches(set) {
			return false
		}
	}
	return true
}

func tolerates(tol corev1.Toleration, taint corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != taint.Effect || tol.Key != "" && tol.Key != taint.Key {
		return false
	}
	return tol.Operator == corev1.TolerationOpExists || tol.Value == taint.Value
}

// nodesFor are the names of the nodes a pod of spec may run on.
func nodesFor(t *testing.T, spec corev1.PodSpec, nodes []corev1.Node) []string {
	var names []string
	for _, n := range nodes {
		if mayRunOn(t, spec, n) {
			names = append(names, n.Name)
		}
	}
	return names
}

// Every agent Job runs where the pod template lets members run, on the nodes of a platform the
// operator's image is built for, and pulls with the cluster's secrets: a restore Job, the
// first consumer of a member's claim, has the volume made where the member can use it; one of
// the cluster's private etcd image can pull it; and on a dedicated, tainted node pool the Jobs
// are let in. The members' pod (anti-)affinity, which selects member pods, is not theirs. The
// Jobs that stand in for members on the way back to a serving cluster (restore, preserve-data,
// read-log) have the members' priority; the routine ones (backup, verify) the default.
func TestAgentJobsRunWhereMembersMayAndPullWithTheClustersSecrets(t *testing.T) {
	c := placedCluster()
	nodes := testNodes()
	member := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16"}, EtcdImagesOf(c.Spec.Repository, c.Spec.Version), PodSettings{})
	var want []string
	for _, n := range nodes {
		if mayRunOn(t, member.Spec, n) && n.Labels[corev1.LabelArchStable] != "s390x" {
			want = append(want, n.Name)
		}
	}
	if len(want) == 0 || len(want) == len(nodes) {
		t.Fatalf("members may run on %v of %d nodes: want a test that tells nodes apart", want, len(nodes))
	}
	priority := map[string]string{"backup": "", "verify": "", "restore": "etcd-critical", "preserve-data": "etcd-critical", "read-log": "etcd-critical", "point-in-time": "etcd-critical"}
	jobs := agentJobsOf(t, c, PodSettings{})
	if len(jobs) != len(priority) {
		t.Fatalf("Jobs %d, want one of each of %d kinds", len(jobs), len(priority))
	}
	for kind, job := range jobs {
		pod := job.Spec.Template.Spec
		if got := nodesFor(t, pod, nodes); !slices.Equal(got, want) {
			t.Errorf("%s Job may run on %v, want the members' nodes of a built platform, %v", kind, got, want)
		}
		if !reflect.DeepEqual(pod.ImagePullSecrets, c.Spec.PodTemplate.ImagePullSecrets) {
			t.Errorf("%s Job pulls with %v, want the cluster's %v", kind, pod.ImagePullSecrets, c.Spec.PodTemplate.ImagePullSecrets)
		}
		if a := pod.Affinity; a == nil || a.PodAffinity != nil || a.PodAntiAffinity != nil {
			t.Errorf("%s Job affinity %+v: want node affinity only, none selecting member pods", kind, a)
		} else if prefs := a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution; !reflect.DeepEqual(prefs, c.Spec.PodTemplate.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) {
			t.Errorf("%s Job node preferences %+v, want the template's", kind, prefs)
		}
		if pod.PriorityClassName != priority[kind] {
			t.Errorf("%s Job priority class %q, want %q", kind, pod.PriorityClassName, priority[kind])
		}
	}
	if c.Spec.PodTemplate.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key != corev1.LabelTopologyZone ||
		len(c.Spec.PodTemplate.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions) != 1 {
		t.Errorf("building the Jobs changed the cluster's node affinity: %+v", c.Spec.PodTemplate.Affinity.NodeAffinity)
	}
}

// A read-log Job placed on its member's node runs there and only there, tainted as the node
// may be, even when the pod template no longer selects that node (changed since the member
// was placed, as it may be during an outage): the recovery must not wait on a node it cannot
// have.
func TestReadLogJobOnAMembersNodeIsLetOntoIt(t *testing.T) {
	c := placedCluster()
	nodes := testNodes()
	for _, node := range []string{"amd64-etcd-a-nodisk-dedicated-etcd", "amd64-batch-b-nodisk-dedicated-etcd"} {
		job, err := ReadLogJob(c, "prod-abcde", node, time.Now(), "img", PodSettings{})
		if err != nil {
			t.Fatal(err)
		}
		if got := nodesFor(t, job.Spec.Template.Spec, nodes); !slices.Equal(got, []string{node}) {
			t.Errorf("read-log Job on %s may run on %v, want that node alone", node, got)
		}
	}
}

// Every agent Job's pod carries the pod template's annotations, as the members do: a service
// mesh's injection annotation, say, must keep its sidecar out of a Job too, or the Job's pod
// never ends. Not its labels: a Service the user selects members with would take the Jobs'
// pods in. The operator's own labels are the Job's. Seen failing before: no annotations.
func TestAgentJobsCarryThePodTemplatesAnnotationsNotItsLabels(t *testing.T) {
	c := placedCluster()
	c.Spec.PodTemplate.Metadata = etcdv1alpha1.PodMetadata{
		Annotations: map[string]string{"sidecar.istio.io/inject": "false"},
		Labels:      map[string]string{"app": "users-etcd"},
	}
	for kind, job := range agentJobsOf(t, c, PodSettings{}) {
		meta := job.Spec.Template.ObjectMeta
		if meta.Annotations["sidecar.istio.io/inject"] != "false" {
			t.Errorf("%s Job's pod annotations %v, want the template's", kind, meta.Annotations)
		}
		if _, ok := meta.Labels["app"]; ok {
			t.Errorf("%s Job's pod labels %v carry the template's: a Service selecting members would take it in", kind, meta.Labels)
		}
		if meta.Labels[LabelManagedBy] != "etcd-operator" {
			t.Errorf("%s Job's pod labels %v, want the operator's", kind, meta.Labels)
		}
	}
}
