package linearizability

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is the verdict on a history: porcupine.Ok, porcupine.Illegal (not linearizable), or
// porcupine.Unknown (the checker ran out of time).
type Result struct {
	Verdict porcupine.CheckResult
	Counts  Counts
	Took    time.Duration
	info    porcupine.LinearizationInfo
}

// Check checks the history within timeout (0: no limit).
func Check(h *History, timeout time.Duration) Result {
	start := time.Now()
	verdict, info := porcupine.CheckOperationsVerbose(model, h.Operations(), timeout)
	return Result{Verdict: verdict, Counts: h.Counts(), Took: time.Since(start), info: info}
}

// Err is nil only for a history proven linearizable. Unknown is an error too: a check that did
// not finish proves nothing, so passing it would let a violation through whenever the history
// is hard enough; the fix is a smaller workload or a longer limit, never a silent pass.
func (r Result) Err() error {
	switch r.Verdict {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return fmt.Errorf("history not linearizable: %v", r.Counts)
	default:
		return fmt.Errorf("linearizability undecided after %v (checker time limit): %v", r.Took.Round(time.Millisecond), r.Counts)
	}
}

func (r Result) String() string {
	return fmt.Sprintf("%v: %s, checked in %v", r.Counts, r.Verdict, r.Took.Round(time.Millisecond))
}

// Visualize writes porcupine's HTML visualization: per key, every operation on its client's
// lane and the longest linearizable prefixes, which end where the violation is.
func (r Result) Visualize(path string) error {
	return porcupine.VisualizePath(model, r.info, path)
}

// Verify checks h within timeout, logs the counts and the verdict, and fails t unless the
// history is linearizable. A history that fails is written as a visualization into
// ArtifactsDir(t), whose path is logged. A history without a completed get and put proves
// nothing and fails too.
func Verify(t testing.TB, h *History, timeout time.Duration) Result {
	t.Helper()
	r := Check(h, timeout)
	t.Logf("linearizability: %v", r)
	if r.Counts.Gets == 0 || r.Counts.Puts == 0 {
		t.Errorf("no get or no put completed: the history proves nothing")
	}
	if err := r.Err(); err != nil {
		path := filepath.Join(ArtifactsDir(t), "linearizability.html")
		if verr := r.Visualize(path); verr != nil {
			t.Errorf("write the visualization: %v", verr)
		} else {
			t.Logf("visualization of the history: %s", path)
		}
		t.Error(err)
	}
	return r
}

var unsafeInPath = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// ArtifactsDir is where t keeps files for after the run: $ARTIFACTS/<test name> when ARTIFACTS
// is set (as make test-e2e and CI systems do), else t.ArtifactDir(), kept by go test only with
// -artifacts.
func ArtifactsDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv("ARTIFACTS")
	if root == "" {
		return t.ArtifactDir()
	}
	dir := filepath.Join(root, unsafeInPath.ReplaceAllString(t.Name(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts directory: %v", err)
	}
	return dir
}
