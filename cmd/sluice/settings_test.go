package main

import (
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/xdstest"
)

func TestParseServe(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   []string
		check func(t *testing.T, s *settings)
	}{
		{
			name: "defaults are the reference's",
			check: func(t *testing.T, s *settings) {
				want := []any{"0.0.0.0", 8081, "0.0.0.0", 8080, time.Second, logrus.InfoLevel, "text", 24 * time.Hour, time.Hour, 10, time.Second}
				got := []any{s.GRPCHost, s.GRPCPort, s.HTTPHost, s.HTTPPort, s.ReloadInterval, s.LogLevel, s.LogFormat,
					s.MaxConnectionAge, s.MaxConnectionAgeGrace, s.Redis.PoolSize, s.Redis.Timeout}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("defaults %v, want %v", got, want)
				}
				if p := s.configPaths(); !reflect.DeepEqual(p, []string{"/srv/runtime_data/current/config"}) {
					t.Errorf("config paths %v", p)
				}
				if s.backend() != "memory" {
					t.Errorf("backend %q, want memory", s.backend())
				}
			},
		},
		{
			name: "environment sets",
			env: []string{"GRPC_HOST=127.0.0.1", "GRPC_PORT=9000", "HOST=127.0.0.2", "PORT=9001",
				"SHADOW_MODE=true", "QUOTA_MODE=1", "LOG_LEVEL=WARN", "LOG_FORMAT=JSON",
				"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=X-Limit", "SLUICE_IETF_HEADERS=true",
				"GRPC_MAX_CONNECTION_AGE=1m", "REDIS_URL=redis:6379", "REDIS_TYPE=CLUSTER", "REDIS_TIMEOUT=250ms",
				"CACHE_KEY_PREFIX=p:", "SLUICE_RELOAD_INTERVAL=3s", "SLUICE_LOCAL_INSTANCES=4"},
			check: func(t *testing.T, s *settings) {
				want := []any{"127.0.0.1", 9000, "127.0.0.2", 9001, true, true, logrus.WarnLevel, "json", true, "X-Limit", true,
					time.Minute, "redis:6379", "CLUSTER", 250 * time.Millisecond, "p:", 3 * time.Second, 4, "redis"}
				got := []any{s.GRPCHost, s.GRPCPort, s.HTTPHost, s.HTTPPort, s.ShadowMode, s.QuotaMode, s.LogLevel, s.LogFormat,
					s.HeadersEnabled, s.LimitHeader, s.IETFHeaders, s.MaxConnectionAge, s.Redis.URL, s.Redis.Type, s.Redis.Timeout,
					s.Redis.KeyPrefix, s.ReloadInterval, s.LocalInstances, s.backend()}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("got  %v\nwant %v", got, want)
				}
			},
		},
		{
			name: "flags win over environment",
			args: []string{"--grpc-port", "7000", "--shadow-mode=false", "--log-level", "debug", "--config", "/c1", "--config", "/c2"},
			env:  []string{"GRPC_PORT=9000", "SHADOW_MODE=true", "LOG_LEVEL=error", "SLUICE_CONFIG=/e1,/e2"},
			check: func(t *testing.T, s *settings) {
				if s.GRPCPort != 7000 || s.ShadowMode || s.LogLevel != logrus.DebugLevel {
					t.Errorf("port %d shadow %v level %v", s.GRPCPort, s.ShadowMode, s.LogLevel)
				}
				if p := s.configPaths(); !reflect.DeepEqual(p, []string{"/c1", "/c2"}) {
					t.Errorf("config paths %v", p)
				}
			},
		},
		{
			name: "SLUICE_CONFIG is a comma-separated list",
			env:  []string{"SLUICE_CONFIG=/e1, /e2", "RUNTIME_ROOT=/ignored"},
			check: func(t *testing.T, s *settings) {
				if p := s.configPaths(); !reflect.DeepEqual(p, []string{"/e1", "/e2"}) {
					t.Errorf("config paths %v", p)
				}
			},
		},
		{
			name: "runtime directory layout",
			env:  []string{"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=cfg", "RUNTIME_WATCH_ROOT=false"},
			check: func(t *testing.T, s *settings) {
				if p := s.configPaths(); !reflect.DeepEqual(p, []string{"/data/ratelimit/cfg"}) {
					t.Errorf("config paths %v", p)
				}
			},
		},
		{
			name: "explicit memory backend beats REDIS_URL",
			env:  []string{"REDIS_URL=redis:6379", "BACKEND_TYPE=memory"},
			check: func(t *testing.T, s *settings) {
				if s.backend() != "memory" {
					t.Errorf("backend %q", s.backend())
				}
				if want := "BACKEND_TYPE=memory: limits are per instance and these Redis settings are unused: REDIS_URL"; !slices.Contains(s.warnings, want) {
					t.Errorf("warnings %q, want %q", s.warnings, want)
				}
			},
		},
		{
			name: "empty variables count as unset",
			env:  []string{"GRPC_PORT=", "LOG_LEVEL="},
			check: func(t *testing.T, s *settings) {
				if s.GRPCPort != 8081 || s.LogLevel != logrus.InfoLevel {
					t.Errorf("port %d level %v", s.GRPCPort, s.LogLevel)
				}
			},
		},
		{
			name: "unimplemented reference variables are listed, sorted",
			env:  []string{"USE_STATSD=true", "USE_DOG_STATSD=false", "MEMCACHE_HOST_PORT=m:11211", "TRACING_SERVICE_NAMESPACE=ns", "DISABLE_STATS=true", "CONFIG_TYPE=FILE", "REDIS_PERSECOND_URL=x", "REDIS_URL=r:1", "HOME=/root"},
			check: func(t *testing.T, s *settings) {
				want := []string{"DISABLE_STATS", "MEMCACHE_HOST_PORT", "REDIS_PERSECOND_URL", "USE_STATSD"}
				if !reflect.DeepEqual(s.ignored, want) {
					t.Errorf("ignored %v, want %v", s.ignored, want)
				}
			},
		},
		{
			name: "RUNTIME_IGNOREDOTFILES is noted",
			env:  []string{"RUNTIME_IGNOREDOTFILES=false"},
			check: func(t *testing.T, s *settings) {
				if len(s.notes) == 0 || !strings.Contains(strings.Join(s.notes, "\n"), "RUNTIME_IGNOREDOTFILES") {
					t.Errorf("notes %q", s.notes)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(tt.args, tt.env, io.Discard)
			if err != nil {
				t.Fatalf("parseServe: %v", err)
			}
			tt.check(t, s)
		})
	}
}

