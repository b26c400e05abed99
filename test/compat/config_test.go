package compat

import (
	"bytes"
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// validate runs `sluice validate args...` with env and returns whether it
// accepted the config (exit 0) and what it printed.
func validate(t *testing.T, env []string, args ...string) (accepted bool, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluicetest.Binary(t), append([]string{"validate"}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("sluice validate: %v", err)
	}
	return err == nil, buf.String()
}

// verdict renders validate's answer as the incumbent's config tests see it.
func verdict(accepted bool) string {
	if accepted {
		return "loaded"
	}
	return "refused"
}

// domainsOK matches validate's summary, "N domain(s) OK".
var domainsOK = regexp.MustCompile(`(\d+) domains? OK`)

// loaded renders validate's answer with the number of domains loaded.
func loaded(accepted bool, out string) string {
	if !accepted {
		return "refused"
	}
	if m := domainsOK.FindStringSubmatch(out); m != nil {
		return "loaded " + m[1]
	}
	return "loaded ?"
}

// TestConfigRefused: every config the incumbent's config tests refuse
// (test/config), refused with an error naming the file.
func TestConfigRefused(t *testing.T) {
	for _, c := range []struct{ file, incumbent string }{
		{"bad_limit_unit.yaml", "invalid rate limit unit 'foo'"},
		{"bad_yaml.yaml", "yaml: line 2: found unexpected end of stream"},
		{"duplicate_key.yaml", "duplicate descriptor composite key 'test-domain.key1_value1'"},
		{"empty_domain.yaml", "config file cannot have empty domain"},
		{"empty_key.yaml", "descriptor has empty key"},
		{"misspelled_key.yaml", "config error, unknown key 'ratelimit'"},
		{"misspelled_key2.yaml", "config error, unknown key 'requestsperunit'"},
		{"non_map_list.yaml", "config error, yaml file contains list of type other than map: a"},
		{"non_string_key.yaml", "config error, key is not of type string: 0.25"},
		{"replaces_empty.yaml", "should not have an empty replaces entry"},
		{"replaces_self.yaml", "replaces should not contain name of same descriptor"},
		{"unlimited_with_unit.yaml", "should not specify rate limit unit when unlimited"},
	} {
		t.Run(c.file, func(t *testing.T) {
			t.Parallel()
			accepted, out := validate(t, nil, filepath.Join("testdata", "fixtures", c.file))
			expect(t, c.file+" (the incumbent: "+c.incumbent+")", verdict(accepted), "refused")
			if !accepted && !strings.Contains(out, c.file) {
				t.Errorf("%s: the error does not name the file:\n%s", c.file, out)
			}
		})
	}
}

// TestConfigDomains is the incumbent's TestDuplicateDomain and
// TestDomainMerge: two files of one domain are refused, unless
// MERGE_DOMAIN_CONFIG merges them; a key repeated across merged files is
// still refused.
func TestConfigDomains(t *testing.T) {
	dir := filepath.Join("testdata", "fixtures")
	k1, k2 := filepath.Join(dir, "merge_domain_key1.yaml"), filepath.Join(dir, "merge_domain_key2.yaml")
	accepted, _ := validate(t, nil, k1, k2)
	expect(t, "one domain in two files", verdict(accepted), "refused")
	accepted, _ = validate(t, nil, k1, filepath.Join(dir, "duplicate_domain.yaml"))
	expect(t, "duplicate domain", verdict(accepted), "refused")
	accepted, out := validate(t, []string{"MERGE_DOMAIN_CONFIG=true"}, k1, k2)
	expect(t, "one domain in two files, merged", verdict(accepted), "loaded")
	if !accepted {
		t.Logf("%s", out)
	}
	twice := filepath.Join(t.TempDir(), "again.yaml")
	b, err := os.ReadFile(k1)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(twice, b, 0o644); err != nil {
		t.Fatal(err)
	}
	accepted, _ = validate(t, []string{"MERGE_DOMAIN_CONFIG=true"}, k1, twice)
	expect(t, "one key in two merged files", verdict(accepted), "refused")

	// Merged through the binary: both files' limits apply.
	for _, v := range []variant{memory, standalone} {
		t.Run(v.name, func(t *testing.T) {
			s := start(t, v, map[string]string{"MERGE_DOMAIN_CONFIG": "true"},
				"fixtures/merge_domain_key1.yaml", "fixtures/merge_domain_key2.yaml")
			sluicetest.AwayFromEdge(t, time.Minute, 0, 5*time.Second)
			resp := s.ask(t, rq("test-domain", d("key1", "value1")))
			expect(t, "key1 of the first file", answerOf(resp), ans(ok, limited(ok, 10, "MINUTE", 9)))
			resp = s.ask(t, rq("test-domain", d("key2", "value2")))
			expect(t, "key2 of the second file", answerOf(resp), ans(ok, limited(ok, 20, "MINUTE", 19)))
		})
	}
}

// TestConfigTolerated: configs the incumbent loads although they hold
// keys in places it ignores, a repeated key, or a second YAML document.
func TestConfigTolerated(t *testing.T) {
	for _, file := range []string{
		"shadow_in_rate_limit.yaml", "name_on_descriptor.yaml", "unit_at_root.yaml", "duplicate_yaml_key.yaml", "stream.yaml",
	} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			accepted, out := validate(t, nil, filepath.Join("testdata", "tolerated", file))
			expect(t, file, loaded(accepted, out), "loaded 1")
		})
	}
}

