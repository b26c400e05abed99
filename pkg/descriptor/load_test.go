package descriptor

import (
	"errors"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tree writes files (path → content) under a new temp dir and makes the
// symbolic links (path → target); it returns the dir.
func tree(t *testing.T, files map[string]string, links map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// under returns the paths to load from the tree at dir: rel joined to dir,
// or dir itself when rel is nil.
func under(dir string, rel []string) []string {
	if rel == nil {
		return []string{dir}
	}
	paths := make([]string, len(rel))
	for i, p := range rel {
		paths[i] = filepath.Join(dir, p)
	}
	return paths
}

func domainYAML(name string, keys ...string) string {
	var b strings.Builder
	b.WriteString("domain: " + name + "\ndescriptors:\n")
	for _, k := range keys {
		b.WriteString("  - key: " + k + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	}
	return b.String()
}

func TestLoadDirectory(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		links map[string]string
		// paths relative to the tree; nil means the tree itself.
		paths    []string
		domains  []string
		warnings []string // Config.Warnings, relative to the tree
	}{
		{
			name: "nested dirs, both extensions, any case",
			files: map[string]string{
				"a.yaml":         domainYAML("a", "k"),
				"sub/b.yml":      domainYAML("b", "k"),
				"sub/deep/c.YML": domainYAML("c", "k"),
			},
			domains: []string{"a", "b", "c"},
		},
		{
			// The reference's runtime directory: every file is read,
			// whatever its extension (regression: files without .yaml or
			// .yml were skipped in silence and their limits not enforced).
			name: "every regular file is read whatever its extension",
			files: map[string]string{
				"a.yaml":       domainYAML("a", "k"),
				"b":            domainYAML("b", "k"),
				"c.conf":       domainYAML("c", "k"),
				"sub/d.txt":    domainYAML("d", "k"),
				".hidden.yaml": domainYAML("a", "k"),
				".git/config":  domainYAML("a", "k"),
			},
			domains:  []string{"a", "b", "c", "d"},
			warnings: []string{".git: not read: names starting with '.' are skipped", ".hidden.yaml: not read: names starting with '.' are skipped"},
		},
		{
			name: "Kubernetes ConfigMap mount reads each file once",
			files: map[string]string{
				"..2026_01_01_00_00_00.123/x.yaml": domainYAML("x", "k"),
				"..2026_01_01_00_00_00.123/y.yml":  domainYAML("y", "k"),
			},
			links: map[string]string{
				"..data": "..2026_01_01_00_00_00.123",
				"x.yaml": "..data/x.yaml",
				"y.yml":  "..data/y.yml",
			},
			domains: []string{"x", "y"},
		},
		{
			name:    "symbolic link to a directory is followed",
			files:   map[string]string{"real/a.yaml": domainYAML("a", "k")},
			links:   map[string]string{"conf/linked": "../real"},
			paths:   []string{"conf"},
			domains: []string{"a"},
		},
		{
			name: "a file reached twice is read once",
			files: map[string]string{
				"a.yaml": domainYAML("a", "k"),
			},
			links:   map[string]string{"also.yaml": "a.yaml"},
			paths:   []string{".", "a.yaml", "also.yaml"},
			domains: []string{"a"},
		},
		{
			name:    "an explicit file is read whatever its name",
			files:   map[string]string{"config.txt": domainYAML("t", "k"), ".dot": domainYAML("d", "k")},
			paths:   []string{"config.txt", ".dot"},
			domains: []string{"d", "t"},
		},
		{
			name:     "empty directory",
			files:    map[string]string{".notes.txt": "x"},
			domains:  nil,
			warnings: []string{".notes.txt: not read: names starting with '.' are skipped"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tree(t, tt.files, tt.links)
			paths := under(dir, tt.paths)
			c, err := Load(LoadOptions{}, paths...)
			if err != nil {
				t.Fatalf("Load:\n%v", err)
			}
			if got := c.Domains(); !reflect.DeepEqual(got, tt.domains) {
				t.Errorf("domains = %q, want %q", got, tt.domains)
			}
			var warnings []string
			for _, w := range c.Warnings() {
				warnings = append(warnings, strings.TrimPrefix(w, dir+string(filepath.Separator)))
			}
			if !reflect.DeepEqual(warnings, tt.warnings) {
				t.Errorf("warnings = %q, want %q", warnings, tt.warnings)
			}
			for _, name := range tt.domains {
				d := c.Domain(name)
				if d == nil || d.Name != name || d.Match(e("k", "v")) == nil {
					t.Errorf("domain %q missing or not matching", name)
				}
			}
		})
	}
}

// TestLoadErrors: Load reports every error of every file, with file and
// line, and returns no config.
func TestLoadErrors(t *testing.T) {
	type fileWant struct {
		file   string // relative to the tree
		line   int
		reason string
	}
	tests := []struct {
		name  string
		opts  LoadOptions
		files map[string]string
		links map[string]string
		paths []string
		wants []fileWant
	}{
		{
			name: "errors of several files are all reported",
			files: map[string]string{
				"a.yaml": "domain: a\ndescriptors:\n  - key: x\n    rate_limit: {unit: sec}\n  - vale: 1\n",
				"b.yaml": "domain: b\nbogus: true\n",
				"c.yaml": domainYAML("c", "fine"),
			},
			wants: []fileWant{
				{"a.yaml", 4, "invalid rate limit unit 'sec'"},
				{"a.yaml", 5, "unknown key 'vale'"},
				{"a.yaml", 5, "descriptor has empty key"},
				{"b.yaml", 2, "unknown key 'bogus'"},
			},
		},
		{
			name: "duplicate domain across files",
			files: map[string]string{
				"a.yaml":     domainYAML("same", "x"),
				"sub/b.yaml": "# comment\n" + domainYAML("same", "y"),
			},
			wants: []fileWant{{"sub/b.yaml", 2, "duplicate domain 'same' in config file (first in "}},
		},
		{
			name: "strict: a second document is an error",
			opts: LoadOptions{Strict: true},
			files: map[string]string{
				"a.yaml": domainYAML("same", "x") + "---\n" + domainYAML("other", "y"),
			},
			wants: []fileWant{{"a.yaml", 6, "a second YAML document starts here"}},
		},
		{
			name: "merged domains still reject colliding composite keys",
			opts: LoadOptions{MergeDomains: true},
			files: map[string]string{
				"a.yaml": domainYAML("same", "x", "y"),
				"b.yaml": domainYAML("same", "z", "y"),
			},
			wants: []fileWant{{"b.yaml", 5, "duplicate descriptor composite key 'same.y' (first at "}},
		},
		{
			name: "merged domains with different failure modes",
			opts: LoadOptions{MergeDomains: true},
			files: map[string]string{
				"a.yaml": "domain: d\nfailure_mode: allow\n",
				"b.yaml": "domain: d\nfailure_mode: deny\n",
			},
			wants: []fileWant{{"b.yaml", 2, "failure_mode deny of domain 'd' conflicts with failure_mode allow"}},
		},
		{
			name:  "missing path",
			paths: []string{"nope"},
			wants: []fileWant{{"nope", 0, "cannot read"}},
		},
		{
			name:  "dangling link in a directory",
			files: map[string]string{"a.yaml": domainYAML("a", "x")},
			links: map[string]string{"gone.yaml": "missing.yaml"},
			wants: []fileWant{{"gone.yaml", 0, "cannot read"}},
		},
		{
			name:  "symbolic link loop",
			files: map[string]string{"d/a.yaml": domainYAML("a", "x")},
			links: map[string]string{"d/loop": ".."},
			paths: []string{"d"},
			wants: []fileWant{{"d/loop/d", 0, "symbolic link loop"}},
		},
		{
			// The reload watcher looks no deeper: a file there would be
			// loaded once and its changes never seen.
			name: "directory nested deeper than the watcher looks",
			files: map[string]string{
				strings.Repeat("d/", MaxDirectoryDepth-1) + "a.yaml":  domainYAML("a", "x"),
				strings.Repeat("d/", MaxDirectoryDepth) + "deep.yaml": domainYAML("b", "x"),
			},
			wants: []fileWant{{strings.TrimSuffix(strings.Repeat("d/", MaxDirectoryDepth), "/"), 0,
				"directory nested 32 levels below the config path, more than the 31 that are read and watched"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tree(t, tt.files, tt.links)
			paths := under(dir, tt.paths)
			c, err := Load(tt.opts, paths...)
			if c != nil {
				t.Errorf("Load returned a config despite errors")
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("err = %T %v, want ErrorList", err, err)
			}
			if len(list) != len(tt.wants) {
				t.Errorf("%d errors, want %d:\n%v", len(list), len(tt.wants), err)
			}
			for i, w := range tt.wants {
				if i >= len(list) {
					break
				}
				got := list[i]
				if got.File != filepath.Join(dir, w.file) || got.Line != w.line || !strings.Contains(got.Reason, w.reason) {
					t.Errorf("error %d = %v, want %s:%d: ...%s...", i, got, w.file, w.line, w.reason)
				}
			}
		})
	}
}

func TestLoadMergeDomains(t *testing.T) {
	dir := tree(t, map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - key: k\n    value: v*\n    metadata: {id: a}\n",
		"b.yaml": "domain: d\nfailure_mode: deny\ndescriptors:\n  - key: k\n    value: va*\n    metadata: {id: b}\n  - key: other\n    metadata: {id: other}\n",
	}, nil)
	if _, err := Load(LoadOptions{}, dir); err == nil {
		t.Fatal("duplicate domain accepted without MergeDomains")
	}
	c, err := Load(LoadOptions{MergeDomains: true}, dir)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("d")
	if d.FailureMode != FailureDeny {
		t.Errorf("failure mode = %v, want deny (from b.yaml)", d.FailureMode)
	}
	// Wildcards keep load order across files: a.yaml's v* comes first.
	for _, tt := range []struct {
		entries []Entry
		want    string
	}{
		{e("k", "vabc"), "a"},
		{e("other", "x"), "other"},
	} {
		if got := id(d.Match(tt.entries)); got != tt.want {
			t.Errorf("Match(%q) = %q, want %q", tt.entries, got, tt.want)
		}
	}
	var order []string
	d.Walk(func(n *Node) { order = append(order, id(n)) })
	if want := []string{"a", "b", "other"}; !reflect.DeepEqual(order, want) {
		t.Errorf("walk order = %q, want %q", order, want)
	}
}

func TestNewConfig(t *testing.T) {
	a1, _ := Parse("a1.yaml", []byte("domain: a\n"))
	a2, _ := Parse("a2.yaml", []byte("\ndomain: a\n"))
	b, _ := Parse("b.yaml", []byte("domain: b\n"))
	c, err := NewConfig(b[0], a1[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Domains(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("domains = %q", got)
	}
	c.Domains()[0] = "changed"
	if c.Domains()[0] != "a" {
		t.Error("Domains exposes the config's own slice")
	}
	_, err = NewConfig(a1[0], a2[0])
	checkErrors(t, "a2.yaml", err, []want{{line: 2, reason: "duplicate domain 'a' in config file (first in a1.yaml:1)"}})
}

func TestDump(t *testing.T) {
	c, err := Load(LoadOptions{}, "testdata/design.yaml", "testdata/reference.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dump := c.Dump()
	for _, line := range []string{
		"api.remote_address: fixed_window 20/1 second, shadow_mode: false, quota_mode: false, charge_over_limit: default",
		"api.user: burst: token_bucket 10/1 second burst 30; hourly: sliding_window 1000/1 hour; daily: fixed_window 10000/1 day in Asia/Shanghai, shadow_mode: false, quota_mode: false, charge_over_limit: default",
		"api.user.path_/api/ocr: fixed_window 3/5 minute, shadow_mode: false, quota_mode: false, charge_over_limit: default",
		"api.user.path_/public/*: unlimited, shadow_mode: false, quota_mode: false, charge_over_limit: default",
		"rl.shady: fixed_window 3/1 minute, shadow_mode: true, quota_mode: false, charge_over_limit: default",
		"rl.service_service_1: fixed_window 1/1 minute, shadow_mode: false, quota_mode: true, charge_over_limit: true (quota_mode)",
	} {
		if !strings.Contains(dump, line+"\n") {
			t.Errorf("dump lacks %q", line)
		}
	}
	lines := strings.Split(strings.TrimSuffix(dump, "\n"), "\n")
	if !slicesSorted(lines) {
		t.Errorf("dump not sorted:\n%s", dump)
	}
	// Nodes without rules (rl.healthcheck, rl.source_cluster_proxy) are not listed.
	if strings.Contains(dump, "healthcheck") || strings.Contains(dump, "rl.source_cluster_proxy:") {
		t.Errorf("dump lists nodes without rules:\n%s", dump)
	}
	if want := 4 + 15; len(lines) != want {
		t.Errorf("dump has %d lines, want %d:\n%s", len(lines), want, dump)
	}
}

func slicesSorted(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] > s[i] {
			return false
		}
	}
	return true
}

// TestPath checks Node.Path against the reference's stats key format
// (without the domain): key-only nodes omit the value, wildcard nodes keep
// the pattern, levels are joined by '.'.
func TestPath(t *testing.T) {
	d := parseFile(t, "testdata/reference.yaml")
	for _, tt := range []struct {
		entries []Entry
		want    string
	}{
		{e("remote_address", "1.2.3.4"), "remote_address"},
		{e("remote_address", "50.0.0.5"), "remote_address_50.0.0.5"},
		{e("source_cluster", "proxy", "destination_cluster", "bar"), "source_cluster_proxy.destination_cluster_bar"},
		{e("files", "files/a.pdf"), "files_files/*"},
	} {
		n := d.Match(tt.entries)
		if n == nil {
			t.Fatalf("no match for %q", tt.entries)
		}
		if got := n.Path(); got != tt.want {
			t.Errorf("Path = %q, want %q", got, tt.want)
		}
		// A hand-built copy (no cached path) gives the same.
		if got := (&Node{Key: n.Key, Value: n.Value, Parent: n.Parent}).Path(); got != tt.want {
			t.Errorf("uncached Path = %q, want %q", got, tt.want)
		}
	}
}

// TestLoadNamesSpecialFiles: a file that is not regular (a named pipe) is
// not read, and Warnings names it.
func TestLoadNamesSpecialFiles(t *testing.T) {
	dir := tree(t, map[string]string{"a.yaml": domainYAML("a", "k")}, nil)
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a named pipe: %v", err)
	}
	c, err := Load(LoadOptions{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{fifo + ": not read: not a regular file (p---------)"}
	if got := c.Warnings(); !reflect.DeepEqual(got, want) {
		t.Errorf("warnings = %q, want %q", got, want)
	}
}

// TestLoadRefusesExplicitSpecialFile: a path given to Load that names
// neither a regular file nor a directory (a named pipe, a device) is an
// error naming the path, and is not read. Before, a named pipe blocked
// Load (and so sluice's start) forever, and a device was read as a file.
func TestLoadRefusesExplicitSpecialFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a named pipe: %v", err)
	}
	for _, tt := range []struct {
		name, path, want string
	}{
		{"named pipe", fifo, fifo + ": not a regular file or a directory (p---------): a config path must name one"},
		{"device", os.DevNull, os.DevNull + ": not a regular file or a directory (Dc---------): a config path must name one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			type result struct {
				c   *Config
				err error
			}
			done := make(chan result, 1)
			go func() {
				c, err := Load(LoadOptions{}, tt.path)
				done <- result{c, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second): // a deadline for a hang, not a wait
				t.Fatalf("Load(%s) blocked", tt.path)
			}
			if r.err == nil || r.err.Error() != tt.want {
				t.Errorf("Load(%s) = %v, %v; want error %q", tt.path, r.c, r.err, tt.want)
			}
		})
	}
}

