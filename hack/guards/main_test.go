package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The list follows the code: each guard's code is where the list says, once, and each names
// the tests that hold it, which exist. make test runs this; make guards takes the guards out.
func TestEveryGuardIsWhereTheListSays(t *testing.T) {
	guards, err := readGuards("guards.yaml")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..")
	for _, g := range guards {
		code, err := os.ReadFile(filepath.Join(root, g.File))
		if err != nil {
			t.Errorf("%s: %v", g.Name, err)
			continue
		}
		if n := bytes.Count(code, []byte(g.Find)); n != 1 {
			t.Errorf("%s: its code occurs %d times in %s, not once: the list must follow the code", g.Name, n, g.File)
		}
		if len(g.Tests) == 0 {
			t.Errorf("%s: names no test that holds it", g.Name)
		}
		for _, name := range g.Tests {
			if !testDeclared(t, filepath.Join(root, g.Package), name) {
				t.Errorf("%s: no test %s in %s", g.Name, name, g.Package)
			}
		}
	}
}

// testDeclared says whether a _test.go file of dir declares the test function name.
func testDeclared(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		code, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(code, []byte("\nfunc "+name+"(t *testing.T)")) {
			return true
		}
	}
	return false
}
