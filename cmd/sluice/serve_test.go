package main

import (
	"bufio"
	"context"
	"encoding/json"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// loopback makes serve listen on free 127.0.0.1 ports and log JSON, so the
// test can read the addresses from the "listening" line.
var loopback = []string{"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0", "SLUICE_ADMIN_ADDR=127.0.0.1:0", "LOG_FORMAT=json"}

// served is an in-process `sluice serve`.
type served struct {
	cancel     context.CancelFunc
	exit       chan int
	stderr     *testenv.SyncBuffer
	grpc, http string
}

func startServe(t *testing.T, env []string, args ...string) *served {
	t.Helper()
	return startCommand(t, "serve", env, args...)
}

// startCommand is startServe for the command cmd, serve or ratelimit.
func startCommand(t *testing.T, cmd string, env []string, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{cancel: cancel, exit: make(chan int, 1), stderr: &testenv.SyncBuffer{}}
	go func() {
		s.exit <- run(ctx, append([]string{cmd}, args...), slices.Concat(loopback, env), io.Discard, s.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.exit:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	waitFor(t, "serve to listen", func() bool {
		select {
		case code := <-s.exit:
			t.Fatalf("serve exited %d:\n%s", code, s.stderr)
		default:
		}
		s.grpc, s.http = listenAddrs(s.stderr.String())
		return s.grpc != ""
	})
	return s
}

// stop cancels serve and returns its exit code.
func (s *served) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.exit:
		s.exit <- code // for the cleanup
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
		return -1
	}
}

// listenAddrs finds the JSON "listening" log line and returns its addresses.
func listenAddrs(log string) (grpcAddr, httpAddr string) {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var line struct {
			Message string `json:"@message"`
			GRPC    string `json:"grpc"`
			HTTP    string `json:"http"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "listening" {
			return line.GRPC, line.HTTP
		}
	}
	return "", ""
}

func (s *served) check(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCmd(t, nil, append([]string{"check", "--addr", s.grpc}, args...)...)
	if code != 0 && code != 1 { // 1: OVER_LIMIT
		t.Fatalf("check exit %d: %s", code, errOut)
	}
	return out
}

func (s *served) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return testenv.HTTPGet(t, "http://"+s.http+path)
}

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Until(t, 20*time.Second, what, cond)
}

// yearly limits k=<any> to n per (epoch-aligned, 365-day) year: no window
// ends during a test, whatever the wall clock.
func yearly(n int) string {
	return strings.Replace(limitConfig("api", n), "minute", "year", 1)
}

func TestServeAndCheck(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(2))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "USE_STATSD=true", "MEMCACHE_HOST_PORT=m:1"})

	for i, want := range []string{
		"overall: OK\n  [1] k=v: OK  limit 2 per year  remaining 1  reset in ",
		"overall: OK\n  [1] k=v: OK  limit 2 per year  remaining 0  reset in ",
		"overall: OVER_LIMIT\n  [1] k=v: OVER_LIMIT  limit 2 per year  remaining 0  reset in ",
	} {
		if out := s.check(t, "--domain", "api", "--descriptor", "k=v"); !strings.HasPrefix(out, want) {
			t.Errorf("check %d:\n%s\nwant prefix\n%s", i+1, out, want)
		}
	}
	out := s.check(t, "--domain", "api", "--descriptor", "k=w", "--descriptor", "other=x", "--json")
	var resp struct {
		OverallCode string
		Statuses    []struct {
			Code           string
			LimitRemaining int
		}
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("check --json: %v\n%s", err, out)
	}
	if resp.OverallCode != "OK" || len(resp.Statuses) != 2 || resp.Statuses[0].LimitRemaining != 1 {
		t.Errorf("check --json: %+v", resp)
	}

	if code, body := s.get(t, "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
	if code, body := s.get(t, "/rlconfig"); code != 404 {
		t.Errorf("/rlconfig on the HTTP port: %d %q, want 404 (it is on the admin listener)", code, body)
	}
	log := s.stderr.String()
	for _, want := range []string{"ignoring MEMCACHE_HOST_PORT, an envoyproxy/ratelimit setting sluice does not implement: there is no memcache backend",
		"ignoring USE_STATSD, an envoyproxy/ratelimit setting sluice does not implement: no statsd export"} {
		if !strings.Contains(log, want) {
			t.Errorf("no warning %q:\n%s", want, log)
		}
	}
	if code := s.stop(t); code != 0 {
		t.Errorf("serve exit %d after cancel, want 0", code)
	}
}

func TestCheckErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"no domain", []string{"--descriptor", "k=v"}, 2},
		{"no descriptor", []string{"--domain", "api"}, 2},
		{"bad descriptor", []string{"--domain", "api", "--descriptor", "novalue"}, 2},
		{"hits too large", []string{"--domain", "api", "--descriptor", "k=v", "--hits", "4294967296"}, 2},
		{"nobody listening", []string{"--addr", "127.0.0.1:1", "--domain", "api", "--descriptor", "k=v", "--timeout", "2s"}, 2},
		{"entry value with commas", []string{"--addr", "127.0.0.1:1", "--domain", "api", "--entry", "k", "--timeout", "2s"}, 2},
		{"descriptor-hits first", []string{"--descriptor-hits", "0", "--domain", "api", "--descriptor", "k=v"}, 2},
		{"bad limit", []string{"--domain", "api", "--descriptor", "k=v", "--limit", "10/fortnight"}, 2},
		{"empty descriptor", []string{"--domain", "api", "--descriptor", ""}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _, errOut := runCmd(t, nil, append([]string{"check"}, tt.args...)...); code != tt.want {
				t.Errorf("exit %d, want %d: %s", code, tt.want, errOut)
			}
		})
	}
}

func TestServeReloads(t *testing.T) {
	// The config directory is a Kubernetes ConfigMap volume: every update
	// is a swap of the ..data symlink.
	dir := t.TempDir()
	version := 0
	swap := func(content string) {
		t.Helper()
		version++
		data := filepath.Join(dir, "..v"+strconv.Itoa(version))
		writeConfig(t, data, "api.yaml", content)
		if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap(yearly(2))
	if err := os.Symlink("..data/api.yaml", filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, []string{"RUNTIME_ROOT=" + filepath.Dir(dir), "RUNTIME_SUBDIRECTORY=" + filepath.Base(dir),
		"RUNTIME_APPDIRECTORY=.", "RUNTIME_IGNOREDOTFILES=true"}, "--reload-interval", "20ms")
	limitIs := func(n int) func() bool {
		return func() bool {
			return strings.Contains(s.check(t, "--domain", "api", "--descriptor", "k=v"), "limit "+strconv.Itoa(n)+" per year")
		}
	}
	if !limitIs(2)() {
		t.Fatal("initial limit is not 2")
	}

	swap(yearly(5))
	waitFor(t, "the limit to become 5", limitIs(5))

	swap(yearly(6) + "    bogus: true\n")
	waitFor(t, "the broken config to be rejected", func() bool {
		return strings.Contains(s.stderr.String(), "config reload rejected")
	})
	if !limitIs(5)() {
		t.Error("after a broken reload the limit is no longer 5")
	}
	if !strings.Contains(s.stderr.String(), "api.yaml:5: ") {
		t.Errorf("the rejected reload's error is not logged with file:line:\n%s", s.stderr)
	}

	swap(yearly(7))
	waitFor(t, "the limit to become 7", limitIs(7))
	if !strings.Contains(s.stderr.String(), "config reloaded: changed [api]") {
		t.Errorf("no reload line naming the domain:\n%s", s.stderr)
	}
}

func TestServeStartErrors(t *testing.T) {
	bad := t.TempDir()
	badFile := writeConfig(t, bad, "api.yaml", "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	tests := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"invalid config", []string{"SLUICE_CONFIG=" + bad}, nil, 1, badFile + ":4: "},
		{"missing config dir", []string{"RUNTIME_ROOT=" + filepath.Join(bad, "nope")}, nil, 1, "nope"},
		{"bad setting", []string{"GRPC_PORT=http"}, nil, 2, `GRPC_PORT="http"`},
		{"bad flag", nil, []string{"--reload-interval", "soon"}, 2, "reload-interval"},
		// The backend's error is said once, not behind a repeated prefix.
		{"bad redis address", []string{"REDIS_URL=,"}, nil, 1, "sluice serve: redis backend: redis address \",\": "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCmd(t, slices.Concat(loopback, tt.env), append([]string{"serve"}, tt.args...)...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d, want %d; stderr:\n%s\nwant it to contain %q", code, tt.wantCode, errOut, tt.wantErr)
			}
		})
	}
}

// TestServeWarnsOfLargeSlidingLog: a config that loads but is costly (a
// sliding log of 100,000 entries per descriptor) is served, and the log
// says what it costs.
func TestServeWarnsOfLargeSlidingLog(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 100000}\n")
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir})
	if out := s.check(t, "--domain", "api", "--descriptor", "k=v"); !strings.HasPrefix(out, "overall: OK") {
		t.Errorf("check: %s", out)
	}
	want := "api.k: sliding_log 100000/1 hour keeps one entry per admitted request: up to 100000 per descriptor, about 11 MiB"
	if log := s.stderr.String(); !strings.Contains(log, want) {
		t.Errorf("no warning %q in the log:\n%s", want, log)
	}
	if code := s.stop(t); code != 0 {
		t.Errorf("serve exit %d after cancel, want 0", code)
	}
}

// TestJSONLogFields: LOG_FORMAT=json writes the reference's fields,
// @message and @timestamp, the time to the nanosecond (RFC 3339), as the
// reference writes it; log pipelines parse and order by it.
func TestJSONLogFields(t *testing.T) {
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{time.Date(2020, 9, 10, 17, 22, 44, 926010192, time.UTC), "2020-09-10T17:22:44.926010192Z"},
		{time.Date(2020, 9, 10, 17, 22, 44, 0, time.UTC), "2020-09-10T17:22:44Z"},
	} {
		var buf strings.Builder
		l := newLogger(&settings{LogFormat: "json", LogLevel: logrus.InfoLevel}, &buf)
		l.WithTime(tc.at).Info("loading domain: messaging")
		var line map[string]any
		if err := json.Unmarshal([]byte(buf.String()), &line); err != nil {
			t.Fatalf("%q: %v", buf.String(), err)
		}
		if line["@message"] != "loading domain: messaging" || line["@timestamp"] != tc.want {
			t.Errorf("log line %q, want @message %q and @timestamp %q", buf.String(), "loading domain: messaging", tc.want)
		}
	}
}
