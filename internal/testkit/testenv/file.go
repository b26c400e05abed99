// Package testfile writes files in tests the way anything that polls them
// must see them: whole. Config directories the reload watcher polls, and
// certificate files re-read at each handshake, are replaced by writing a
// temporary file beside them and renaming it over the old one, as a
// Kubernetes volume or a careful operator does.

package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// ReplaceFile creates or replaces the file at path with content, atomically:
// it writes a hidden temporary file in the same directory (created if
// missing) and renames it over path, so a reader never sees half a file.
// Any failure fails t.
func ReplaceFile(t testing.TB, path, content string) {
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

// SharedLinks builds under dir a directory that reaches one shared
// directory along 2^levels paths: directories d0 to d<levels>, each d<i>
// (i ≥ 1) holding two symbolic links, a and b, to d<i-1>. There is no
// cycle, yet a walk that does not remember the directories it has walked
// visits d0 2^levels times. It returns d<levels>, to walk, and d0, which
// starts empty, to put files in. Any failure fails t.
func SharedLinks(t testing.TB, dir string, levels int) (top, shared string) {
	t.Helper()
	name := func(i int) string { return filepath.Join(dir, "d"+strconv.Itoa(i)) }
	if err := os.MkdirAll(name(0), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= levels; i++ {
		if err := os.Mkdir(name(i), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, link := range []string{"a", "b"} {
			if err := os.Symlink(name(i-1), filepath.Join(name(i), link)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return name(levels), name(0)
}
