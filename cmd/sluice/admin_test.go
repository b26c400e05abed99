package main

import (
	"bufio"
	"encoding/json"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// adminAddr finds the admin listener's address in serve's JSON log.
func adminAddr(log string) string {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var line struct {
			Message string `json:"@message"`
			Addr    string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(line.Message, "admin listener serving") {
			return line.Addr
		}
	}
	return ""
}

func (s *served) admin(t *testing.T) string {
	t.Helper()
	var addr string
	waitFor(t, "the admin listener", func() bool {
		addr = adminAddr(s.stderr.String())
		return addr != ""
	})
	return addr
}

// adminConfig limits each user twice a year (rule per_user) and 5 times
// a year together with the path (two rules on user+path).
const adminConfig = `domain: api
descriptors:
  - key: user
    rate_limits:
      - name: per_user
        unit: year
        requests_per_unit: 2
    descriptors:
      - key: path
        rate_limits:
          - name: path_window
            unit: year
            requests_per_unit: 3
          - name: path_bucket
            algorithm: token_bucket
            unit: year
            requests_per_unit: 5
`

// TestCountersGetAndReset drives a client over its limit through sluice
// check, then looks its counter up and resets it with sluice counters, on
// the memory backend and on Redis (where the denial cache remembers the
// denial: the reset must forget it too). A value holding commas goes
// through --entry.
func TestCountersGetAndReset(t *testing.T) {
	rs := startRedis(t)
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"memory", []string{"BACKEND_TYPE=memory"}},
		{"redis", []string{"REDIS_URL=" + rs.Addr(), "CACHE_KEY_PREFIX=admin:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeConfig(t, dir, "api.yaml", adminConfig)
			s := startServe(t, append([]string{"SLUICE_CONFIG=" + dir}, tc.env...))
			admin := s.admin(t)
			user := "acme, inc."
			checkUser := func() int {
				code, _, _ := runCmd(t, nil, "check", "--addr", s.grpc, "--domain", "api", "--entry", "user="+user)
				return code
			}
			for i, want := range []int{0, 0, 1, 1} {
				if code := checkUser(); code != want {
					t.Fatalf("check %d: exit %d, want %d", i+1, code, want)
				}
			}

			env := []string{"SLUICE_ADMIN_ADDR=" + admin, "USER=oncall"}
			code, out, errOut := runCmd(t, env, "counters", "get", "--domain", "api", "--entry", "user="+user)
			if code != 0 {
				t.Fatalf("counters get: exit %d: %s", code, errOut)
			}
			for _, want := range []string{"matched: api.user (", "per_user", "fixed_window", "2 per 1 year", "would be OVER_LIMIT", "per_user: 2 counted in the window "} {
				if !strings.Contains(out, want) {
					t.Errorf("counters get output lacks %q:\n%s", want, out)
				}
			}
			code, out, errOut = runCmd(t, env, "counters", "get", "--json", "--domain", "api", "--entry", "user="+user)
			var got struct {
				Matched struct{ Path string }
				Rules   []struct {
					Name            string
					Used, Remaining uint64
					Binding         bool
				}
				Allowed bool
			}
			if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
				t.Fatalf("counters get --json: exit %d, %v: %s%s", code, err, out, errOut)
			}
			if got.Matched.Path != "api.user" || len(got.Rules) != 1 || got.Rules[0].Used != 2 || got.Rules[0].Remaining != 0 || !got.Rules[0].Binding || got.Allowed {
				t.Errorf("counters get --json: %+v", got)
			}
			// The lookup consumed nothing: still exactly used 2.
			if _, out, _ = runCmd(t, env, "counters", "get", "--json", "--domain", "api", "--entry", "user="+user); !strings.Contains(out, `"used": 2`) {
				t.Errorf("a second lookup sees another count:\n%s", out)
			}

			code, out, errOut = runCmd(t, env, "counters", "reset", "--domain", "api", "--entry", "user="+user, "--rule", "per_user")
			if code != 0 || !strings.Contains(out, "reset per_user on api user=acme, inc.") || !strings.Contains(out, "would be admitted") {
				t.Fatalf("counters reset: exit %d\n%s%s", code, out, errOut)
			}
			if code := checkUser(); code != 0 {
				t.Errorf("check after reset: exit %d, want 0 (admitted)", code)
			}
			log := s.stderr.String()
			for _, want := range []string{`"audit":"counters.reset"`, `"operator":"oncall"`, `"descriptor":"user=acme, inc."`, `"audit":"counters.get"`} {
				if !strings.Contains(log, want) {
					t.Errorf("the log lacks %s", want)
				}
			}

			// A rule that is not on the descriptor, and an unknown domain,
			// are errors (exit 1) naming the problem.
			code, _, errOut = runCmd(t, env, "counters", "reset", "--domain", "api", "--entry", "user=x", "--rule", "nope")
			if code != 1 || !strings.Contains(errOut, `no rule named "nope"`) || !strings.Contains(errOut, "per_user") {
				t.Errorf("reset of an unknown rule: exit %d: %s", code, errOut)
			}
			code, _, errOut = runCmd(t, env, "counters", "get", "--domain", "nope", "--entry", "user=x")
			if code != 1 || !strings.Contains(errOut, "domain not configured") {
				t.Errorf("get on an unknown domain: exit %d: %s", code, errOut)
			}

			// Two rules on user+path: reset only one of them.
			for range 3 {
				runCmd(t, nil, "check", "--addr", s.grpc, "--domain", "api", "--descriptor", "user=u,path=/p")
			}
			runCmd(t, env, "counters", "reset", "--domain", "api", "--descriptor", "user=u,path=/p", "--rule", "path_window")
			_, out, _ = runCmd(t, env, "counters", "get", "--json", "--domain", "api", "--descriptor", "user=u,path=/p")
			got.Rules = nil
			if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Rules) != 2 ||
				got.Rules[0].Used != 0 || got.Rules[1].Used != 3 {
				t.Errorf("after resetting path_window only: %v %+v", err, got.Rules)
			}
		})
	}
}

