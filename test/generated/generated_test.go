// Package generated checks that every generated file in the repository is what its generator
// makes from the current sources, so a change to api/ or to RBAC markers cannot land without
// its regenerated CRDs, RBAC and DeepCopy code.
package generated

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const repoRoot = "../.."

// generatedFiles are the outputs of `make manifests generate`.
var generatedFiles = []string{
	"api/v1alpha1/zz_generated.deepcopy.go",
	"config/crd/bases/etcd.database.dev_etcdclusters.yaml",
	"config/crd/bases/etcd.database.dev_etcdbackups.yaml",
	"config/crd/bases/etcd.database.dev_etcdrestores.yaml",
	"config/rbac/role.yaml",
}

func TestManifestsAndDeepCopyAreRegenerated(t *testing.T) {
	controllerGen := os.Getenv("CONTROLLER_GEN")
	if controllerGen == "" {
		t.Fatal("CONTROLLER_GEN is not set: run through `make test`")
	}
	work := copySources(t)
	for _, args := range [][]string{
		{"rbac:roleName=manager-role", "crd", "paths=./api/...;./controllers/...", "output:crd:artifacts:config=config/crd/bases"},
		{"object:headerFile=hack/boilerplate.go.txt", "paths=./api/..."},
	} {
		cmd := exec.Command(controllerGen, args...)
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, out)
		}
	}
	for _, f := range generatedFiles {
		committed, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fresh, err := os.ReadFile(filepath.Join(work, f))
		if err != nil {
			t.Fatalf("regenerated %s: %v", f, err)
		}
		if !bytes.Equal(committed, fresh) {
			t.Errorf("%s is stale: run `make manifests generate` and commit the result", f)
		}
	}
}

// copySources copies the Go sources and the config tree into a temporary directory, so that
// regenerating there leaves the working tree alone.
func copySources(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			// hack/tools is copied too: its modules sit under the tree controller-gen is run in,
			// as they do for make manifests.
			if rel == "bin" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy sources: %v", err)
	}
	return dst
}

// make manifests reads markers in api/ and controllers/ only (the tree below also holds the
// tools modules under hack/tools, which controller-gen cannot load): a kubebuilder marker
// anywhere else in the operator's own code would be left out of the CRDs and the Role.
func TestKubebuilderMarkersAreWhereManifestsReadThem(t *testing.T) {
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() {
			if rel == "bin" || rel == "hack" || rel == "api" || rel == "controllers" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "// +kubebuilder:") {
				t.Errorf("%s:%d: %s: make manifests reads markers in api/ and controllers/ only", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
