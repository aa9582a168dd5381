// Package guide reads the user guide's pages (docs/guide/*.md) and the README as a test reads
// them: their shell blocks to run, and the Kubernetes objects their YAML shows, to validate.
package guide

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"
)

// SkipMarker, on the line before a fenced block, keeps the block from being run: for commands
// that need what a test cannot have (a registry of yours, a fresh machine). Rendered Markdown
// does not show it. The block's YAML is still validated.
const SkipMarker = "<!-- guide: skip -->"

// Block is one fenced code block of a page.
type Block struct {
	Lang string
	Text string
	Line int // of the opening fence, 1-based
	Skip bool
}

// Blocks are the fenced code blocks of a Markdown page, in order.
func Blocks(markdown string) ([]Block, error) {
	var blocks []Block
	var open *Block
	previous := ""
	scanner := bufio.NewScanner(strings.NewReader(markdown))
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		fence := strings.HasPrefix(line, "```")
		switch {
		case open == nil && fence:
			lang, _, _ := strings.Cut(strings.TrimPrefix(line, "```"), " ")
			open = &Block{Lang: lang, Line: n, Skip: strings.TrimSpace(previous) == SkipMarker}
		case open != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *open)
			open = nil
		case open != nil:
			open.Text += line + "\n"
		}
		if strings.TrimSpace(line) != "" {
			previous = line
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if open != nil {
		return nil, fmt.Errorf("the block opened at line %d is never closed", open.Line)
	}
	return blocks, nil
}

// A here-document that feeds YAML to a command: `<<EOF` or `<<'EOF'`, up to a line `EOF`.
var heredoc = regexp.MustCompile(`<<-?'?"?(\w+)'?"?\s*$`)

// Manifests are the YAML texts a block shows: a yaml block itself, or the here-documents of a
// shell block.
func Manifests(b Block) []string {
	switch b.Lang {
	case "yaml":
		return []string{b.Text}
	case "sh", "bash":
	default:
		return nil
	}
	var docs []string
	var body strings.Builder
	end := ""
	for _, line := range strings.Split(b.Text, "\n") {
		switch {
		case end == "":
			if m := heredoc.FindStringSubmatch(line); m != nil {
				end = m[1]
				body.Reset()
			}
		case strings.TrimSpace(line) == end:
			docs = append(docs, body.String())
			end = ""
		default:
			body.WriteString(line + "\n")
		}
	}
	return docs
}

// Objects decodes a YAML text of one or more documents into objects; empty documents are
// dropped, and a document that is not an object with apiVersion and kind is an error.
func Objects(text string) ([]*unstructured.Unstructured, error) {
	var objects []*unstructured.Unstructured
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		fields := map[string]any{}
		if err := sigsyaml.UnmarshalStrict([]byte(doc), &fields); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if len(fields) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: fields}
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" {
			return nil, fmt.Errorf("document %d has no apiVersion or kind", i+1)
		}
		objects = append(objects, obj)
	}
	return objects, nil
}
