package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/metrics/metricstest"
)

// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, black-box on both
// backends: a request with a descriptor over its limit charges none of its
// other descriptors, as the reference does; without it, they are charged.
func TestServeStopIncrementWhenOverLimit(t *testing.T) {
	const cfg = "domain: api\ndescriptors:\n" +
		"  - key: a\n    rate_limit: {unit: year, requests_per_unit: 10}\n" +
		"  - key: b\n    rate_limit: {unit: year, requests_per_unit: 1}\n"
	for _, be := range []string{"memory", "redis"} {
		for _, stop := range []bool{false, true} {
			name := be + "/stop=" + map[bool]string{false: "false", true: "true"}[stop]
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				writeConfig(t, dir, "api.yaml", cfg)
				env := []string{"SLUICE_CONFIG=" + dir}
				if stop {
					env = append(env, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true")
				}
				redisAddr := ""
				if be == "redis" {
					redisAddr = startRedis(t).Addr()
					env = append(env, "REDIS_URL="+redisAddr)
				}
				s := startServe(t, env)
				if strings.Contains(s.stderr.String(), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
					t.Errorf("the setting is reported as ignored:\n%s", s.stderr)
				}
				both := []string{"--domain", "api", "--descriptor", "a=1", "--descriptor", "b=1"}
				if out := s.check(t, both...); !strings.HasPrefix(out, "overall: OK\n  [1] a=1: OK  limit 10 per year  remaining 9") {
					t.Fatalf("first call:\n%s", out)
				}
				calls, evalsha := s.backendCalls(t), redisEvalsha(t, redisAddr)
				out := s.check(t, both...)
				// The denied request takes one backend call (one script call
				// on Redis) either way: with the setting, the backend decides
				// the descriptors together and nothing is refunded.
				if got := s.backendCalls(t) - calls; got != 1 {
					t.Errorf("backend calls for the denied request: %v, want 1 (no refund call)", got)
				}
				if be == "redis" {
					if got := redisEvalsha(t, redisAddr) - evalsha; got != 1 {
						t.Errorf("script calls (FCALL or EVALSHA) for the denied request: %d, want 1 (no refund call)", got)
					}
				}
				wantA := "remaining 8" // a charged although b is over
				if stop {
					wantA = "remaining 9" // a given back
				}
				if !strings.HasPrefix(out, "overall: OVER_LIMIT\n  [1] a=1: OK  limit 10 per year  "+wantA) {
					t.Errorf("second call:\n%s\nwant a with %s", out, wantA)
				}
				wantA = "remaining 7"
				if stop {
					wantA = "remaining 8"
				}
				if out := s.check(t, "--domain", "api", "--descriptor", "a=1"); !strings.HasPrefix(out, "overall: OK\n  [1] a=1: OK  limit 10 per year  "+wantA) {
					t.Errorf("a alone afterwards:\n%s\nwant %s", out, wantA)
				}
			})
		}
	}
}

// backendCalls is how many calls serve has made to its backend
// (sluice_backend_decide_duration_seconds' count).
func (s *served) backendCalls(t *testing.T) float64 {
	t.Helper()
	n, _ := metricstest.Value(s.scrapeMetrics(t), "sluice_backend_decide_duration_seconds", "")
	return n
}

// redisEvalsha is how many decide script calls (FCALL, the default, or
// EVALSHA) the Redis server at addr has served (INFO commandstats); 0 when
// addr is empty.
func redisEvalsha(t *testing.T, addr string) int {
	t.Helper()
	if addr == "" {
		return 0
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range regexp.MustCompile(`cmdstat_(?:evalsha|fcall):calls=(\d+)`).FindAllStringSubmatch(info, -1) {
		c, _ := strconv.Atoi(m[1])
		n += c
	}
	return n
}
