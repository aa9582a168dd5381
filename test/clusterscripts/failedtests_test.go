package clusterscripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CI's output is cut to a part; the messages of a parallel test that failed are far from its
// "--- FAIL" line, among other tests' output, and were cut off (stop 22's e2e run said which
// cases failed, never why). hack/failed-tests.sh, which .ci/run ends with on a failure, must
// print each failed test's own lines and nothing of the tests that passed.
func TestFailedTestsPrintsWhatEachFailedTestWrote(t *testing.T) {
	log := `=== RUN   TestQuorum
=== RUN   TestQuorum/3_members,_the_node_stops_answering
=== PAUSE TestQuorum/3_members,_the_node_stops_answering
=== RUN   TestQuorum/5_members
=== PAUSE TestQuorum/5_members
=== CONT  TestQuorum/3_members,_the_node_stops_answering
    quorumloss_test.go:124: lost members [q5-a q5-b]
=== CONT  TestQuorum/5_members
    quorumloss_test.go:124: lost members [q1-a q1-b q1-c]
=== NAME  TestQuorum/3_members,_the_node_stops_answering
    quorumloss_test.go:371: Operation cannot be fulfilled on nodes "e2e": the object has been modified
    quorumloss_test.go:380: status of q5: {Phase:Degraded Members:[q5-a q5-b q5-c]}
=== NAME  TestQuorum
    s3server_test.go:341: S3 server pod log: what the parent's cleanup dumped
--- FAIL: TestQuorum (0.00s)
    --- FAIL: TestQuorum/3_members,_the_node_stops_answering (16.19s)
    --- PASS: TestQuorum/5_members (147.50s)
=== RUN   TestCRDs
--- PASS: TestCRDs (0.07s)
FAIL
FAIL	example/e2e	1174.520s
ok  	example/unit	0.1s
--- FAIL: TestPlain (0.10s)
    plain_test.go:5: without -v, the message follows the FAIL line
FAIL
`
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("../../hack/failed-tests.sh")
	out, err := exec.Command("bash", script, path).CombinedOutput()
	if err != nil {
		t.Fatalf("failed-tests.sh: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{
		"lost members [q5-a q5-b]",
		`Operation cannot be fulfilled on nodes "e2e"`,
		"without -v, the message follows the FAIL line",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the summary misses %q:\n%s", want, got)
		}
	}
	// CI shows the end of the output: the tests that failed on their own come after their
	// parents (whose lines are mostly what cleanups dumped), and the last line names them.
	if strings.Index(got, "what the parent's cleanup dumped") > strings.Index(got, `Operation cannot be fulfilled`) {
		t.Errorf("a parent's lines come after its failed subtest's:\n%s", got)
	}
	// Before that line, one or two lines each that read as the failure, without the dumps.
	at := strings.LastIndex(got, "=== in short")
	if at < 0 {
		t.Fatalf("no short account of the failures:\n%s", got)
	}
	short := got[at:]
	for _, want := range []string{
		`TestQuorum/3_members,_the_node_stops_answering: quorumloss_test.go:371: Operation cannot be fulfilled`,
		"TestPlain: plain_test.go:5: without -v, the message follows the FAIL line",
	} {
		if !strings.Contains(short, want) {
			t.Errorf("the short account misses %q:\n%s", want, short)
		}
	}
	if strings.Contains(short, "status of q5") || strings.Contains(short, "lost members") {
		t.Errorf("the short account has lines that do not read as a failure:\n%s", short)
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "TestQuorum/3_members,_the_node_stops_answering") || !strings.Contains(last, "TestPlain") || strings.Contains(last, "TestQuorum ") {
		t.Errorf("the last line %q should name the tests that failed on their own", last)
	}
	if strings.Contains(got, "q1-a") {
		t.Errorf("the summary has the lines of a test that passed:\n%s", got)
	}
}
