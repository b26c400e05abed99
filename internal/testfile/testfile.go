// Package testfile writes files in tests the way anything that polls them
// must see them: whole. Config directories the reload watcher polls, and
// certificate files re-read at each handshake, are replaced by writing a
// temporary file beside them and renaming it over the old one, as a
// Kubernetes volume or a careful operator does.
package testfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Replace creates or replaces the file at path with content, atomically:
// it writes a hidden temporary file in the same directory (created if
// missing) and renames it over path, so a reader never sees half a file.
// Any failure fails t.
func Replace(t testing.TB, path, content string) {
	t.Helper()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
