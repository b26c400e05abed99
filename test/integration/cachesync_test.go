package integration

import (
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// hourlyConfig limits each user to 2 per year-aligned hour.
const hourlyConfig = `domain: sync
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// TestRefundOnOneInstanceEndsTheOthersCachedDenial runs two sluice
// processes on one redis-server with their local denial caches on and a
// one-hour bound on a cached denial, so that only the refund's
// announcement can end instance A's cached denial early: a refund on B
// makes A admit again within seconds, not at the end of the hour, whether
// or not B caches denials itself.
func TestRefundOnOneInstanceEndsTheOthersCachedDenial(t *testing.T) {
	for _, bCache := range []string{"true", "false"} {
		t.Run("B's cache "+bCache, func(t *testing.T) {
			env := merge(standaloneEnv(redistest.Standalone(t)), map[string]string{"SLUICE_LOCAL_CACHE_MAX_AGE": "1h"})
			dir := configDir(t, map[string]string{"sync.yaml": hourlyConfig})
			a := sluicetest.Start(t, sluicetest.Options{ConfigDir: dir, Env: env})
			b := sluicetest.Start(t, sluicetest.Options{ConfigDir: dir, Env: merge(env, map[string]string{"SLUICE_LOCAL_CACHE": bCache})})
			sluicetest.AwayFromEdge(t, time.Hour, 0, time.Minute)

			d := entries("user", sluicetest.Unique("u"))
			for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over, over} {
				if got := call(t, a, sluicetest.Request("sync", 0, d)).OverallCode; got != want {
					t.Fatalf("call %d on A: %v, want %v", i+1, got, want)
				}
			}
			call(t, b, withCost(sluicetest.Request("sync", 0, d), 1, true))
			start := time.Now()
			testenv.Until(t, 10*time.Second, "A to admit after B's refund", func() bool {
				return call(t, a, sluicetest.Request("sync", 0, d)).OverallCode == ok
			})
			t.Logf("A admitted %v after B's refund", time.Since(start).Round(time.Millisecond))
			for _, m := range []struct {
				p    *sluicetest.Process
				line string
			}{
				{a, `sluice_denycache_announcements_total{result="received"} 1`},
				{b, `sluice_denycache_announcements_total{result="published"} 1`},
			} {
				// B counts its publication once PUBLISH has returned, which
				// may be just after A heard it.
				testenv.Until(t, 5*time.Second, m.line, func() bool { return strings.Contains(scrapeText(t, m.p), m.line) })
			}
		})
	}
}

// scrapeText returns p's /metrics page.
func scrapeText(t *testing.T, p *sluicetest.Process) string {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAllOrNothingDenialsFromCache: with all-or-nothing requests
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true), a request whose every
// descriptor is over its limit is answered from the local denial cache:
// asked again, it is denied as before and no script call reaches Redis. A
// request with a descriptor that still fits goes to Redis, which denies it
// whole and charges that descriptor nothing.
func TestAllOrNothingDenialsFromCache(t *testing.T) {
	rs := redistest.Standalone(t)
	p := sluicetest.Start(t, sluicetest.Options{
		ConfigDir: configDir(t, map[string]string{"sync.yaml": hourlyConfig}),
		Env:       merge(standaloneEnv(rs), map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}),
	})
	sluicetest.AwayFromEdge(t, time.Hour, 0, time.Minute)
	a, b, c := entries("user", sluicetest.Unique("a")), entries("user", sluicetest.Unique("b")), entries("user", sluicetest.Unique("c"))
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
		if got := call(t, p, sluicetest.Request("sync", 0, a, b)).OverallCode; got != want {
			t.Fatalf("call %d: %v, want %v", i+1, got, want)
		}
	}
	scripts := func() int {
		n := redistest.CommandCalls(t, rs.Client())
		return n["fcall"] + n["evalsha"] + n["eval"]
	}
	before := scripts()
	for i := range 5 {
		resp := call(t, p, sluicetest.Request("sync", 0, a, b))
		if resp.OverallCode != over || resp.Statuses[0].Code != over || resp.Statuses[1].Code != over || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("asked again (%d): %v, want both OVER_LIMIT with 0 left", i+1, resp)
		}
	}
	if n := scripts() - before; n != 0 {
		t.Errorf("%d script calls reached Redis for requests whose every descriptor was a cached denial, want 0", n)
	}
	resp := call(t, p, sluicetest.Request("sync", 0, a, c))
	if resp.OverallCode != over || resp.Statuses[1].Code != ok || resp.Statuses[1].LimitRemaining != 2 {
		t.Fatalf("a beside a fresh c: %v, want OVER_LIMIT with c OK and 2 left (a peek)", resp)
	}
	if scripts() == before {
		t.Error("a request with a descriptor that fits never reached Redis")
	}
	if got := call(t, p, sluicetest.Request("sync", 0, c)); got.OverallCode != ok || got.Statuses[0].LimitRemaining != 1 {
		t.Errorf("c alone after: %v, want OK with 1 left (nothing charged beside a's denial)", got)
	}
}
