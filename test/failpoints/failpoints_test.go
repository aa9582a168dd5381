package failpoints

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const repoRoot = "../.."

// gofailComment is a failpoint as gofail reads it: a line that is only the comment.
var gofailComment = regexp.MustCompile(`(?m)^\s*// gofail: var (\w+) `)

// sourceFailpoints are the failpoints in the operator's Go files, by name, with where each is.
func sourceFailpoints(t *testing.T) map[string]string {
	t.Helper()
	found := map[string]string{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == ".git" || d.Name() == "hack") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range gofailComment.FindAllStringSubmatch(string(src), -1) {
			if where, ok := found[m[1]]; ok {
				t.Errorf("failpoint %s is declared twice: in %s and %s (gofail registers each name once)", m[1], where, path)
			}
			found[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// Every failpoint in the source is reached by the walk or is a switch, and every listed one is
// still in the source.
func TestTheWalkListsEveryFailpoint(t *testing.T) {
	source := sourceFailpoints(t)
	if len(source) == 0 {
		t.Fatal("no gofail comments found: is the repository root right?")
	}
	listed := append(Names(), Switches...)
	for name, where := range source {
		if !slices.Contains(listed, name) {
			t.Errorf("failpoint %s (%s) is in no operation of the walk: add it to Walk in test/failpoints", name, where)
		}
	}
	for _, name := range listed {
		if _, ok := source[name]; !ok {
			t.Errorf("failpoint %s is listed but is in no Go file", name)
		}
	}
	for _, op := range Walk {
		for _, fp := range op.Failpoints {
			if fp.Times < 1 {
				t.Errorf("%s: failpoint %s is reached %d times", op.Name, fp.Name, fp.Times)
			}
		}
	}
}

// enabledMarker prefixes the variables of enabled failpoints (written split, or this file would
// hold it).
const enabledMarker = "__" + "fp_"

// The normal build has no failpoint code: gofail's comments are comments until `gofail enable`
// rewrites a copy of the tree (make failpoint-build), so the manager does not link gofail's
// runtime, and no rewritten file or binding is in the tree.
func TestTheNormalBuildHasNoFailpoints(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "sigs.k8s.io/controller-runtime/pkg/manager") {
		t.Fatalf("go list -deps of the manager does not list controller-runtime: the check below would prove nothing\n%s", out)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "go.etcd.io/gofail") {
			t.Errorf("the manager depends on %s: the normal build must not contain failpoints", dep)
		}
	}
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".fail.go") {
			t.Errorf("%s is a gofail binding: run `gofail disable` on its directory (make failpoint-build never writes into the tree)", path)
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if strings.Contains(string(src), enabledMarker) {
				t.Errorf("%s holds enabled failpoint code (%s variables): run `gofail disable` on its directory", path, enabledMarker)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
