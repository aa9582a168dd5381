package olm

import (
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The CSV's operatorframework.io/arch.<arch> and os.<os> labels tell OLM and OperatorHub which
// nodes the operator runs on; they must name exactly the platforms `make images-multiarch` builds
// the operator and etcd images for: the -platform flags of its imagebuilder commands, as make
// prints them without running them. The images themselves, one per platform with a binary of
// that architecture, are hack/tools/imagebuilder's tests.
func TestCSVNamesThePlatformsTheImagesAreBuiltFor(t *testing.T) {
	builds, platforms := imagePlatforms(t)

	csv := loadBundle(t).CSV
	// Every image the operator runs is one of them, whether named by tag or by digest.
	for _, related := range csv.Spec.RelatedImages {
		if _, ok := builds[repositoryOf(related.Image)]; !ok {
			t.Errorf("relatedImage %s (%s) is not built by images-multiarch, which builds %v",
				related.Name, related.Image, slices.Sorted(maps.Keys(builds)))
		}
	}

	want := map[string]string{}
	for _, p := range platforms {
		osName, arch, _ := strings.Cut(p, "/")
		want["operatorframework.io/os."+osName] = "supported"
		want["operatorframework.io/arch."+arch] = "supported"
	}
	got := map[string]string{}
	for k, v := range csv.Labels {
		if strings.HasPrefix(k, "operatorframework.io/arch.") || strings.HasPrefix(k, "operatorframework.io/os.") {
			got[k] = v
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the CSV's platform labels are %v; the images are built for %v, which want %v "+
			"(config/manifests/bases, then make bundle)", got, platforms, want)
	}
}

// Where the scheduler sees the platforms: the operator's Deployment in the CSV, the agent Jobs
// it starts and the member pods require nodes of exactly the platforms the images are built for,
// as OLM's multiarch validator expects of a CSV that declares them. A node of another
// architecture would pull no image, or one that cannot start.
func TestPodsRequireTheNodesTheImagesAreBuiltFor(t *testing.T) {
	_, platforms := imagePlatforms(t)
	if built := slices.Sorted(slices.Values(resources.Platforms)); !slices.Equal(built, platforms) {
		t.Fatalf("internal/resources.Platforms is %v; images-multiarch builds %v", built, platforms)
	}
	var oses, arches []string
	for _, p := range platforms {
		osName, arch, _ := strings.Cut(p, "/")
		oses, arches = append(oses, osName), append(arches, arch)
	}
	slices.Sort(oses)
	slices.Sort(arches)
	want := map[string][]string{corev1.LabelOSStable: slices.Compact(oses), corev1.LabelArchStable: slices.Compact(arches)}

	check := func(what string, a *corev1.Affinity) {
		t.Helper()
		if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			t.Errorf("%s requires no nodes: affinity %+v", what, a)
			return
		}
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			got := map[string][]string{}
			for _, r := range term.MatchExpressions {
				if r.Operator == corev1.NodeSelectorOpIn && (r.Key == corev1.LabelOSStable || r.Key == corev1.LabelArchStable) {
					got[r.Key] = slices.Sorted(slices.Values(r.Values))
				}
			}
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Errorf("%s requires nodes %v, want %v (the images' platforms %v)", what, got, want, platforms)
			}
		}
	}

	deployments := loadBundle(t).CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	if len(deployments) == 0 {
		t.Fatal("the CSV installs no Deployment")
	}
	for _, d := range deployments {
		check("the CSV's Deployment "+d.Name+" (config/manager, then make bundle)", d.Spec.Template.Spec.Affinity)
	}

	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "db"}}
	member := resources.MemberPod(c, resources.MemberSpec{Name: "prod-abcde", Version: "3.6.16"}, resources.EtcdImages{Repository: "etcd"}, resources.PodSettings{})
	check("a member pod", member.Spec.Affinity)
	backup := &etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "db"},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "prod", Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "b"}}}}
	job, err := resources.BackupJob(backup, c, "operator", time.Now(), resources.PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	check("a backup Job", job.Spec.Template.Spec.Affinity)
}

// imagePlatforms are the images `make images-multiarch` builds, each with its sorted platforms,
// and the platforms, which must be the same for every image.
func imagePlatforms(t *testing.T) (map[string][]string, []string) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "-n", "-B", "images-multiarch")
	cmd.Dir = repoRoot
	// The make that runs `make test` passes its flags and variables down through the environment;
	// the platforms must be the Makefile's defaults.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "MAKEFLAGS" || name == "MFLAGS" || name == "MAKELEVEL" || name == "MAKEOVERRIDES"
	})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n images-multiarch: %v\n%s", err, out)
	}
	builds := imageBuilds(string(out))
	if len(builds) == 0 {
		t.Fatalf("make -n images-multiarch runs no imagebuilder build:\n%s", out)
	}
	var platforms []string
	for repository, p := range builds {
		if platforms == nil {
			platforms = p
		}
		if !slices.Equal(p, platforms) {
			t.Errorf("images-multiarch builds %s for %v but another image for %v", repository, p, platforms)
		}
	}
	return builds, platforms
}

var (
	imageBuildCommand = regexp.MustCompile(`imagebuilder build -tag (\S+) .*`)
	platformFlag      = regexp.MustCompile(`-platform (\S+)`)
)

// imageBuilds finds make's printed imagebuilder builds: each image's repository and its sorted
// platforms. A command continued over lines with a backslash is joined first.
func imageBuilds(makeOutput string) map[string][]string {
	builds := map[string][]string{}
	for _, command := range strings.Split(strings.ReplaceAll(makeOutput, "\\\n", " "), "\n") {
		m := imageBuildCommand.FindStringSubmatch(command)
		if m == nil {
			continue
		}
		var platforms []string
		for _, p := range platformFlag.FindAllStringSubmatch(command, -1) {
			platforms = append(platforms, p[1])
		}
		slices.Sort(platforms)
		builds[repositoryOf(m[1])] = platforms
	}
	return builds
}

// repositoryOf is an image reference without its tag or digest.
func repositoryOf(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// OpenShift's restricted-v2 admission assigns every pod's user and filesystem group from its
// namespace's range and refuses a pod that brings IDs outside it: the CSV's Deployment must
// bring none, and still run as a non-root user (its image's), restricted.
func TestCSVDeploymentLeavesUserIDsToThePlatform(t *testing.T) {
	for _, d := range loadBundle(t).CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		pod := d.Spec.Template.Spec
		if sc := pod.SecurityContext; sc == nil || sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.FSGroup != nil ||
			sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("Deployment %s pod securityContext %+v: want runAsNonRoot and no user, group or fsGroup (config/manager, then make bundle)", d.Name, sc)
		}
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			if sc := c.SecurityContext; sc != nil && (sc.RunAsUser != nil || sc.RunAsGroup != nil) {
				t.Errorf("Deployment %s container %s sets its own user or group (%+v); OpenShift refuses IDs outside the namespace's range", d.Name, c.Name, sc)
			}
		}
	}
}
