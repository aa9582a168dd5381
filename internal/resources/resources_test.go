package resources

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

func testCluster() *etcdv1alpha1.EtcdCluster {
	q := resource.MustParse("2Gi")
	return &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "db", UID: "uid-1"},
		Spec: etcdv1alpha1.EtcdClusterSpec{
			Size: 3, Version: "3.6.16",
			Tuning: etcdv1alpha1.EtcdTuning{QuotaBackendBytes: &q, HeartbeatIntervalMillis: 100, ElectionTimeoutMillis: 1000},
		},
	}
}

func TestMemberNamesRoundTripThroughPeerURLs(t *testing.T) {
	c := testCluster()
	name := NewMemberName(c.Name)
	if !strings.HasPrefix(name, "prod-") || len(name) != len("prod-")+5 {
		t.Fatalf("member name %q", name)
	}
	got, ok := MemberNameFromPeerURL(c, PeerURL(c, name))
	if !ok || got != name {
		t.Fatalf("MemberNameFromPeerURL(PeerURL(%q)) = %q, %v", name, got, ok)
	}
	for _, foreign := range []string{
		"http://prod-abcde.other-peer.db.svc:2380", // another cluster
		"http://prod-abcde.prod-peer.dev.svc:2380", // another namespace
		"http://10.0.0.1:2380",
		"::not a url",
	} {
		if name, ok := MemberNameFromPeerURL(c, foreign); ok {
			t.Errorf("%q taken for member %q of prod", foreign, name)
		}
	}
}

func TestInitialClusterRoundTrip(t *testing.T) {
	c := testCluster()
	members := []string{"prod-aaaaa", "prod-bbbbb"}
	ic := InitialCluster(c, members)
	if ic != "prod-aaaaa=http://prod-aaaaa.prod-peer.db.svc:2380,prod-bbbbb=http://prod-bbbbb.prod-peer.db.svc:2380" {
		t.Fatalf("initial cluster %q", ic)
	}
	if got := MembersOfInitialCluster(ic); !slices.Equal(got, members) {
		t.Fatalf("members %v", got)
	}
}

// A member forced to a new cluster says so on its pod and runs with the flag; no other pod ever
// has it.
func TestOnlyAForcedMemberRunsWithForceNewCluster(t *testing.T) {
	c := testCluster()
	normal := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16", State: "existing"}, EtcdImages{Repository: "registry/etcd"}, PodSettings{})
	forced := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16", State: "existing", ForceNewCluster: true}, EtcdImages{Repository: "registry/etcd"}, PodSettings{})
	if slices.Contains(normal.Spec.Containers[0].Args, "--force-new-cluster") || normal.Annotations[AnnotationForceNewCluster] != "" {
		t.Fatalf("a normal member pod is forced: %v %v", normal.Spec.Containers[0].Args, normal.Annotations)
	}
	if !slices.Contains(forced.Spec.Containers[0].Args, "--force-new-cluster") || forced.Annotations[AnnotationForceNewCluster] != "true" {
		t.Fatalf("the forced pod lacks the flag or the annotation: %v %v", forced.Spec.Containers[0].Args, forced.Annotations)
	}
}

func TestMemberPodRunsEtcdSafely(t *testing.T) {
	c := testCluster()
	pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16", InitialCluster: "x", State: "new"}, EtcdImages{Repository: "registry/etcd"}, PodSettings{})
	ctr := pod.Spec.Containers[0]
	if ctr.Image != "registry/etcd:v3.6.16" || VersionOfImage(ctr.Image) != "3.6.16" {
		t.Errorf("image %q", ctr.Image)
	}
	for _, want := range []string{
		"--name=prod-aaaaa", "--initial-cluster-state=new", "--initial-cluster-token=uid-1",
		"--quota-backend-bytes=2147483648", "--advertise-client-urls=http://prod-aaaaa.prod-peer.db.svc:2379",
		"--listen-metrics-urls=http://0.0.0.0:2381", "--metrics=extensive",
	} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("args lack %q: %v", want, ctr.Args)
		}
	}
	sc, psc := ctr.SecurityContext, pod.Spec.SecurityContext
	if !*psc.RunAsNonRoot || *psc.RunAsUser == 0 || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || psc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("not restricted: pod %+v container %+v", psc, sc)
	}
	if pod.Spec.Hostname != "prod-aaaaa" || pod.Spec.Subdomain != "prod-peer" {
		t.Errorf("hostname %q subdomain %q", pod.Spec.Hostname, pod.Spec.Subdomain)
	}
	if pod.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil ||
		len(pod.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("default anti-affinity must be soft: %+v", pod.Spec.Affinity)
	}
	if pod.Labels[LabelMember] != "prod-aaaaa" || pod.Labels[LabelCluster] != "prod" {
		t.Errorf("labels %v", pod.Labels)
	}
}

