// Command guards checks that every guard in front of a destructive step is held by a test:
// for each guard listed in guards.yaml it takes the guard out of the code (one exact edit,
// given to the Go toolchain as an -overlay, so the work tree is never changed) and runs the
// tests that say they hold it. The guard is held if one of them fails; it is a defect if they
// all pass, or if the edit no longer matches the code (the guard moved: the list must follow).
//
// This is mutation testing aimed by hand where a mutation tester cannot reach cheaply: the
// controllers' and the agent's tests start a kube-apiserver, etcd or an S3 server, minutes a
// run, so each guard runs only the tests named for it.
//
//	go run ./hack/guards                    # every guard
//	go run ./hack/guards -only NAME         # one guard (a substring of its name)
//	go run ./hack/guards -discover -only N  # run the whole package against the edit, and list
//	                                        # the tests that fail: what to name in guards.yaml
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// guard is one guard in front of a destructive step, the edit that takes it out, and the
// tests that must fail without it.
type guard struct {
	// Name says what the guard prevents, as the destructive step it stands in front of.
	Name string `json:"name"`
	// File holds the guard, relative to the repository's root.
	File string `json:"file"`
	// Find is the guard's code, exactly as written; it must occur once in File.
	Find string `json:"find"`
	// Replace is the code without the guard.
	Replace string `json:"replace"`
	// Package is the package whose tests hold the guard, e.g. ./controllers.
	Package string `json:"package"`
	// Tests are the top-level tests that hold it.
	Tests []string `json:"tests"`
}

func main() {
	list := flag.String("guards", "hack/guards/guards.yaml", "the list of guards")
	only := flag.String("only", "", "check only the guards whose name contains this")
	discover := flag.Bool("discover", false, "run every test of the guard's package, and list those that fail without it")
	flag.Parse()

	guards, err := readGuards(*list)
	if err != nil {
		fatal(err)
	}
	guards = slices.DeleteFunc(guards, func(g guard) bool { return !strings.Contains(g.Name, *only) })
	if len(guards) == 0 {
		fatal(fmt.Errorf("no guard's name contains %q", *only))
	}
	if !*discover {
		for _, g := range guards {
			if len(g.Tests) == 0 {
				fatal(fmt.Errorf("guard %q names no test: find them with -discover -only", g.Name))
			}
		}
		if err := checkTestsPass(guards); err != nil {
			fatal(err)
		}
	}
	var defects []string
	for _, g := range guards {
		start := time.Now()
		failing, err := runWithout(g, *discover)
		took := time.Since(start).Round(time.Second)
		switch {
		case err != nil:
			defects = append(defects, fmt.Sprintf("%s: %v", g.Name, err))
			fmt.Printf("DEFECT  %s (%s): %v\n", g.Name, took, err)
		case *discover:
			fmt.Printf("%-7s %s (%s): fail without it: %s\n", heldWord(failing), g.Name, took, strings.Join(failing, " "))
			if len(failing) == 0 {
				defects = append(defects, g.Name+": no test of "+g.Package+" fails without it")
			}
		case len(failing) == 0:
			defects = append(defects, fmt.Sprintf("%s: %s pass without it", g.Name, strings.Join(g.Tests, ", ")))
			fmt.Printf("LIVED   %s (%s): %s pass without it\n", g.Name, took, strings.Join(g.Tests, ", "))
		default:
			fmt.Printf("held    %s (%s): %s\n", g.Name, took, strings.Join(failing, " "))
		}
	}
	if len(defects) > 0 {
		fmt.Printf("\n%d of %d guards are not held:\n  %s\n", len(defects), len(guards), strings.Join(defects, "\n  "))
		os.Exit(1)
	}
	fmt.Printf("\nall %d guards are held\n", len(guards))
}

func heldWord(failing []string) string {
	if len(failing) == 0 {
		return "LIVED"
	}
	return "held"
}

func readGuards(path string) ([]guard, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var guards []guard
	if err := yaml.UnmarshalStrict(data, &guards); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	names := map[string]bool{}
	for _, g := range guards {
		if g.Name == "" || g.File == "" || g.Find == "" || g.Package == "" || g.Find == g.Replace {
			return nil, fmt.Errorf("%s: guard %q needs a name, file, find, a different replace and package", path, g.Name)
		}
		if names[g.Name] {
			return nil, fmt.Errorf("%s: two guards named %q", path, g.Name)
		}
		names[g.Name] = true
	}
	return guards, nil
}

// checkTestsPass runs each package's named tests once as the code is: a test that fails with
// the guard in place says nothing when it fails without it.
func checkTestsPass(guards []guard) error {
	tests := map[string][]string{}
	for _, g := range guards {
		tests[g.Package] = append(tests[g.Package], g.Tests...)
	}
	for pkg, names := range tests {
		slices.Sort(names)
		out, err := goTest(pkg, slices.Compact(names), "")
		if err != nil {
			return fmt.Errorf("the guards' tests of %s fail with every guard in place:\n%s", pkg, out)
		}
	}
	return nil
}

// runWithout runs g's tests (or, discovering, all of its package's) with g taken out, and
// returns the tests that failed.
func runWithout(g guard, all bool) ([]string, error) {
	code, err := os.ReadFile(g.File)
	if err != nil {
		return nil, err
	}
	if n := bytes.Count(code, []byte(g.Find)); n != 1 {
		return nil, fmt.Errorf("its code occurs %d times in %s, not once: the list must follow the code", n, g.File)
	}
	dir, err := os.MkdirTemp("", "guard-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	without := filepath.Join(dir, filepath.Base(g.File))
	if err := os.WriteFile(without, bytes.Replace(code, []byte(g.Find), []byte(g.Replace), 1), 0o644); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(g.File)
	if err != nil {
		return nil, err
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {abs: without}})
	if err != nil {
		return nil, err
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		return nil, err
	}
	tests := g.Tests
	if all {
		tests = nil
	}
	out, err := goTest(g.Package, tests, overlayFile)
	failing := failedTests(out)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil, nil
	case !errors.As(err, &exit):
		return nil, err
	case len(failing) == 0:
		// A failure that names no test: the edit does not compile, or the run broke.
		return nil, fmt.Errorf("the tests did not run without it:\n%s", tail(out, 30))
	}
	return failing, nil
}

// goTest runs tests (all if none) of pkg, with overlay if given.
func goTest(pkg string, tests []string, overlay string) (string, error) {
	args := []string{"test", "-count=1", "-timeout=20m"}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	if len(tests) > 0 {
		args = append(args, "-run", "^("+strings.Join(tests, "|")+")$")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var failLine = regexp.MustCompile(`(?m)^--- FAIL: (\S+)`)

// failedTests are the top-level tests the output says failed.
func failedTests(out string) []string {
	var names []string
	for _, m := range failLine.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	return names
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "guards:", err)
	os.Exit(2)
}