// TestAdminListenerSurface: /rlconfig, pprof and the page are on the
// admin listener; a token file makes every request need the token.
func TestAdminListenerSurface(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", adminConfig)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "SLUICE_ADMIN_TOKEN_FILE=" + tokenFile})
	admin := s.admin(t)
	get := func(path, token string) (int, string) {
		if token == "" {
			return testenv.HTTPGet(t, "http://"+admin+path)
		}
		return testenv.HTTPGet(t, "http://"+admin+path, "Authorization", "Bearer "+token)
	}
	for _, tc := range []struct {
		path, token string
		code        int
		contains    string
	}{
		{"/rlconfig", "", 401, ""},
		{"/rlconfig", "wrong", 401, ""},
		{"/rlconfig", "s3cret", 200, "api.user: per_user: fixed_window 2/1 year"},
		{"/debug/pprof/goroutine?debug=1", "s3cret", 200, "goroutine profile:"},
		{"/", "s3cret", 200, "Top denied descriptors"},
		{"/api/v1/status", "s3cret", 200, `"domains": [`},
		{"/api/v1/top?by=hits&window=1h", "s3cret", 200, `"window": "1h"`},
		{"/api/v1/top?window=1d", "s3cret", 400, "window must be"},
	} {
		code, body := get(tc.path, tc.token)
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s with token %q: %d %.200q, want %d containing %q", tc.path, tc.token, code, body, tc.code, tc.contains)
		}
	}
	tok := []string{"SLUICE_ADMIN_ADDR=" + admin}
	if code, _, errOut := runCmd(t, tok, "counters", "get", "--domain", "api", "--entry", "user=x"); code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("counters get without the token: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCmd(t, append(tok, "SLUICE_ADMIN_TOKEN_FILE="+tokenFile), "counters", "get", "--domain", "api", "--entry", "user=x"); code != 0 {
		t.Errorf("counters get with the token: exit %d: %s", code, errOut)
	}
}

// TestAdminRefusesOpenNonLoopback: an admin listener on every interface
// without a token or client certificates is refused at start.
func TestAdminRefusesOpenNonLoopback(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", adminConfig)
	code, _, errOut := runCmd(t, append(loopback, "SLUICE_CONFIG="+dir, "SLUICE_ADMIN_ADDR=0.0.0.0:0"), "serve")
	if code != 1 || !strings.Contains(errOut, "not a loopback address") {
		t.Errorf("serve with an open admin listener: exit %d: %s", code, errOut)
	}
}

// TestResetReachesOtherInstances: two instances share a Redis; each has
// cached the client's denial. A reset through one instance's admin
// listener is announced, and the other stops denying too, well before its
// cached denial (a whole year) or the cache's age bound would end.
func TestResetReachesOtherInstances(t *testing.T) {
	rs := startRedis(t)
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", adminConfig)
	env := []string{"SLUICE_CONFIG=" + dir, "REDIS_URL=" + rs.Addr(), "CACHE_KEY_PREFIX=fan:", "SLUICE_LOCAL_CACHE_MAX_AGE=1h"}
	a, b := startServe(t, env), startServe(t, env)
	checkOn := func(s *served) int {
		code, _, _ := runCmd(t, nil, "check", "--addr", s.grpc, "--domain", "api", "--entry", "user=carol")
		return code
	}
	for i, s := range []*served{a, b, a, b, a, b} {
		want := 0
		if i >= 2 {
			want = 1
		}
		if code := checkOn(s); code != want {
			t.Fatalf("call %d: exit %d, want %d", i+1, code, want)
		}
	}
	// b answered its last denial from its cache.
	if !strings.Contains(b.scrapeMetricsText(t), "sluice_denycache_hits_total 1") {
		t.Fatalf("b did not answer a denial from its cache:\n%s", b.scrapeMetricsText(t))
	}
	if code, out, errOut := runCmd(t, []string{"SLUICE_ADMIN_ADDR=" + a.admin(t)}, "counters", "reset", "--domain", "api", "--entry", "user=carol"); code != 0 {
		t.Fatalf("reset on a: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, "b to admit after the reset on a", func() bool { return checkOn(b) == 0 })
}

// scrapeMetricsText returns /metrics as text.
func (s *served) scrapeMetricsText(t *testing.T) string {
	t.Helper()
	_, body := s.get(t, "/metrics")
	return body
}
