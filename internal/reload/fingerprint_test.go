package reload

import (
	"crypto/sha256"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// writeFile writes content to dir/name, creating parent directories, and
// sets its mtime to a fixed instant so tests control what changes.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(p, fixed, fixed); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// kubeDir lays out dir as the kubelet does for a ConfigMap volume: the data
// in a timestamped dot-directory, `..data` pointing at it, and one visible
// symlink per key pointing through `..data`.
func kubeDir(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		writeFile(t, dir, filepath.Join(version, name), content)
		if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) {
			symlink(t, filepath.Join("..data", name), filepath.Join(dir, name))
		}
	}
}

// kubeSwap points `..data` at a new version atomically (symlink + rename),
// as the kubelet does, and removes the old version.
func kubeSwap(t *testing.T, dir, oldVersion, newVersion string, files map[string]string) {
	t.Helper()
	kubeDir(t, dir, newVersion, files)
	tmp := filepath.Join(dir, "..data_tmp")
	symlink(t, newVersion, tmp)
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, oldVersion)); err != nil {
		t.Fatal(err)
	}
}

func TestFingerprint(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		mutate  func(t *testing.T, dir string)
		changed bool
	}{
		{
			name:   "nothing changes",
			setup:  func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "domain: a\n") },
			mutate: func(t *testing.T, dir string) {},
		},
		{
			name:    "yaml content changes, same size and mtime",
			setup:   func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "domain: a\n") },
			mutate:  func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "domain: b\n") },
			changed: true,
		},
		{
			name:    "yml content changes",
			setup:   func(t *testing.T, dir string) { writeFile(t, dir, "a.yml", "domain: a\n") },
			mutate:  func(t *testing.T, dir string) { writeFile(t, dir, "a.yml", "domain: b\n") },
			changed: true,
		},
		{
			name:  "other file changes size",
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "notes.txt", "x") },
			mutate: func(t *testing.T, dir string) {
				writeFile(t, dir, "notes.txt", "xy")
			},
			changed: true,
		},
		{
			name:  "other file changes mtime",
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "notes.txt", "x") },
			mutate: func(t *testing.T, dir string) {
				later := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
				if err := os.Chtimes(filepath.Join(dir, "notes.txt"), later, later); err != nil {
					t.Fatal(err)
				}
			},
			changed: true,
		},
		{
			name:    "file added",
			setup:   func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "domain: a\n") },
			mutate:  func(t *testing.T, dir string) { writeFile(t, dir, "b.yaml", "domain: b\n") },
			changed: true,
		},
		{
			name:    "file added in a subdirectory",
			setup:   func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "domain: a\n") },
			mutate:  func(t *testing.T, dir string) { writeFile(t, dir, "sub/b.yaml", "domain: b\n") },
			changed: true,
		},
		{
			name:  "file removed",
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "domain: a\n") },
			mutate: func(t *testing.T, dir string) {
				if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
					t.Fatal(err)
				}
			},
			changed: true,
		},
		{
			name:  "file renamed",
			setup: func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "domain: a\n") },
			mutate: func(t *testing.T, dir string) {
				if err := os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")); err != nil {
					t.Fatal(err)
				}
			},
			changed: true,
		},
		{
			name:   "dot file added",
			setup:  func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "domain: a\n") },
			mutate: func(t *testing.T, dir string) { writeFile(t, dir, ".a.yaml.swp", "junk") },
		},
		{
			name:   "file in dot directory changes",
			setup:  func(t *testing.T, dir string) { writeFile(t, dir, ".git/HEAD", "a") },
			mutate: func(t *testing.T, dir string) { writeFile(t, dir, ".git/HEAD", "b") },
		},
		{
			name: "kubernetes ..data swap",
			setup: func(t *testing.T, dir string) {
				kubeDir(t, dir, "..2026_01_01", map[string]string{"a.yaml": "domain: a\n"})
				symlink(t, "..2026_01_01", filepath.Join(dir, "..data"))
			},
			mutate: func(t *testing.T, dir string) {
				kubeSwap(t, dir, "..2026_01_01", "..2026_01_02", map[string]string{"a.yaml": "domain: b\n"})
			},
			changed: true,
		},
		{
			name: "symlinked directory's content changes",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, ".real/a.yaml", "domain: a\n")
				symlink(t, ".real", filepath.Join(dir, "linked"))
			},
			mutate:  func(t *testing.T, dir string) { writeFile(t, dir, ".real/a.yaml", "domain: b\n") },
			changed: true,
		},
		{
			name: "symlink cycle",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, "a.yaml", "domain: a\n")
				symlink(t, ".", filepath.Join(dir, "loop"))
			},
			mutate: func(t *testing.T, dir string) {},
		},
		{
			name: "dangling symlink appears",
			setup: func(t *testing.T, dir string) {
				writeFile(t, dir, "a.yaml", "domain: a\n")
			},
			mutate: func(t *testing.T, dir string) {
				symlink(t, "nowhere.yaml", filepath.Join(dir, "b.yaml"))
			},
			changed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			before, err := Fingerprint(dir)
			if err != nil {
				t.Fatalf("Fingerprint before: %v", err)
			}
			tt.mutate(t, dir)
			after, err := Fingerprint(dir)
			if err != nil {
				t.Fatalf("Fingerprint after: %v", err)
			}
			if got := before != after; got != tt.changed {
				t.Errorf("changed = %v, want %v", got, tt.changed)
			}
		})
	}
}

