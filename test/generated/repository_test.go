package generated

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedFileSize bounds a tracked file: the largest sources are the generated CRDs (~150 kB).
const maxTrackedFileSize = 2 << 20

// Built binaries and large files never land in the repository (a 93 MB operator binary once
// did): every tracked file is text of a sensible size, none an executable's format.
func TestNoBuiltBinaryOrLargeFileIsTracked(t *testing.T) {
	out, err := exec.Command("git", "-C", repoRoot, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for name := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		path := filepath.Join(repoRoot, name)
		info, err := os.Lstat(path)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		if info.Size() > maxTrackedFileSize {
			t.Errorf("%s is %d bytes: larger than %d, is it built?", name, info.Size(), maxTrackedFileSize)
			continue
		}
		if why := builtBinary(path); why != "" {
			t.Errorf("%s is %s: built binaries are never committed", name, why)
		}
	}
}

// builtBinary names the executable format path is in, or says it holds NUL bytes (no source
// here does), or "".
func builtBinary(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	head := data[:min(len(data), 8192)]
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "an ELF executable"
	case bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return "a Mach-O executable"
	case bytes.HasPrefix(head, []byte("MZ")):
		return "a Windows executable"
	case bytes.IndexByte(head, 0) >= 0:
		return "binary (it holds NUL bytes)"
	}
	return ""
}
