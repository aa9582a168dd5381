package resources

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// Platforms are the os/arch pairs the operator's and etcd's images are built for: the
// IMAGE_PLATFORMS of hack/multiarch.mk. test/olm checks that they, the CSV's
// operatorframework.io/arch.* and os.* labels and the Deployment's node affinity agree.
var Platforms = []string{"linux/amd64", "linux/arm64"}

// PlatformNodeAffinity keeps a pod off nodes whose os or architecture no image is built for:
// there, a pulled image would not start (exec format error) or no image would be found at all.
// The kubelet labels every node with both keys.
func PlatformNodeAffinity() *corev1.NodeAffinity {
	return &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: platformRequirements()}},
	}}
}

func platformRequirements() []corev1.NodeSelectorRequirement {
	var oses, arches []string
	for _, p := range Platforms {
		osName, arch, _ := strings.Cut(p, "/")
		if !slices.Contains(oses, osName) {
			oses = append(oses, osName)
		}
		if !slices.Contains(arches, arch) {
			arches = append(arches, arch)
		}
	}
	return []corev1.NodeSelectorRequirement{
		{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: arches},
		{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: oses},
	}
}

// memberAffinity is the default placement of members, each part of which the user's
// podTemplate.affinity replaces when it sets that part (nodeAffinity, podAffinity,
// podAntiAffinity):
//   - nodeAffinity: nodes of a platform the etcd image is built for;
//   - podAntiAffinity: preferred, not required, one member per node, so that members still
//     schedule when nodes are fewer than members (a required rule left them Pending).
func memberAffinity(c *etcdv1alpha1.EtcdCluster) *corev1.Affinity {
	a := &corev1.Affinity{
		NodeAffinity: PlatformNodeAffinity(),
		PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100,
				PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: Selector(c)},
					TopologyKey:   corev1.LabelHostname,
				},
			}},
		},
	}
	user := c.Spec.PodTemplate.Affinity
	if user == nil {
		return a
	}
	if user.NodeAffinity != nil {
		a.NodeAffinity = user.NodeAffinity
	}
	if user.PodAffinity != nil {
		a.PodAffinity = user.PodAffinity
	}
	if user.PodAntiAffinity != nil {
		a.PodAntiAffinity = user.PodAntiAffinity
	}
	return a
}

// applyClusterPodTemplate gives pod what spec.podTemplate asks of every pod the cluster runs,
// its members' and its agent Jobs' alike: the nodes it may use (nodeSelector, tolerations) and
// the secrets that pull the cluster's images. Node affinity is not here: members and Jobs each
// combine the template's with the platform requirement of their own images (memberAffinity,
// agentNodeAffinity).
func applyClusterPodTemplate(pod *corev1.PodSpec, c *etcdv1alpha1.EtcdCluster) {
	pod.NodeSelector = c.Spec.PodTemplate.NodeSelector
	pod.Tolerations = c.Spec.PodTemplate.Tolerations
	pod.ImagePullSecrets = c.Spec.PodTemplate.ImagePullSecrets
}

// agentNodeAffinity keeps an agent Job's pods on the nodes podTemplate.affinity.nodeAffinity
// lets members use that are also of a platform the agent's image is built for. On members the
// user's node affinity replaces the platform requirement, which is there for the etcd image:
// spec.repository may name one built for other platforms. The agent's image is the operator's,
// which no setting replaces, so here the requirement is added to every term of the user's
// instead: a Job still runs only where members may (a restore Job, the first consumer of a
// member's claim, has the volume made where it runs), and never where its agent cannot start.
func agentNodeAffinity(c *etcdv1alpha1.EtcdCluster) *corev1.NodeAffinity {
	platform := PlatformNodeAffinity()
	user := c.Spec.PodTemplate.Affinity
	if user == nil || user.NodeAffinity == nil {
		return platform
	}
	a := user.NodeAffinity.DeepCopy()
	if a.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		a.RequiredDuringSchedulingIgnoredDuringExecution = platform.RequiredDuringSchedulingIgnoredDuringExecution
		return a
	}
	requireOfEveryTerm(a.RequiredDuringSchedulingIgnoredDuringExecution, corev1.NodeSelectorTerm{MatchExpressions: platformRequirements()})
	return a
}

// requireOfEveryTerm adds what req requires to each of selector's terms: terms are
// alternatives, so what every node must be is required in all of them. An empty term matches
// no node, and is left so.
func requireOfEveryTerm(selector *corev1.NodeSelector, req corev1.NodeSelectorTerm) {
	for i := range selector.NodeSelectorTerms {
		term := &selector.NodeSelectorTerms[i]
		if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
			continue
		}
		term.MatchExpressions = append(term.MatchExpressions, req.MatchExpressions...)
		term.MatchFields = append(term.MatchFields, req.MatchFields...)
	}
}

// memberTopologySpread is podTemplate.topologySpreadConstraints, each with the members' label
// selector filled in where the user left it empty, or, when the user sets none, members spread
// over zones: ScheduleAnyway, so that a cluster in one zone, or on nodes without the zone
// label, still schedules; the scheduler then prefers the emptiest zone.
func memberTopologySpread(c *etcdv1alpha1.EtcdCluster) []corev1.TopologySpreadConstraint {
	if len(c.Spec.PodTemplate.TopologySpreadConstraints) == 0 {
		return []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: Selector(c)},
		}}
	}
	out := make([]corev1.TopologySpreadConstraint, 0, len(c.Spec.PodTemplate.TopologySpreadConstraints))
	for _, t := range c.Spec.PodTemplate.TopologySpreadConstraints {
		if t.LabelSelector == nil {
			t.LabelSelector = &metav1.LabelSelector{MatchLabels: Selector(c)}
		}
		out = append(out, t)
	}
	return out
}