// TestChargeOverLimitSetting: SLUICE_CHARGE_OVER_LIMIT has three values.
// Unset (the default, and what Envoy Gateway's environment leaves it) a
// descriptor's own hits_addend is charged; true and false, from the
// environment or the flag, say it for every cost; the flag wins.
func TestChargeOverLimitSetting(t *testing.T) {
	tests := []struct {
		args []string
		env  []string
		want service.Charging
	}{
		{nil, nil, service.ChargeDebits},
		{nil, []string{"SLUICE_CHARGE_OVER_LIMIT="}, service.ChargeDebits},
		{nil, []string{"SLUICE_CHARGE_OVER_LIMIT=true"}, service.ChargeAll},
		{nil, []string{"SLUICE_CHARGE_OVER_LIMIT=false"}, service.ChargeNone},
		{nil, []string{"SLUICE_CHARGE_OVER_LIMIT=0"}, service.ChargeNone},
		{[]string{"--charge-over-limit"}, nil, service.ChargeAll},
		{[]string{"--charge-over-limit=false"}, []string{"SLUICE_CHARGE_OVER_LIMIT=true"}, service.ChargeNone},
		{nil, xdstest.EnvoyGatewayEnv, service.ChargeDebits},
	}
	for _, tt := range tests {
		s, err := parseServe(tt.args, tt.env, io.Discard)
		if err != nil {
			t.Fatalf("%v %v: %v", tt.args, tt.env, err)
		}
		if s.ChargeOverLimit != tt.want {
			t.Errorf("%v %v: charging %v, want %v", tt.args, tt.env, s.ChargeOverLimit, tt.want)
		}
	}
}

func TestParseServeErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want string // the error names this, and the value or the problem
	}{
		{"port not a number", nil, []string{"GRPC_PORT=abc"}, `GRPC_PORT="abc": want a whole number`},
		{"port out of range", nil, []string{"PORT=70000"}, "PORT: port 70000"},
		{"flag port out of range", []string{"--grpc-port=-1"}, nil, "--grpc-port: port -1"},
		{"bool", nil, []string{"SHADOW_MODE=maybe"}, `SHADOW_MODE="maybe": want true or false`},
		{"duration without unit", nil, []string{"REDIS_TIMEOUT=10"}, `REDIS_TIMEOUT="10": want a duration with its unit, such as 500ms, 10s or 1m`},
		{"float", nil, []string{"NEAR_LIMIT_RATIO=most"}, `NEAR_LIMIT_RATIO="most": want a number`},
		{"negative duration", nil, []string{"GRPC_MAX_CONNECTION_AGE=-1s"}, "GRPC_MAX_CONNECTION_AGE: negative"},
		{"zero reload interval", []string{"--reload-interval=0s"}, nil, "--reload-interval"},
		{"reload interval too short to poll", nil, []string{"SLUICE_RELOAD_INTERVAL=1ns"}, "SLUICE_RELOAD_INTERVAL: 1ns: at least 10ms"},
		{"health interval too short to poll", []string{"--health-interval=9ms"}, nil, "--health-interval: 9ms: at least 10ms"},
		{"log level", nil, []string{"LOG_LEVEL=loud"}, `LOG_LEVEL="loud"`},
		{"memcache backend", nil, []string{"BACKEND_TYPE=memcache"}, `BACKEND_TYPE="memcache"`},
		{"redis type", nil, []string{"REDIS_URL=r:1", "REDIS_TYPE=ring"}, `REDIS_TYPE: redis type "ring"`},
		{"redis socket type", nil, []string{"REDIS_SOCKET_TYPE=udp"}, `REDIS_SOCKET_TYPE: redis socket type "udp"`},
		{"key prefix", []string{"--cache-key-prefix={x}"}, nil, `--cache-key-prefix: key prefix "{x}"`},
		{"client cert without key", nil, []string{"REDIS_TLS_CLIENT_CERT=/c.pem"}, "REDIS_TLS_CLIENT_CERT: redis TLS client certificate and key"},
		{"coalesce", nil, []string{"SLUICE_REDIS_COALESCE=perhaps"}, `SLUICE_REDIS_COALESCE="perhaps"`},
		{"charge over limit", nil, []string{"SLUICE_CHARGE_OVER_LIMIT=sometimes"}, `SLUICE_CHARGE_OVER_LIMIT="sometimes": want true or false`},
		{"charge over limit flag", []string{"--charge-over-limit=sometimes"}, nil, "want true or false"},
		{"redis without URL", nil, []string{"BACKEND_TYPE=redis"}, "BACKEND_TYPE: redis needs REDIS_URL"},
		// The reference defaults to Redis: a Redis setting without
		// REDIS_URL must not mean the embedded backend in silence.
		{"redis settings without URL", nil, []string{"REDIS_TYPE=cluster", "REDIS_AUTH=pw"},
			"REDIS_AUTH, REDIS_TYPE are set but REDIS_URL is not: sluice will not fall back to the embedded backend"},
		{"redis flag without URL", []string{"--redis-pool-size=5"}, nil, "--redis-pool-size is set but REDIS_URL is not"},
		{"key prefix without URL", nil, []string{"CACHE_KEY_PREFIX=p_"}, "CACHE_KEY_PREFIX is set but REDIS_URL is not"},
		{"sluice redis setting without URL", nil, []string{"SLUICE_REDIS_COALESCE=false"}, "SLUICE_REDIS_COALESCE is set"},
		{"reference-only redis setting without URL", nil, []string{"REDIS_PERSECOND_URL=r:2"}, "REDIS_PERSECOND_URL is set"},
		{"pool size", nil, []string{"REDIS_URL=r:1", "REDIS_POOL_SIZE=-1"}, "REDIS_POOL_SIZE: redis pool size -1 is negative"},
		{"negative redis timeout", nil, []string{"REDIS_URL=r:1", "REDIS_TIMEOUT=-1s"}, "REDIS_TIMEOUT: redis timeout -1s is negative"},
		{"local instances", nil, []string{"SLUICE_LOCAL_INSTANCES=0"}, "SLUICE_LOCAL_INSTANCES"},
		{"TLS without files", nil, []string{"GRPC_SERVER_USE_TLS=true"}, "GRPC_SERVER_USE_TLS: TLS needs"},
		{"IETF headers without headers", []string{"--ietf-headers"}, nil, "--ietf-headers: needs LIMIT_RESPONSE_HEADERS_ENABLED"},
		{"unknown config type", nil, []string{"CONFIG_TYPE=GRPC_XDS_DELTA"}, `CONFIG_TYPE="GRPC_XDS_DELTA"`},
		{"unknown flag", []string{"--nope"}, nil, "nope"},
		{"stray argument", []string{"extra"}, nil, "no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parseServeCase(t, tt.args, tt.env, tt.want)
		})
	}
}

func TestServeHelp(t *testing.T) {
	code, out, _ := runCmd(t, nil, "serve", "--help")
	if code != 0 {
		t.Errorf("serve --help: exit %d", code)
	}
	for _, want := range []string{"(env LOG_LEVEL) (default info)", "(env GRPC_PORT) (default 8081)", `(env REDIS_TYPE) (default "single")`,
		"HTTP listen host (/healthcheck, /json, /metrics; /rlconfig is on the admin listener)"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"redis:6379", "redis:6379"},
		{"/var/run/redis.sock", "/var/run/redis.sock"},
		{"redis://user:secret@redis:6379/0", "redis://user:xxxxx@redis:6379/0"},
		{"mymaster,s1:26379,s2:26379", "mymaster,s1:26379,s2:26379"},
		{"rediss://:secret@a:1,rediss://:secret@b:1", "rediss://:xxxxx@a:1,rediss://:xxxxx@b:1"},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