// TestConfigFiles: the incumbent loads every file of its runtime
// directory, whatever its name; with RUNTIME_IGNOREDOTFILES unset, dot-files
// too.
func TestConfigFiles(t *testing.T) {
	s := start(t, memory, nil, "runtime/ratelimit/config/basic.yaml=basic", "runtime/ratelimit/config/another.yaml=.another.yaml")
	resp := s.ask(t, rq("basic", d("key1", sluicetest.Unique("foo"))))
	expect(t, "a config file without .yaml", answerOf(resp), ans(ok, limited(ok, 50, "SECOND", 49)))
	sluicetest.AwayFromEdge(t, time.Minute, 0, 5*time.Second)
	resp = s.ask(t, rq("another", d("key2", sluicetest.Unique("foo"))))
	expect(t, "a dot-file", answerOf(resp), ans(ok, limited(ok, 20, "MINUTE", 19)),
		because(devDotfiles, ans(ok, noLimit)))
}

// TestConfigFilesDotFilesRead: with RUNTIME_IGNOREDOTFILES=false set
// explicitly, sluice reads the dot-file as the incumbent does by default.
func TestConfigFilesDotFilesRead(t *testing.T) {
	s := start(t, memory, map[string]string{"RUNTIME_IGNOREDOTFILES": "false"},
		"runtime/ratelimit/config/basic.yaml=basic", "runtime/ratelimit/config/another.yaml=.another.yaml")
	resp := s.ask(t, rq("another", d("key2", sluicetest.Unique("foo"))))
	expect(t, "a dot-file", answerOf(resp), ans(ok, limited(ok, 20, "MINUTE", 19)))
}

// devMissingPath: a config directory that does not exist at start stops
// sluice; the incumbent starts without limits and loads it when it
// appears.
var devMissingPath = dev("config-path-missing-at-start")

// TestConfigPathMissingAtStart: with its default RUNTIME_WATCH_ROOT=true,
// the incumbent starts when RUNTIME_ROOT does not exist yet, answers every
// call OK without limits, and loads the directory when the RUNTIME_ROOT
// symlink appears (a git-sync sidecar's first sync; checked against its
// binary). sluice exits 1 naming the path.
func TestConfigPathMissingAtStart(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "current")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluicetest.Binary(t), "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "RUNTIME_ROOT=" + missing, "RUNTIME_SUBDIRECTORY=ratelimit",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0", "SLUICE_ADMIN_ADDR=127.0.0.1:0"}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	got := "starts"
	if exit, ok := err.(*exec.ExitError); ok && ctx.Err() == nil {
		got = "exits " + strconv.Itoa(exit.ExitCode())
		if !strings.Contains(buf.String(), filepath.Join(missing, "ratelimit", "config")) {
			t.Errorf("the error does not name the missing directory:\n%s", buf.String())
		}
	}
	expect(t, "a RUNTIME_ROOT that does not exist yet", got, "starts", because(devMissingPath, "exits 1"))
}

// TestConfigPathMissingAtStartForceStart: with
// FORCE_START_WITHOUT_INITIAL_CONFIG=true sluice answers as the incumbent
// does by default: it starts without limits and loads the directory when
// the RUNTIME_ROOT symlink appears.
func TestConfigPathMissingAtStartForceStart(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "current")
	p := sluicetest.Start(t, sluicetest.Options{Env: map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "SLUICE_RELOAD_INTERVAL": "100ms",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	}})
	s := &server{Process: p, v: memory, dir: filepath.Join(root, "ratelimit", "config")}
	req := rq("basic", d("key1", sluicetest.Unique("foo")))
	expect(t, "before RUNTIME_ROOT appears", answerOf(s.ask(t, req)), ans(ok, noLimit))

	if err := os.MkdirAll(filepath.Join(base, "v1", "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join("testdata", "runtime/ratelimit/config/basic.yaml"), filepath.Join(base, "v1", "ratelimit", "config", "basic.yaml"))
	if err := os.Symlink("v1", root); err != nil {
		t.Fatal(err)
	}
	testenv.Until(t, 10*time.Second, "the directory to load", func() bool {
		return answerOf(s.ask(t, req)) != ans(ok, noLimit)
	})
	expect(t, "after RUNTIME_ROOT appears", answerOf(s.ask(t, rq("basic", d("key1", sluicetest.Unique("foo"))))),
		ans(ok, limited(ok, 50, "SECOND", 49)))
}
