package generated

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// internals are words of the operator's code and design, not of its users: a description that
// uses one explains how the operator works instead of what the field does for the user.
var internals = []string{
	"reconcil", "controller-runtime", "internal/", "observe()", "membership.", "decide",
	"a latch", "parser", "agent", "status writes",
	"DeepCopy", "kubebuilder", "gofail", "failpoint", "TODO", "FIXME",
}

// What `kubectl explain` shows is the CRDs' descriptions, written from the API's Go comments:
// documentation for users. None may end in the middle of a sentence (a colon or comma left
// before a marker line) or talk of the operator's insides.
func TestCRDDescriptionsReadAsUserDocumentation(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "config/crd/bases/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var crd map[string]any
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatal(err)
		}
		var walk func(node any, path string)
		walk = func(node any, path string) {
			switch n := node.(type) {
			case map[string]any:
				if desc, ok := n["description"].(string); ok {
					// Each paragraph: a marker between two paragraphs of a comment leaves the first
					// one in the description, and it must not end mid-sentence either.
					for _, paragraph := range strings.Split(desc, "\n\n") {
						if text := strings.TrimSpace(paragraph); strings.HasSuffix(text, ":") || strings.HasSuffix(text, ",") {
							t.Errorf("%s %s: a paragraph of the description ends mid-sentence: …%s", filepath.Base(file), path, text[max(0, len(text)-80):])
						}
					}
					for _, word := range internals {
						if strings.Contains(desc, word) {
							t.Errorf("%s %s: the description talks of the operator's insides (%q)", filepath.Base(file), path, word)
						}
					}
				}
				for key, child := range n {
					walk(child, path+"."+key)
				}
			case []any:
				for _, child := range n {
					walk(child, path)
				}
			}
		}
		walk(crd, "")
	}
}
