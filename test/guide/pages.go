package guide

import (
	"os"
	"path/filepath"
	"sort"
)

// Page is a Markdown file whose blocks a user copies: the README or a guide page.
type Page struct {
	Name string // the file's path from the repository's root
	Text string
}

// Pages reads the README and every page of docs/guide, from the repository's root.
func Pages(root string) ([]Page, error) {
	paths, err := filepath.Glob(filepath.Join(root, "docs", "guide", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	paths = append([]string{filepath.Join(root, "README.md")}, paths...)
	pages := make([]Page, 0, len(paths))
	for _, path := range paths {
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		name, err := filepath.Rel(root, path)
		if err != nil {
			return nil, err
		}
		pages = append(pages, Page{Name: name, Text: string(text)})
	}
	return pages, nil
}
