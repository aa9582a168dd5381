//go:build e2e

package guide

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// How long one block may run: the longest wait a page makes is a restore, a few minutes.
const blockTimeout = 15 * time.Minute

// Each page runs as a user would run it, top to bottom, in a namespace of its own
// (e2e-guide-<page>, made the kubeconfig's current namespace so the pages need no -n) on the
// cluster of $KUBECONFIG, with the operator already running there; the namespace is deleted
// after. Shell blocks run with bash -euo pipefail from the repository's root; a yaml block is
// applied; a block after the skip marker is left out. GUIDE_PAGES (a regular expression over
// the pages' paths) runs some of them.
func TestGuidePagesRun(t *testing.T) {
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		t.Fatal("KUBECONFIG is not set: run make test-guide, which points it at the local cluster")
	}
	root := repoRoot(t)
	pages, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	only := regexp.MustCompile(os.Getenv("GUIDE_PAGES"))
	for _, page := range pages {
		if !only.MatchString(page.Name) {
			continue
		}
		t.Run(page.Name, func(t *testing.T) {
			blocks, err := Blocks(page.Text)
			if err != nil {
				t.Fatal(err)
			}
			type step struct {
				line   int
				script string
			}
			var steps []step
			for _, block := range blocks {
				if script, ok := scriptOf(block); ok {
					steps = append(steps, step{block.Line, script})
				}
			}
			if len(steps) == 0 {
				t.Skip("nothing to run")
			}
			env := pageNamespace(t, root, kubeconfig, page.Name)
			for _, step := range steps {
				start := time.Now()
				out, err := run(root, env, step.script)
				t.Logf("%s:%d (%s):\n%s", page.Name, step.line, time.Since(start).Round(time.Second), out)
				if err != nil {
					t.Fatalf("%s:%d: %v", page.Name, step.line, err)
				}
			}
		})
	}
}

// scriptOf is what runs for a block: a shell block as it is, a yaml block applied; nothing for
// a skipped block or another language.
func scriptOf(block Block) (string, bool) {
	if block.Skip {
		return "", false
	}
	switch block.Lang {
	case "sh", "bash":
		return block.Text, true
	case "yaml":
		return "kubectl apply -f - <<'GUIDE_EOF'\n" + block.Text + "GUIDE_EOF\n", true
	}
	return "", false
}

// pageNamespace makes the page's namespace, under the restricted Pod Security profile as a
// production namespace is, and a kubeconfig whose current context is in it,
// deleted when the page is done, and returns the environment the page's blocks run in.
func pageNamespace(t *testing.T, root, kubeconfig, page string) []string {
	slug := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(strings.TrimSuffix(filepath.Base(page), ".md")), "-"), "-")
	namespace := "e2e-guide-" + slug
	own := filepath.Join(t.TempDir(), "kubeconfig")
	env := append(os.Environ(), "KUBECONFIG="+own)
	setup := fmt.Sprintf(`KUBECONFIG=%q kubectl config view --raw > %q
kubectl config set-context --current --namespace=%s >/dev/null
kubectl create namespace %s
kubectl label namespace %s pod-security.kubernetes.io/enforce=restricted >/dev/null`, kubeconfig, own, namespace, namespace, namespace)
	if out, err := run(root, env, setup); err != nil {
		t.Fatalf("namespace %s: %v\n%s", namespace, err, out)
	}
	t.Cleanup(func() {
		if out, err := run(root, env, "kubectl delete namespace "+namespace+" --timeout=10m"); err != nil {
			t.Errorf("deleting namespace %s: %v\n%s", namespace, err, out)
		}
	})
	return env
}

func run(dir string, env []string, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	// A command a page left in the background (a port-forward) keeps the output open: stop
	// waiting for it once bash is done.
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}
