package integration

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// referenceConfig is the config of envoyproxy/ratelimit's own integration
// tests (basic.yaml and another.yaml), unchanged; internal/service's unit tests
// replay the same scenario on it in-process.
var referenceConfig = map[string]string{
	"basic.yaml":   stacktest.ReferenceBasicYAML,
	"another.yaml": stacktest.ReferenceAnotherYAML,
}

// multiConfig is one descriptor with three rules of different algorithms,
// decided together. The token bucket refills one token an hour, so during
// a test it is a plain capacity of 4.
const multiConfig = `domain: multi
descriptors:
  - key: user
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: hour, requests_per_unit: 1, burst: 4}
      - {name: window, algorithm: sliding_window, unit: hour, requests_per_unit: 10}
      - {name: daily, algorithm: fixed_window, unit: day, requests_per_unit: 6, time_zone: Asia/Shanghai}
`

// TestReferenceScenario runs envoyproxy/ratelimit's core integration
// scenario (testBasicBaseConfig) against the binary on standalone Redis
// and on the cluster: the same config, the same requests, the same
// answers.
func TestReferenceScenario(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			p := sluicetest.Start(t, sluicetest.Options{
				ConfigDir: configDir(t, referenceConfig),
				Env:       topo.env(t),
			})

			// 1. An unknown domain: OK, no limit, remaining 0.
			resp := call(t, p, sluicetest.Request("foo", 0, entries("hello", "world")))
			if resp.OverallCode != ok || len(resp.Statuses) != 1 {
				t.Fatalf("unknown domain: %v", resp)
			}
			if got := statusOf(resp.Statuses[0]); got != (verdict{code: ok}) {
				t.Errorf("unknown domain: status %v, want OK without a limit", got)
			}

			// 2. key1: 50/s, remaining 49, resetting within the second.
			resp = call(t, p, sluicetest.Request("basic", 0, entries("key1", sluicetest.Unique("foo"))))
			if got, want := statusOf(resp.Statuses[0]), (verdict{ok, "", 50, 49}); resp.OverallCode != ok || got != want {
				t.Errorf("key1: overall %v status %v, want OK %v", resp.OverallCode, got, want)
			}
			if l := resp.Statuses[0].CurrentLimit; l == nil || l.Unit.String() != "SECOND" {
				t.Errorf("key1: current_limit %v, want unit SECOND", l)
			}
			if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d <= 0 || d > time.Second {
				t.Errorf("key1: duration_until_reset %v, want within (0, 1s]", d)
			}

			// 3. key2: 20/min; 25 calls: 20 OK counting down, then OVER_LIMIT
			// with remaining 0.
			sluicetest.AwayFromEdge(t, time.Minute, 0, 5*time.Second)
			r := sluicetest.Unique("key2")
			for i := range 25 {
				resp := call(t, p, sluicetest.Request("another", 0, entries("key2", r)))
				want := verdict{ok, "", 20, uint32(20 - (i + 1))}
				if i >= 20 {
					want = verdict{over, "", 20, 0}
				}
				if got := statusOf(resp.Statuses[0]); resp.OverallCode != want.code || got != want {
					t.Fatalf("key2 call %d: overall %v status %v, want %v", i+1, resp.OverallCode, got, want)
				}
				if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute {
					t.Fatalf("key2 call %d: duration_until_reset %v, want within (0, 1m]", i+1, d)
				}
			}

			// 4. key2 (20/min) and key3 (10/hour) in one request, 15 calls:
			// key2 keeps counting down; key3 runs out after 10 and turns the
			// overall code OVER_LIMIT.
			sluicetest.AwayFromEdge(t, time.Hour, 0, 5*time.Second)
			sluicetest.AwayFromEdge(t, time.Minute, 0, 5*time.Second)
			r2 := sluicetest.Unique("r2")
			for i := range 15 {
				resp := call(t, p, sluicetest.Request("another", 0, entries("key2", r2), entries("key3", r2)))
				want2 := verdict{ok, "", 20, uint32(20 - (i + 1))}
				want3, wantOverall := verdict{ok, "", 10, uint32(10 - (i + 1))}, ok
				if i >= 10 {
					want3, wantOverall = verdict{over, "", 10, 0}, over
				}
				if len(resp.Statuses) != 2 {
					t.Fatalf("call %d: %d statuses, want 2", i+1, len(resp.Statuses))
				}
				got2, got3 := statusOf(resp.Statuses[0]), statusOf(resp.Statuses[1])
				if resp.OverallCode != wantOverall || got2 != want2 || got3 != want3 {
					t.Fatalf("key2+key3 call %d: overall %v statuses %v %v, want %v %v %v",
						i+1, resp.OverallCode, got2, got3, wantOverall, want2, want3)
				}
			}
		})
	}
}

