package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// Replace creates the file (and its directory), replaces it, and leaves
// nothing else behind.
func TestReplaceFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "a.yaml")
	for _, content := range []string{"domain: a\n", "domain: b\n"} {
		ReplaceFile(t, path, content)
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("read %q, %v; want %q", b, err, content)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 || entries[0].Name() != "a.yaml" {
		t.Fatalf("directory holds %v (%v), want only a.yaml", entries, err)
	}
}

// SharedLinks: the top directory reaches the shared one through every
// combination of its links, and the shared one starts empty.
func TestSharedLinks(t *testing.T) {
	top, shared := SharedLinks(t, t.TempDir(), 3)
	for _, path := range []string{"a/a/a", "a/b/a", "b/b/b"} {
		fi, err := os.Stat(filepath.Join(top, path))
		want, _ := os.Stat(shared)
		if err != nil || !os.SameFile(fi, want) {
			t.Errorf("%s/%s is not the shared directory (%v)", top, path, err)
		}
	}
	if entries, err := os.ReadDir(shared); err != nil || len(entries) != 0 {
		t.Errorf("shared directory holds %v (%v), want nothing", entries, err)
	}
}
