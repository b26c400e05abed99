package main

import (
	"bufio"
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// incumbentSetting is one line of testdata/incumbent-settings.txt.
type incumbentSetting struct{ name, from, def string }

// incumbentSettings reads the incumbent's settings, extracted from its
// source (the file says from which commits).
func incumbentSettings(t *testing.T) []incumbentSetting {
	t.Helper()
	f, err := os.Open("testdata/incumbent-settings.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []incumbentSetting
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.SplitN(line, " ", 3)
		if len(fields) < 2 {
			t.Fatalf("bad line %q", line)
		}
		s := incumbentSetting{name: fields[0], from: fields[1]}
		if len(fields) == 3 {
			s.def = fields[2]
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("only %d settings read", len(out))
	}
	return out
}

// TestIncumbentSettingsNamed: every setting of the incumbent (its main
// branch, and the open pull requests that add settings) is implemented by
// sluice (a flag's variable, or read by referenceListeners, referenceHealth
// or referenceNewer) or named at start with what sluice does instead
// (referenceOnly), and the migration guide's Settings table names it, by
// its name or a prefix (`REDIS_TLS*`, `STATSD_*`).
func TestIncumbentSettingsNamed(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bound := map[string]bool{}
	for _, n := range serveFlags(fs, &settings{source: map[string]string{}}) {
		bound[n.env] = true
	}
	doc, err := os.ReadFile("../../docs/migrating-from-envoy-ratelimit.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Settings\n")
	if !ok {
		t.Fatal("the migration guide has no Settings section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var names []string
	for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9_]*\\*?)`").FindAllStringSubmatch(table, -1) {
		names = append(names, m[1])
	}
	documented := func(v string) bool {
		for _, n := range names {
			if n == v || (strings.HasSuffix(n, "*") && strings.HasPrefix(v, strings.TrimSuffix(n, "*"))) {
				return true
			}
		}
		return false
	}
	for _, s := range incumbentSettings(t) {
		if !bound[s.name] && !slices.Contains(referenceRead, s.name) && referenceInstead(s.name) == "" {
			t.Errorf("%s (%s) is neither implemented nor named at start (referenceOnly)", s.name, s.from)
		}
		if !documented(s.name) {
			t.Errorf("%s (%s) is not in the migration guide's Settings table", s.name, s.from)
		}
	}
}

// TestIncumbentDefaultsAccepted: each setting of the incumbent set to the
// incumbent's own default never stops sluice (with REDIS_URL set, as a
// Redis setting without it is refused on purpose: the embedded backend
// would enforce limits per instance).
func TestIncumbentDefaultsAccepted(t *testing.T) {
	for _, s := range incumbentSettings(t) {
		if s.def == "" {
			continue
		}
		env := []string{"REDIS_URL=127.0.0.1:6379", s.name + "=" + s.def}
		if _, err := parseServe(nil, env, io.Discard); err != nil {
			t.Errorf("%s=%s (the incumbent's default): %v", s.name, s.def, err)
		}
	}
}

// TestIncumbentValuesAccepted: values the incumbent accepts, which change
// nothing that is enforced, start sluice with a warning or a note saying
// what it does with them.
func TestIncumbentValuesAccepted(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		check func(*settings) bool
		say   string // a warning or note says this
	}{
		{"near-limit ratio 0", []string{"NEAR_LIMIT_RATIO=0"}, func(s *settings) bool { return s.NearLimitRatio == 0 }, ""},
		{"near-limit ratio below 0", []string{"NEAR_LIMIT_RATIO=-1"}, func(s *settings) bool { return s.NearLimitRatio == 0 }, "NEAR_LIMIT_RATIO=-1 is below 0"},
		{"near-limit ratio above 1", []string{"NEAR_LIMIT_RATIO=1.5"}, func(s *settings) bool { return s.NearLimitRatio == 1.5 }, ""},
		{"client CA without TLS", []string{"GRPC_CLIENT_TLS_CACERT=/ca.pem"},
			func(s *settings) bool { return s.GRPCClientCACert == "" }, "GRPC_CLIENT_TLS_CACERT ignored: gRPC is plain"},
		{"client CA and SAN without TLS", []string{"GRPC_CLIENT_TLS_CACERT=/ca.pem", "GRPC_CLIENT_TLS_SAN=envoy"},
			func(s *settings) bool { return s.GRPCClientCACert == "" && s.GRPCClientTLSSAN == "" }, "GRPC_CLIENT_TLS_CACERT and GRPC_CLIENT_TLS_SAN ignored"},
		{"log format logfmt", []string{"LOG_FORMAT=logfmt"}, func(s *settings) bool { return s.LogFormat == "text" }, `LOG_FORMAT="logfmt" is neither text nor json: logging text`},
		{"log format JSON", []string{"LOG_FORMAT=JSON"}, func(s *settings) bool { return s.LogFormat == "json" }, ""},
		{"request headers", []string{"LIMIT_REQUEST_HEADERS_ENABLED=true", "LIMIT_REQUEST_RESET_HEADER=X-Reset"},
			func(s *settings) bool {
				return s.RequestHeaders && s.RequestLimitHeader == "RateLimit-Limit" && s.RequestResetHeader == "X-Reset"
			}, ""},
		{"max concurrent streams", []string{"GRPC_MAX_CONCURRENT_STREAMS=100"}, func(s *settings) bool { return s.Listener.GRPCMaxStreams == 100 }, ""},
		{"max concurrent streams 0", []string{"GRPC_MAX_CONCURRENT_STREAMS=0"}, func(s *settings) bool { return s.Listener.GRPCMaxStreams == 0 }, ""},
		{"sluice's max concurrent streams wins", []string{"GRPC_MAX_CONCURRENT_STREAMS=100", "SLUICE_GRPC_MAX_CONCURRENT_STREAMS=7"},
			func(s *settings) bool { return s.Listener.GRPCMaxStreams == 7 }, ""},
		{"op timeout", []string{"REDIS_URL=r:1", "REDIS_OP_TIMEOUT=250ms"},
			func(s *settings) bool { return s.Redis.Timeout.String() == "250ms" }, "REDIS_OP_TIMEOUT=250ms bounds every Redis round trip"},
		{"op timeout over REDIS_TIMEOUT", []string{"REDIS_URL=r:1", "REDIS_TIMEOUT=10s", "REDIS_OP_TIMEOUT=2s"},
			func(s *settings) bool { return s.Redis.Timeout.String() == "2s" }, "in place of REDIS_TIMEOUT=10s"},
		{"op timeout 0", []string{"REDIS_URL=r:1", "REDIS_TIMEOUT=3s", "REDIS_OP_TIMEOUT=0"},
			func(s *settings) bool { return s.Redis.Timeout.String() == "3s" }, ""},
		{"close on READONLY", []string{"REDIS_URL=r:1", "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR=true"}, nil, "sluice always closes a Redis connection"},
		{"negative hits", []string{"ENABLE_NEGATIVE_HITS=true"}, nil, "sluice refunds is_negative_hits"},
		{"all-descriptor headers", []string{"LIMIT_ALL_DESCRIPTORS_HEADERS_ENABLED=true"},
			func(s *settings) bool { return slices.Contains(s.ignored, "LIMIT_ALL_DESCRIPTORS_HEADERS_ENABLED") }, ""},
		{"statsd off asks for nothing", []string{"USE_STATSD=false", "USE_DOG_STATSD=false", "DISABLE_STATS=false"},
			func(s *settings) bool { return len(s.ignored) == 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(nil, tt.env, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil && !tt.check(s) {
				t.Errorf("settings not as expected: %+v", s)
			}
			said := strings.Join(append(append([]string{}, s.warnings...), s.notes...), "\n")
			if tt.say != "" && !strings.Contains(said, tt.say) {
				t.Errorf("warnings and notes do not say %q:\n%s", tt.say, said)
			}
		})
	}
}