func TestFingerprintPaths(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "domain: a\n")
	writeFile(t, dir, "b.yaml", "domain: b\n")
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")

	ab, err := Fingerprint(a, b)
	if err != nil {
		t.Fatal(err)
	}
	ba, err := Fingerprint(b, a)
	if err != nil {
		t.Fatal(err)
	}
	if ab == ba {
		t.Error("Fingerprint(a, b) == Fingerprint(b, a): the order of paths is not part of the fingerprint")
	}
	whole, err := Fingerprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if whole == ab {
		t.Error("a directory and its files listed one by one share a fingerprint")
	}

	if _, err := Fingerprint(filepath.Join(dir, "missing")); err == nil {
		t.Error("Fingerprint of a missing path: no error")
	}
}

// TestFingerprintHashesEveryFile: the loader reads files whatever their
// extension, so a same-size rewrite with the same modification time of a
// file without .yaml is a change too.
func TestFingerprintHashesEveryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits")
	when := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(content string) string {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, when, when); err != nil {
			t.Fatal(err)
		}
		fp, err := Fingerprint(dir)
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	if write("domain: a\n") == write("domain: b\n") {
		t.Error("fingerprint unchanged after rewriting a file without .yaml")
	}
}

// TestFingerprintWalksSharedDirectoryOnce: a directory reached along many
// paths of symbolic links (no cycle) is hashed once, so a tree whose links
// double the paths at each of 30 levels is fingerprinted at once (walking
// every path took 2^30 visits, every poll); a change in the shared
// directory still changes the fingerprint, as does a link moved to
// another directory.
func TestFingerprintWalksSharedDirectoryOnce(t *testing.T) {
	dir := t.TempDir()
	top, shared := testenv.SharedLinks(t, dir, 30)
	fingerprint := func() string {
		t.Helper()
		type result struct {
			fp  string
			err error
		}
		done := make(chan result, 1)
		go func() {
			fp, err := Fingerprint(top)
			done <- result{fp, err}
		}()
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.fp
		case <-time.After(30 * time.Second):
			t.Fatal("Fingerprint still walking after 30s: it walks the shared directory along each of the 2^30 paths")
			return ""
		}
	}
	writeFile(t, shared, "a.yaml", "domain: a\n")
	first := fingerprint()
	writeFile(t, shared, "a.yaml", "domain: b\n")
	second := fingerprint()
	if second == first {
		t.Error("fingerprint unchanged after the shared file changed")
	}
	other := filepath.Join(dir, "other")
	writeFile(t, other, "a.yaml", "domain: b\n")
	if err := os.Remove(filepath.Join(top, "b")); err != nil {
		t.Fatal(err)
	}
	symlink(t, other, filepath.Join(top, "b"))
	if fingerprint() == second {
		t.Error("fingerprint unchanged after a link moved to another directory with the same content")
	}
}

