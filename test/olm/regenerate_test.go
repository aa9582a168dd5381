package olm

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// bundle/ and bundle.Dockerfile are generated: `make bundle` from config/, api/ and the RBAC
// markers must reproduce them, apart from the createdAt timestamp it sets on every run. It runs
// in a copy of the repository, with the Makefile's VERSION, so the working tree is left alone.
func TestBundleIsRegenerated(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	for _, tool := range []string{"controller-gen", "kustomize", "operator-sdk"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			t.Fatalf("bin/%s is missing: run through `make test`, which builds it", tool)
		}
	}

	work := copyRepository(t, root)
	// Without them, a Makefile that lost its bundle target would find the directory up to date.
	for _, generated := range []string{"bundle", "bundle.Dockerfile"} {
		if err := os.RemoveAll(filepath.Join(work, generated)); err != nil {
			t.Fatal(err)
		}
	}
	runMake(t, work, "bundle", "LOCALBIN="+bin)

	committed := generatedFiles(t, root)
	fresh := generatedFiles(t, work)
	for name, data := range committed {
		regenerated, ok := fresh[name]
		switch {
		case !ok:
			t.Errorf("%s is no longer generated: run `make bundle` and commit the result", name)
		case !bytes.Equal(withoutCreatedAt(data), withoutCreatedAt(regenerated)):
			t.Errorf("%s is stale: run `make bundle` and commit the result", name)
		}
	}
	for name := range fresh {
		if _, ok := committed[name]; !ok {
			t.Errorf("%s is generated but not committed: run `make bundle` and commit the result", name)
		}
	}
}

// catalog/ is generated too: its channels and package are what hack/catalog-template (the
// channel-making step of `make catalog`) renders from catalog-template.yaml and the committed
// bundle blobs, byte for byte; TestCatalogHeadIsRenderedFromTheCurrentBundle holds the head's blob
// to bundle/. So the catalog is the template's, and making it again changes nothing.
func TestCatalogIsRenderedFromTheTemplate(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.CopyFS(work, os.DirFS(filepath.Join(root, "catalog", pkgName))); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./hack/catalog-template", "-template", catalogTemplate,
		"-catalog", work, "-icon", filepath.Join("config", "manifests", "icon.svg"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/catalog-template: %v\n%s", err, out)
	}
	for _, file := range []string{"package.yaml", "channels.yaml"} {
		committed, err := os.ReadFile(filepath.Join(root, "catalog", pkgName, file))
		if err != nil {
			t.Fatal(err)
		}
		rendered, err := os.ReadFile(filepath.Join(work, file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(committed, rendered) {
			t.Errorf("catalog/%s/%s is not what %s renders: run `make catalog` and commit the result\ncommitted:\n%s\nrendered:\n%s",
				pkgName, file, catalogTemplate, committed, rendered)
		}
	}
}

// runMake runs a make target in dir with the Makefile's defaults: the make that runs `make test`
// passes its flags and variables down through the environment, which are dropped.
func runMake(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = dir
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "MAKEFLAGS" || name == "MFLAGS" || name == "MAKELEVEL" || name == "MAKEOVERRIDES"
	})
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// filesUnder reads every file under root/dir, keyed by its path relative to root.
func filesUnder(t *testing.T, root, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files[rel], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// generatedFiles reads bundle/ and bundle.Dockerfile under root, keyed by their relative path.
func generatedFiles(t *testing.T, root string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	read := func(rel string) {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		files[rel] = data
	}
	read("bundle.Dockerfile")
	maps.Copy(files, filesUnder(t, root, "bundle"))
	return files
}

// copyRepository copies the working tree, without bin/ and hidden directories, into a temporary
// directory; make and controller-gen there see the sources as they are, committed or not.
func copyRepository(t *testing.T, root string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == "bin" || rel != "." && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatalf("copy repository: %v", err)
	}
	return dst
}