// TestReadFileRefusesSpecialFile: the read itself refuses a named pipe
// without blocking, so a regular file replaced by one between the walk
// and the read (a reload racing a deploy) cannot block the load. Before,
// opening the pipe waited for a writer.
func TestReadFileRefusesSpecialFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a named pipe: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := readFile(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		if want := "not a regular file or a directory (p---------): a config path must name one"; err == nil || err.Error() != want {
			t.Errorf("readFile(pipe) = %v, want %q", err, want)
		}
	case <-time.After(30 * time.Second): // a deadline for a hang, not a wait
		t.Fatal("readFile(pipe) blocked")
	}
}

// TestLoadRefusesLargeFile: a file over MaxFileSize is an error naming the
// bound, and is not read past it.
func TestLoadRefusesLargeFile(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	data := []byte(domainYAML("a", "k") + "# " + strings.Repeat("x", MaxFileSize) + "\n")
	if err := os.WriteFile(big, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(LoadOptions{}, dir)
	checkErrors(t, big, err, []want{{line: 0, reason: "file is larger than 4194304 bytes (4 MiB)"}})
}

// TestDomainDepth: Depth is the deepest node's depth, whichever merged
// file holds it; 0 for no domain.
func TestDomainDepth(t *testing.T) {
	dir := tree(t, map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - key: a\n",
		"b.yaml": "domain: d\ndescriptors:\n  - key: b\n    descriptors:\n      - key: c\n        descriptors:\n          - key: e\n",
	}, nil)
	c, err := Load(LoadOptions{MergeDomains: true}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Domain("d").Depth(); got != 3 {
		t.Errorf("Depth = %d, want 3 (b.yaml's b.c.e)", got)
	}
	if got := c.Domain("none").Depth(); got != 0 {
		t.Errorf("Depth of no domain = %d, want 0", got)
	}
}

// TestLoadWalksSharedDirectoryOnce: a directory reached along many paths
// of symbolic links (no cycle) is walked once, so a tree whose links
// double the paths at each of 30 levels loads at once, its file read once.
// Walking it along every path never ended.
func TestLoadWalksSharedDirectoryOnce(t *testing.T) {
	top, shared := testenv.SharedLinks(t, t.TempDir(), 30)
	testenv.ReplaceFile(t, filepath.Join(shared, "a.yaml"), domainYAML("a", "k"))
	type result struct {
		c   *Config
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := Load(LoadOptions{}, top)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Load: %v (the shared file must be read once, not reported as a duplicate domain)", r.err)
		}
		if got := r.c.Domains(); !reflect.DeepEqual(got, []string{"a"}) {
			t.Errorf("domains = %q, want [a]", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Load still walking after 30s: it walks the shared directory along each of the 2^30 paths")
	}
}

// TestLoadDotFiles: with LoadOptions.DotFiles, names starting with '.' are
// read, files and directories, as the reference reads them unless
// RUNTIME_IGNOREDOTFILES=true; the Kubernetes atomic writer's '..' entries
// are still skipped (their files are read once, through the links).
func TestLoadDotFiles(t *testing.T) {
	dir := tree(t, map[string]string{
		"a.yaml":                           domainYAML("a", "k"),
		".hidden.yaml":                     domainYAML("h", "k"),
		".conf/d.yaml":                     domainYAML("d", "k"),
		"..2026_01_01_00_00_00.123/x.yaml": domainYAML("x", "k"),
	}, map[string]string{"..data": "..2026_01_01_00_00_00.123", "x.yaml": "..data/x.yaml"})
	for _, tc := range []struct {
		dot      bool
		domains  []string
		warnings int
	}{
		{false, []string{"a", "x"}, 2},
		{true, []string{"a", "d", "h", "x"}, 0},
	} {
		c, err := Load(LoadOptions{DotFiles: tc.dot}, dir)
		if err != nil {
			t.Fatalf("DotFiles %v: %v", tc.dot, err)
		}
		if got := c.Domains(); !reflect.DeepEqual(got, tc.domains) || len(c.Warnings()) != tc.warnings {
			t.Errorf("DotFiles %v: domains %q, warnings %q; want %q and %d warnings", tc.dot, got, c.Warnings(), tc.domains, tc.warnings)
		}
	}
}
