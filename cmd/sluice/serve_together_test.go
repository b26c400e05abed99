package main

import (
	"strings"
	"testing"
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
				if be == "redis" {
					env = append(env, "REDIS_URL="+startRedis(t).Addr())
				}
				s := startServe(t, env)
				if strings.Contains(s.stderr.String(), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
					t.Errorf("the setting is reported as ignored:\n%s", s.stderr)
				}
				both := []string{"--domain", "api", "--descriptor", "a=1", "--descriptor", "b=1"}
				if out := s.check(t, both...); !strings.HasPrefix(out, "overall: OK\n  [1] a=1: OK  limit 10 per year  remaining 9") {
					t.Fatalf("first call:\n%s", out)
				}
				out := s.check(t, both...)
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
