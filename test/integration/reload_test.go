package integration

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// yearLimit is a one-domain config limiting k to n a year.
func yearLimit(domain, n string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: " + n + "}\n"
}

// TestReload changes the config files under a running binary: a new limit
// applies (keeping the usage already counted, since the rule's key does not
// change with its limit), a broken file is rejected while the last good
// config keeps serving, a fixed file applies again, and domains come and go
// with their files.
func TestReload(t *testing.T) {
	rs := redistest.Standalone(t)
	dir := configDir(t, map[string]string{"r.yaml": yearLimit("r", "2")})
	p := sluicetest.Start(t, sluicetest.Options{
		ConfigDir: dir,
		Env:       merge(standaloneEnv(rs), map[string]string{"SLUICE_RELOAD_INTERVAL": "50ms"}),
	})
	k := entries("k", sluicetest.Unique("k"))
	consume := func(want verdict) {
		t.Helper()
		if got := statusOf(call(t, p, sluicetest.Request("r", 0, k)).Statuses[0]); got != want {
			t.Fatalf("call: %v, want %v", got, want)
		}
	}
	waitLimit := func(domain string, limit uint32) {
		t.Helper()
		testenv.Until(t, 10*time.Second, fmt.Sprintf("domain %s limit %d", domain, limit), func() bool {
			st := peek(t, p, domain, k)
			return st.CurrentLimit != nil && st.CurrentLimit.RequestsPerUnit == limit
		})
	}
	waitRejected := func(n int) {
		t.Helper()
		testenv.Until(t, 10*time.Second, "the reload to be rejected", func() bool {
			return strings.Count(p.Logs(), "config reload rejected") >= n
		})
	}

	consume(verdict{ok, "", 2, 1})

	// Raise the limit: the count of 1 is kept.
	testenv.ReplaceFile(t, filepath.Join(dir, "r.yaml"), yearLimit("r", "5"))
	waitLimit("r", 5)
	if got := statusOf(peek(t, p, "r", k)); got != (verdict{ok, "", 5, 4}) {
		t.Errorf("after raising the limit to 5: %v, want remaining 4 (the count survives)", got)
	}

	// Broken files: a YAML syntax error, then a bad value. Both are
	// rejected and the limit of 5 keeps serving.
	for i, broken := range []string{
		"domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 7\n",
		yearLimit("r", "-7"),
	} {
		testenv.ReplaceFile(t, filepath.Join(dir, "r.yaml"), broken)
		waitRejected(i + 1)
		if got := statusOf(peek(t, p, "r", k)); got != (verdict{ok, "", 5, 4 - uint32(i)}) {
			t.Fatalf("after broken file %d: %v, want the old limit 5 serving", i+1, got)
		}
		consume(verdict{ok, "", 5, 3 - uint32(i)})
	}
	if !strings.Contains(p.Logs(), "r.yaml:") {
		t.Errorf("the rejection does not name the file and line:\n%s", p.Logs())
	}

	// Fixed: a limit of 7 with 3 counted.
	testenv.ReplaceFile(t, filepath.Join(dir, "r.yaml"), yearLimit("r", "7"))
	waitLimit("r", 7)
	if got := statusOf(peek(t, p, "r", k)); got != (verdict{ok, "", 7, 4}) {
		t.Errorf("after the fix: %v, want limit 7 remaining 4", got)
	}

	// A new file adds a domain; removing it removes the domain.
	if got := statusOf(peek(t, p, "s", k)); got != (verdict{code: ok}) {
		t.Fatalf("unknown domain s: %v", got)
	}
	testenv.ReplaceFile(t, filepath.Join(dir, "s.yaml"), yearLimit("s", "3"))
	waitLimit("s", 3)
	if err := os.Remove(filepath.Join(dir, "s.yaml")); err != nil {
		t.Fatal(err)
	}
	testenv.Until(t, 10*time.Second, "domain s to go", func() bool { return peek(t, p, "s", k).CurrentLimit == nil })
}

// TestBadConfigAtStart: an invalid config at start is a non-zero exit that
// names the file and line, before anything listens.
func TestBadConfigAtStart(t *testing.T) {
	dir := configDir(t, map[string]string{"bad.yaml": yearLimit("bad", "-1")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluicetest.Binary(t), "serve", "--config", dir)
	cmd.Env = []string{"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0", "BACKEND_TYPE=memory"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("serve with a bad config: %v, want exit 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "bad.yaml:4") || strings.Contains(string(out), "listening") {
		t.Errorf("output does not name bad.yaml:4, or the server listened:\n%s", out)
	}
}
