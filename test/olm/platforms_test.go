package olm

import (
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The CSV's operatorframework.io/arch.<arch> and os.<os> labels tell OLM and OperatorHub which
// nodes the operator runs on; they must name exactly the platforms `make images-multiarch` builds
// the operator and etcd images for: the -platform flags of its imagebuilder commands, as make
// prints them without running them. The images themselves, one per platform with a binary of
// that architecture, are hack/tools/imagebuilder's tests.
func TestCSVNamesThePlatformsTheImagesAreBuiltFor(t *testing.T) {
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
