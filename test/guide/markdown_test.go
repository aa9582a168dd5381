package guide

import (
	"os/exec"
	"slices"
	"testing"
)

func TestBlocksAndTheirManifests(t *testing.T) {
	page := "# A page\n\n```sh\nkubectl apply -f - <<EOF\napiVersion: v1\nkind: Secret\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: b}\nEOF\nkubectl get secret a\n```\n\n" +
		SkipMarker + "\n```sh\nmake demo\n```\n\n```yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n```\n"
	blocks, err := Blocks(page)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 || blocks[0].Line != 3 || blocks[0].Skip || !blocks[1].Skip || blocks[2].Skip || blocks[2].Lang != "yaml" {
		t.Fatalf("blocks = %+v", blocks)
	}
	var names []string
	for _, b := range blocks {
		for _, text := range Manifests(b) {
			objects, err := Objects(text)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objects {
				names = append(names, o.GetKind()+"/"+o.GetName())
			}
		}
	}
	if want := []string{"Secret/a", "Secret/b", "ConfigMap/c"}; !slices.Equal(names, want) {
		t.Errorf("objects %v, want %v", names, want)
	}
	if _, err := Blocks("```sh\nnever closed\n"); err == nil {
		t.Error("an unclosed block was accepted")
	}
	if _, err := Objects("kind: Secret\nmetadata: {name: a}\n"); err == nil {
		t.Error("a document without apiVersion was accepted")
	}
}

// Every shell block of the README and the guide that make test-guide runs is valid bash
// (bash -n), so a page's syntax error is caught by make test, before it runs on a cluster.
// Skipped blocks are left out: they hold placeholders such as <registry>.
func TestPagesShellBlocksParse(t *testing.T) {
	pages, err := Pages(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	parsed := 0
	for _, page := range pages {
		blocks, err := Blocks(page.Text)
		if err != nil {
			t.Fatalf("%s: %v", page.Name, err)
		}
		for _, block := range blocks {
			if block.Skip || (block.Lang != "sh" && block.Lang != "bash") {
				continue
			}
			if out, err := exec.Command("bash", "-n", "-c", block.Text).CombinedOutput(); err != nil {
				t.Errorf("%s:%d: %v\n%s", page.Name, block.Line, err, out)
			}
			parsed++
		}
	}
	if parsed == 0 {
		t.Fatal("no shell block found in the README or docs/guide")
	}
}
