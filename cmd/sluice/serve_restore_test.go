package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestServeWaitsForMissingConfig: with FORCE_START_WITHOUT_INITIAL_CONFIG
// a config directory that does not exist yet at start (a git-sync
// sidecar's first sync) does not stop sluice, as it does not stop the
// incumbent with its default RUNTIME_WATCH_ROOT=true: it starts with no
// domain, says so naming the path, answers OK without limits, reports
// NOT_SERVING meanwhile if HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED is set,
// and loads the directory when the RUNTIME_ROOT symlink appears and on
// every later symlink swap.
func TestServeWaitsForMissingConfig(t *testing.T) {
	for _, tc := range []struct {
		name            string
		healthy         string
		healthBeforeCfg int
	}{
		{"health follows the config", "true", 500},
		{"health ignores the config", "false", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "current")
			s := startServe(t, []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit",
				"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=" + tc.healthy,
				"SLUICE_HEALTH_INTERVAL=20ms"}, "--reload-interval", "20ms")
			missing := filepath.Join(root, "ratelimit", "config")
			if log := s.stderr.String(); !strings.Contains(log, `"level":"warning"`) || !strings.Contains(log, "does not exist") ||
				!strings.Contains(log, missing) {
				t.Errorf("no start-up warning naming %s:\n%s", missing, log)
			}
			health := func(want int) func() bool {
				return func() bool { code, _ := s.get(t, "/healthcheck"); return code == want }
			}
			waitFor(t, "health "+strconv.Itoa(tc.healthBeforeCfg)+" before the config", health(tc.healthBeforeCfg))
			if out := s.check(t, "--domain", "api", "--descriptor", "k=v"); !strings.HasPrefix(out, "overall: OK\n  [1] k=v: OK  no limit") {
				t.Errorf("before the config: %s", out)
			}
			domains := func(want string) func() bool {
				return func() bool {
					_, body := s.get(t, "/metrics")
					return strings.Contains(body, "\nsluice_config_domains "+want+"\n")
				}
			}
			if !domains("0")() {
				t.Error("sluice_config_domains is not 0 before the config")
			}

			// git-sync: each sync is a new directory, and RUNTIME_ROOT a
			// symlink to it, swapped by a rename.
			sync := func(version, content string) {
				t.Helper()
				writeConfig(t, filepath.Join(base, version, "ratelimit", "config"), "api.yaml", content)
				tmp := filepath.Join(base, "tmp-link")
				if err := os.Symlink(version, tmp); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, root); err != nil {
					t.Fatal(err)
				}
			}
			limitIs := func(n int) func() bool {
				return func() bool {
					return strings.Contains(s.check(t, "--domain", "api", "--descriptor", "k=v"), "limit "+strconv.Itoa(n)+" per year")
				}
			}
			sync("v1", yearly(2))
			waitFor(t, "the first sync to be loaded", limitIs(2))
			waitFor(t, "health 200 once loaded", health(200))
			waitFor(t, "sluice_config_domains 1 once loaded", domains("1"))
			sync("v2", yearly(7))
			waitFor(t, "the second sync to be loaded", limitIs(7))

			// The directory vanishing later keeps the last good config.
			if err := os.Remove(root); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the empty reload to be refused", func() bool {
				return strings.Contains(s.stderr.String(), "the new configuration has no domain")
			})
			if !limitIs(7)() {
				t.Error("the limit is no longer 7 after the directory vanished")
			}
			if code := s.stop(t); code != 0 {
				t.Errorf("serve exit %d after cancel, want 0", code)
			}
		})
	}
}

// TestServeMissingConfigExits: without FORCE_START_WITHOUT_INITIAL_CONFIG a
// missing config directory stops the start, and the error names the
// setting that waits for it; with it, a directory partly there (one of
// several --config paths) still stops it, and so does an invalid config:
// only "nothing there yet" is waited for.
func TestServeMissingConfigExits(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(1))
	missing := filepath.Join(dir, "nope")
	bad := t.TempDir()
	badFile := writeConfig(t, bad, "api.yaml", "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	for _, tc := range []struct {
		name string
		env  []string
		want []string
	}{
		{"not asked to wait", []string{"SLUICE_CONFIG=" + missing}, []string{missing, "FORCE_START_WITHOUT_INITIAL_CONFIG=true"}},
		{"one of two paths missing", []string{"SLUICE_CONFIG=" + dir + "," + missing, "FORCE_START_WITHOUT_INITIAL_CONFIG=true"}, []string{missing}},
		{"an invalid config is not waited for", []string{"SLUICE_CONFIG=" + bad, "FORCE_START_WITHOUT_INITIAL_CONFIG=true"}, []string{badFile + ":4: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCmd(t, append(append([]string{}, loopback...), tc.env...), "serve")
			if code != 1 {
				t.Errorf("exit %d, want 1:\n%s", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, errOut)
				}
			}
		})
	}
}

// TestServeOverrideUnitMultiplier: SLUICE_OVERRIDE_UNIT_MULTIPLIER=false
// ignores a request limit override's unit_multiplier, as the incumbent
// does; by default it is honoured.
func TestServeOverrideUnitMultiplier(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(1))
	for _, tc := range []struct {
		env, want string
	}{
		{"SLUICE_OVERRIDE_UNIT_MULTIPLIER=true", "limit 3 per 5 minutes"},
		{"SLUICE_OVERRIDE_UNIT_MULTIPLIER=false", "limit 3 per minute"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			s := startServe(t, []string{"SLUICE_CONFIG=" + dir, tc.env})
			if out := s.check(t, "--domain", "api", "--descriptor", "x=1", "--limit", "3/5minute"); !strings.Contains(out, tc.want+"  remaining 2") {
				t.Errorf("check: %s\nwant %q", out, tc.want)
			}
		})
	}
}

// TestServeDotFiles: RUNTIME_IGNOREDOTFILES=false, set explicitly, reads
// the config directory's dot-files (and polls them for changes) as the
// incumbent reads them by default; unset or true, they are skipped, each
// named in a warning.
func TestServeDotFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		read bool
	}{
		{"unset", nil, false},
		{"true", []string{"RUNTIME_IGNOREDOTFILES=true"}, false},
		{"false", []string{"RUNTIME_IGNOREDOTFILES=false"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "ratelimit", "config")
			writeConfig(t, dir, "api.yaml", yearly(1))
			writeConfig(t, dir, ".dot.yaml", strings.Replace(yearly(2), "domain: api", "domain: dot", 1))
			s := startServe(t, append([]string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit"}, tc.env...), "--reload-interval", "20ms")
			limited := func(domain string) func() bool {
				return func() bool {
					return strings.Contains(s.check(t, "--domain", domain, "--descriptor", "k=v"), "limit 2 per year")
				}
			}
			if got := limited("dot")(); got != tc.read {
				t.Errorf("the dot-file's domain is loaded: %v, want %v", got, tc.read)
			}
			if warned := strings.Contains(s.stderr.String(), ".dot.yaml: not read"); warned == tc.read {
				t.Errorf("warning naming the skipped dot-file: %v, want %v\n%s", warned, !tc.read, s.stderr)
			}
			if tc.read {
				writeConfig(t, dir, ".more.yaml", strings.Replace(yearly(2), "domain: api", "domain: more", 1))
				waitFor(t, "a dot-file added later to be loaded", limited("more"))
			}
		})
	}
}
