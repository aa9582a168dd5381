// Package docs keeps the user documentation (README.md and docs/**/*.md) a reference manual: the
// method and today's figures, not a diary of when and by whom something was run. The evidence of
// a run (its date, the machine's load that day, what failed first) belongs in the commit message
// that brought the figure; git keeps the history.
package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// workLogWords are what a run log or a working note says and a reference manual does not. Each
// pattern is matched case-insensitively over a page's prose, fenced code blocks left out; `\s+`
// between words lets a phrase wrapped across two lines be found too.
var workLogWords = []struct {
	pattern string
	why     string
}{
	// A date dates a run ("on 2026-11-27", "2026-11-25, on the 2-core machine"): a reference
	// gives today's figure, with a range where there are several runs, and the commit message
	// keeps the dated evidence. Dates inside fenced blocks are data, such as an IAM policy's
	// "Version": "2012-10-17", and are not checked.
	{`\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b`, "a date in prose: give today's figure (a range over the runs), not when it was run"},
	// Who worked on what, and in which sitting, is the project's history, not the user's.
	{`\bsessions?\b`, "a working sitting: say what is, not who found it when"},
	// The working note's own voice; kept apart from "session" so the failure names the phrase.
	{`\bthis\s+session\b`, "the working note's voice"},
	// A page answers its reader, not the request that led to it ("as the issue asked").
	{`\bthe\s+issue\b`, "the request behind the change: say what the product does"},
	// An issue number is the project's bookkeeping; the page says what the behaviour is.
	{`\bissue\s+#`, "an issue reference: say what the behaviour is"},
	// A page that calls itself or its sections a work log is one; "worklog" is caught too.
	{`\bwork\s*log\b`, "the page is reference, not a log"},
	// Names who did the work ("other helpers' builds") or, in the singular, a source function of
	// another project ("its patch helper"): say what is done and what it is for.
	{`\bhelpers?\b`, "who did it, or another project's source: say what is done"},
	// A page says what is and what is not yet, where the user meets it; not a note to its authors.
	{`\bTODO\b`, "a note to the authors: say what is not yet, and what to do instead"},
}

// compiled are workLogWords' patterns, case-insensitive.
func compiled() []*regexp.Regexp {
	res := make([]*regexp.Regexp, len(workLogWords))
	for i, w := range workLogWords {
		res[i] = regexp.MustCompile(`(?i)` + w.pattern)
	}
	return res
}

// finding is one work-log word on a page.
type finding struct {
	line int // 1-based
	text string
	why  string
}

// prose is the page with every line inside a fenced code block (``` or ~~~, the fences
// included) blanked, so offsets still map to the page's own lines.
func prose(page string) (string, error) {
	var out strings.Builder
	fence := "" // the open fence's characters, "" when outside a block
	opened := 0
	scanner := bufio.NewScanner(strings.NewReader(page))
	scanner.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		trimmed := strings.TrimLeft(line, " \t>")
		marker := fenceMarker(trimmed)
		switch {
		case fence == "" && marker != "":
			fence, opened = marker, n
			out.WriteString("\n")
		case fence != "":
			if marker != "" && marker[0] == fence[0] && len(marker) >= len(fence) &&
				strings.TrimSpace(strings.TrimLeft(trimmed, marker[:1])) == "" {
				fence = ""
			}
			out.WriteString("\n")
		default:
			out.WriteString(line + "\n")
		}
	}
	if err := scanner.Err(); err != nil {
		return "", err
	}
	if fence != "" {
		return "", fmt.Errorf("the code block opened at line %d is never closed", opened)
	}
	return out.String(), nil
}

// fenceMarker is the run of three or more backticks or tildes a line starts with, or "".
func fenceMarker(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return line[:n]
		}
	}
	return ""
}

// workLog is every work-log word of a page's prose, by line.
func workLog(page string) ([]finding, error) {
	text, err := prose(page)
	if err != nil {
		return nil, err
	}
	var found []finding
	for i, re := range compiled() {
		for _, m := range re.FindAllStringIndex(text, -1) {
			found = append(found, finding{
				line: 1 + strings.Count(text[:m[0]], "\n"),
				text: strings.Join(strings.Fields(text[m[0]:m[1]]), " "),
				why:  workLogWords[i].why,
			})
		}
	}
	sort.SliceStable(found, func(a, b int) bool { return found[a].line < found[b].line })
	return found, nil
}

// repoRoot is the nearest directory above the test's that holds go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// userDocs are README.md and every Markdown page under docs/, relative to the repository root.
func userDocs(t *testing.T, root string) []string {
	t.Helper()
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			pages = append(pages, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 2 {
		t.Fatal("no Markdown page under docs/: the test would check nothing")
	}
	return pages
}

func TestUserDocsReadAsReferenceNotAsAWorkLog(t *testing.T) {
	root := repoRoot(t)
	total := 0
	for _, page := range userDocs(t, root) {
		text, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		found, err := workLog(string(text))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		for _, f := range found {
			t.Errorf("%s:%d: %q: %s", page, f.line, f.text, f.why)
		}
		total += len(found)
	}
	if total > 0 {
		t.Logf("%d work-log words; the figures and the method stay, the when and who go to the commit message", total)
	}
}

// The checker itself: what it must find, and what it must leave alone.
func TestWorkLogWordsAreFoundInProseOnly(t *testing.T) {
	cases := []struct {
		name  string
		page  string
		lines []int
	}{
		{"a date in prose", "Measured on 2026-11-27 on 2 cores.\n", []int{1}},
		{"a date in a heading", "## EtcdRestore (2026-11-22)\n", []int{1}},
		{"a date in a fenced JSON policy", "Policy:\n\n```json\n{\"Version\": \"2012-10-17\"}\n```\n", nil},
		{"a date in a tilde fence", "~~~yaml\nsince: 2024-01-02\n~~~\n", nil},
		{"a fence indented in a list", "- step:\n  ```sh\n  echo 2024-01-02\n  ```\nthen 2024-01-03\n", []int{5}},
		{"a version is not a date", "etcd 3.6.16, Kubernetes 1.30, 2026 members\n", nil},
		{"session", "Another session found it.\n", []int{1}},
		{"this session, also a session", "In this session we ran it.\n", []int{1, 1}},
		{"the issue wrapped across lines", "as the\nissue asked\n", []int{1}},
		{"an issue number", "See issue #12.\n", []int{1}},
		{"work log", "Not a work log.\nNor a worklog.\n", []int{1, 2}},
		{"helpers", "other helpers' builds beside it\n", []int{1}},
		{"TODO", "TODO: measure it\n", []int{1}},
		{"words that only contain the words", "issues, sessionless, helpfulness, todos\n", nil},
		{"the words inside a code block", "```\nthe issue of this session: TODO\n```\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			found, err := workLog(c.page)
			if err != nil {
				t.Fatal(err)
			}
			var lines []int
			for _, f := range found {
				lines = append(lines, f.line)
			}
			if fmt.Sprint(lines) != fmt.Sprint(c.lines) {
				t.Errorf("found on lines %v, want %v: %+v", lines, c.lines, found)
			}
		})
	}
	if _, err := workLog("```sh\nnever closed\n"); err == nil {
		t.Error("a fence never closed is not reported")
	}
}