// TestMultiRuleAllOrNothing decides one descriptor with three rules
// (token_bucket burst, sliding_window, calendar fixed_window in a time
// zone) on each topology, and shows through peeks (hits_addend 0) that a
// request one rule denies consumes nothing from the others. The costs are
// the request's hits_addend: a descriptor's own hits_addend is charged by
// default when it does not fit (a response-path debit must bind).
func TestMultiRuleAllOrNothing(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			p := sluicetest.Start(t, sluicetest.Options{
				ConfigDir: configDir(t, map[string]string{"multi.yaml": multiConfig}),
				Env:       topo.env(t),
			})
			// Midnight in Shanghai is 16:00 UTC: stay clear of the daily edge.
			sluicetest.AwayFromEdge(t, 24*time.Hour, 16*time.Hour, 5*time.Second)
			user := entries("user", sluicetest.Unique("alice"))
			req := func(cost uint64, refund bool) *rlsv3.RateLimitRequest {
				r := sluicetest.Request("multi", uint32(cost), user)
				r.Descriptors[0].IsNegativeHits = refund
				return r
			}
			// The full state is burst 4, window 10, daily 6; each status shows
			// the binding rule: the least remaining, or the rule that denied.
			steps := []struct {
				what string
				cost uint64
				peek bool
				want verdict
			}{
				{what: "peek a fresh descriptor", peek: true, want: verdict{ok, "burst", 1, 4}},
				{what: "cost 3 (burst 1, window 7, daily 3 left)", cost: 3, want: verdict{ok, "burst", 1, 1}},
				// Only the burst denies: window and daily would admit 3.
				{what: "cost 3 denied by the burst", cost: 3, want: verdict{over, "burst", 1, 1}},
				{what: "peek after the denial", peek: true, want: verdict{ok, "burst", 1, 1}},
				// Refunding 3 makes every rule whole again, unless the denied
				// call consumed from window or daily: then daily (3 left)
				// would bind.
				{what: "refund 3", cost: 3, want: verdict{ok, "burst", 1, 4}},
				{what: "peek after the refund", peek: true, want: verdict{ok, "burst", 1, 4}},
				// 5 exceeds the burst's capacity; daily alone would admit it.
				{what: "cost 5 denied by the burst", cost: 5, want: verdict{over, "burst", 1, 4}},
				// Had the denied 5 been taken from daily (1 left), daily would
				// deny this.
				{what: "cost 4 (burst 0, window 6, daily 2 left)", cost: 4, want: verdict{ok, "burst", 1, 0}},
				{what: "peek a full bucket", peek: true, want: verdict{ok, "burst", 1, 0}},
				{what: "cost 1 denied by the burst", cost: 1, want: verdict{over, "burst", 1, 0}},
			}
			for i, s := range steps {
				var st *rlsv3.RateLimitResponse_DescriptorStatus
				if s.peek {
					st = peek(t, p, "multi", user)
				} else {
					st = call(t, p, req(s.cost, s.what == "refund 3")).Statuses[0]
				}
				if got := statusOf(st); got != s.want {
					t.Fatalf("step %d, %s: %v, want %v", i+1, s.what, got, s.want)
				}
			}
		})
	}
}