func TestUserLabelsCannotOverrideTheOperators(t *testing.T) {
	c := testCluster()
	c.Spec.PodTemplate.Metadata.Labels = map[string]string{LabelCluster: "other", LabelVoter: "true", "team": "db"}
	pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16"}, EtcdImages{Repository: "r/etcd"}, PodSettings{})
	if _, voter := pod.Labels[LabelVoter]; pod.Labels[LabelCluster] != "prod" || pod.Labels["team"] != "db" || voter {
		t.Errorf("labels %v", pod.Labels)
	}
}

func TestPodDisruptionBudgetNeverAllowsLosingQuorum(t *testing.T) {
	for size, want := range map[int32]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 4, 7: 6, 9: 8} {
		got := PodDisruptionBudget(testCluster(), int(size)).Spec.MinAvailable.IntValue()
		if got != want {
			t.Errorf("size %d: minAvailable %d, want %d", size, got, want)
		}
		if quorum := int(size)/2 + 1; got < quorum {
			t.Errorf("size %d: minAvailable %d below quorum %d", size, got, quorum)
		}
	}
}

func TestVersionOfForeignImageIsUnknown(t *testing.T) {
	for _, img := range []string{"etcd:latest", "registry:5000/etcd", "quay.io/coreos/etcd@sha256:abc"} {
		if v := VersionOfImage(img); v != "" {
			t.Errorf("VersionOfImage(%q) = %q", img, v)
		}
	}
}

// Members are never BestEffort: without resources in the spec they get requests and a memory
// limit sized from the backend quota; what the spec sets is kept, and the result is always a
// valid pair (request <= limit).
func TestMembersAreNeverBestEffort(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  corev1.ResourceRequirements
		want map[string]string // "requests.cpu" etc.
	}{
		{"nothing set", corev1.ResourceRequirements{}, map[string]string{"requests.cpu": "100m", "requests.memory": "256Mi", "limits.memory": "3Gi"}},
		{"a large memory request raises the limit", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}},
			map[string]string{"requests.cpu": "100m", "requests.memory": "8Gi", "limits.memory": "8Gi"}},
		{"a small memory limit lowers the default request", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}},
			map[string]string{"requests.cpu": "100m", "requests.memory": "128Mi", "limits.memory": "128Mi"}},
		{"set values are kept", corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}},
			map[string]string{"requests.cpu": "2", "requests.memory": "1Gi", "limits.memory": "2Gi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCluster() // quotaBackendBytes 2Gi
			c.Spec.PodTemplate.Resources = tc.set
			pod := MemberPod(c, MemberSpec{Name: "prod-abcde", Version: "3.6.16"}, EtcdImages{Repository: "etcd"}, PodSettings{})
			got := pod.Spec.Containers[0].Resources
			have := map[string]string{}
			for name, q := range got.Requests {
				have["requests."+string(name)] = q.String()
			}
			for name, q := range got.Limits {
				have["limits."+string(name)] = q.String()
			}
			for k, v := range tc.want {
				if have[k] != v {
					t.Errorf("%s = %q, want %q (all: %v)", k, have[k], v, have)
				}
			}
			if _, ok := got.Limits[corev1.ResourceCPU]; ok && tc.set.Limits.Cpu().IsZero() {
				t.Errorf("a CPU limit was added: %v", got.Limits)
			}
		})
	}
}