// TestFingerprintSeesEveryFileLoadReads: a file in the deepest directory
// the loader reads changes the fingerprint when it changes (the loader
// refuses a deeper directory, which the fingerprint does not look into).
func TestFingerprintSeesEveryFileLoadReads(t *testing.T) {
	dir := t.TempDir()
	deepest := filepath.Join(strings.Repeat("d/", descriptor.MaxDirectoryDepth-1), "a.yaml")
	writeFile(t, dir, deepest, "domain: a\n")
	if _, err := descriptor.Load(descriptor.LoadOptions{}, dir); err != nil {
		t.Fatalf("Load: %v", err)
	}
	before, err := Fingerprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, deepest, "domain: b\n")
	if after, err := Fingerprint(dir); err != nil || after == before {
		t.Errorf("fingerprint unchanged (%v) after the deepest file Load reads changed", err)
	}
}

// TestHashFileReplacedByPipe: a file that was regular when walked and is a
// named pipe when opened (replaced between the two) changes the
// fingerprint and does not block it. Before, opening the pipe waited for a
// writer, and the watcher with it.
func TestHashFileReplacedByPipe(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "x")
	path := filepath.Join(dir, "a.yaml")
	regular, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	before := sha256.New()
	if err := hashFile(before, path, "a.yaml", regular); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("cannot make a named pipe: %v", err)
	}
	done := make(chan error, 1)
	after := sha256.New()
	go func() { done <- hashFile(after, path, "a.yaml", regular) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a deadline for a hang, not a wait
		t.Fatal("hashing a named pipe blocked")
	}
	if string(before.Sum(nil)) == string(after.Sum(nil)) {
		t.Error("the pipe left the fingerprint unchanged")
	}
}

// TestFingerprintDotFiles: with FingerprintOptions.DotFiles a change to a
// dot-file or inside a dot-directory changes the fingerprint, as the
// loader then reads them; without it, it does not. The Kubernetes
// atomic writer's '..' entries stay out either way (a ..data swap is seen
// through the links beside it).
func TestFingerprintDotFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, dir string)
		mutate func(t *testing.T, dir string)
		// changed without and with DotFiles.
		without, with bool
	}{
		{"dot file added", func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "domain: a\n") },
			func(t *testing.T, dir string) { writeFile(t, dir, ".b.yaml", "domain: b\n") }, false, true},
		{"file in dot directory changes", func(t *testing.T, dir string) { writeFile(t, dir, ".conf/a.yaml", "domain: a\n") },
			func(t *testing.T, dir string) { writeFile(t, dir, ".conf/a.yaml", "domain: b\n") }, false, true},
		{"kubernetes directory without links", func(t *testing.T, dir string) {
			kubeDir(t, dir, "..2026_01_01", map[string]string{"a.yaml": "domain: a\n"})
		}, func(t *testing.T, dir string) { writeFile(t, dir, "..2026_01_01/a.yaml", "domain: b\n") }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			var before [2]string
			for i, dot := range []bool{false, true} {
				fp, err := FingerprintWith(FingerprintOptions{DotFiles: dot}, dir)
				if err != nil {
					t.Fatal(err)
				}
				before[i] = fp
			}
			tc.mutate(t, dir)
			for i, want := range []bool{tc.without, tc.with} {
				after, err := FingerprintWith(FingerprintOptions{DotFiles: i == 1}, dir)
				if err != nil {
					t.Fatal(err)
				}
				if got := after != before[i]; got != want {
					t.Errorf("DotFiles %v: changed %v, want %v", i == 1, got, want)
				}
			}
		})
	}
}
