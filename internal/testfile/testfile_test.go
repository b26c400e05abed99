package testfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Replace creates the file (and its directory), replaces it, and leaves
// nothing else behind.
func TestReplace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "a.yaml")
	for _, content := range []string{"domain: a\n", "domain: b\n"} {
		Replace(t, path, content)
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("read %q, %v; want %q", b, err, content)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 || entries[0].Name() != "a.yaml" {
		t.Fatalf("directory holds %v (%v), want only a.yaml", entries, err)
	}
}
