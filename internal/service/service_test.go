package service

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// basicYAML and anotherYAML are the reference's integration configs
// (test/integration/runtime/current/ratelimit/config/basic.yaml and
// another.yaml), as its §5.2 describes them; test/integration runs the
// binary on the same two.
const (
	basicYAML   = stacktest.ReferenceBasicYAML
	anotherYAML = stacktest.ReferenceAnotherYAML
)

// TestBasicBaseConfig replays the reference's core integration scenario
// (testBasicBaseConfig steps 1-5) with its exact remaining values.
func TestBasicBaseConfig(t *testing.T) {
	h := newHarness(t, Options{}, basicYAML, anotherYAML)

	// 1. Unknown domain: OK, no limit, remaining 0.
	expect(t, h.call(t, rq("foo", d("hello", "world"))), OK, "OK rem=0")

	// 2. A fresh 50/s key: remaining 49.
	expect(t, h.call(t, rq("basic", d("key1", "foo"))), OK, "OK 50/SECOND rem=49 reset=1s")

	// 3. 25 calls against 20/min.
	for i := range 25 {
		resp := h.call(t, rq("another", d("key2", "r1")))
		if i < 20 {
			expect(t, resp, OK, fmt.Sprintf("OK 20/MINUTE rem=%d reset=1m0s", 20-(i+1)))
		} else {
			expect(t, resp, OVER, "OVER_LIMIT 20/MINUTE rem=0 reset=1m0s")
		}
	}

	// 4. Two descriptors: key2 keeps counting while key3 goes over.
	for i := range 15 {
		resp := h.call(t, rq("another", d("key2", "r2"), d("key3", "r2")))
		key2 := fmt.Sprintf("OK 20/MINUTE rem=%d reset=1m0s", 20-(i+1))
		if i < 10 {
			expect(t, resp, OK, key2, fmt.Sprintf("OK 10/HOUR rem=%d reset=1h0m0s", 10-(i+1)))
		} else {
			expect(t, resp, OVER, key2, "OVER_LIMIT 10/HOUR rem=0 reset=1h0m0s")
		}
	}

	// 5. The day window's reset shrinks as time passes.
	first := h.call(t, rq("another", d("key4", "durTest"))).Statuses[0].DurationUntilReset.AsDuration()
	h.clock.Advance(2 * time.Second)
	second := h.call(t, rq("another", d("key4", "durTest"))).Statuses[0].DurationUntilReset.AsDuration()
	if first-second != 2*time.Second {
		t.Fatalf("day reset went from %s to %s after 2s", first, second)
	}
}

func TestNoLimit(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: b
        value: whitelisted
  - key: nolimit
    value: x
`
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want []string
	}{
		{"unknown domain", rq("zzz", d("a", "1"), d("c", "1")), []string{"OK rem=0", "OK rem=0"}},
		{"unknown domain ignores override", rq("zzz", override(d("a", "1"), 0, typev3.RateLimitUnit_MINUTE, 0)), []string{"OK rem=0"}},
		{"unknown key", rq("d", d("c", "1")), []string{"OK rem=0"}},
		{"deeper than the config", rq("d", d("a", "1", "c", "2")), []string{"OK rem=0"}},
		{"node without rate_limit", rq("d", d("a", "1", "b", "whitelisted")), []string{"OK rem=0"}},
		{"leaf without rate_limit", rq("d", d("nolimit", "x")), []string{"OK rem=0"}},
		{"descriptor without entries", rq("d", d()), []string{"OK rem=0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{}, cfg)
			expect(t, h.call(t, tt.req), OK, tt.want...)
			if n := h.mem.calls.Load(); n != 0 {
				t.Fatalf("backend called %d times for descriptors without limits", n)
			}
		})
	}

	t.Run("no config", func(t *testing.T) {
		h := newHarness(t, Options{}, cfg)
		h.svc.SetConfig(nil)
		if h.svc.Config() != nil {
			t.Fatal("Config() after SetConfig(nil) is not nil")
		}
		expect(t, h.call(t, rq("d", d("a", "1"))), OK, "OK rem=0")
	})
}

func TestUnlimited(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: qux
    rate_limit: {unlimited: true}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	// A failing backend proves unlimited descriptors never reach it.
	h := newHarness(t, Options{Backend: stacktest.FailingBackend{Err: stacktest.ErrRedisDown}}, cfg)
	expect(t, h.call(t, rq("d", d("qux", "1"), d("qux", "2"))), OK, "OK rem=4294967295", "OK rem=4294967295")
	if _, err := h.svc.ShouldRateLimit(context.Background(), rq("d", d("qux", "1"), d("foo", "1"))); status.Code(err) != codes.Unavailable {
		t.Fatalf("a limited descriptor with a failing backend gave %v, want Unavailable", err)
	}
}

func TestSetConfigSwaps(t *testing.T) {
	h := newHarness(t, Options{}, basicYAML)
	expect(t, h.call(t, rq("another", d("key2", "x"))), OK, "OK rem=0")
	h.svc.SetConfig(parseConfig(t, anotherYAML))
	expect(t, h.call(t, rq("another", d("key2", "x"))), OK, "OK 20/MINUTE rem=19 reset=1m0s")
	expect(t, h.call(t, rq("basic", d("key1", "x"))), OK, "OK rem=0")
}

func TestShadowMode(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: shady
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: strict
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	t.Run("descriptor shadow_mode reports OK", func(t *testing.T) {
		h := newHarness(t, Options{}, cfg)
		for range 3 {
			expect(t, h.call(t, rq("d", d("shady", "1"))), OK, "OK 1/MINUTE rem=0 reset=1m0s")
		}
	})
	t.Run("shadow does not hide another descriptor's denial", func(t *testing.T) {
		h := newHarness(t, Options{}, cfg)
		h.call(t, rq("d", d("shady", "1"), d("strict", "1")))
		expect(t, h.call(t, rq("d", d("shady", "1"), d("strict", "1"))), OVER,
			"OK 1/MINUTE rem=0 reset=1m0s", "OVER_LIMIT 1/MINUTE rem=0 reset=1m0s")
	})
	t.Run("global shadow keeps statuses, forces overall OK", func(t *testing.T) {
		h := newHarness(t, Options{ShadowMode: true}, cfg)
		expect(t, h.call(t, rq("d", d("strict", "1"))), OK, "OK 1/MINUTE rem=0 reset=1m0s")
		expect(t, h.call(t, rq("d", d("strict", "1"))), OK, "OVER_LIMIT 1/MINUTE rem=0 reset=1m0s")
	})
}

func TestQuotaMode(t *testing.T) {
	const cfg = `
domain: q
descriptors:
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: r
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: qs
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: inf
    rate_limit: {unlimited: true}
`
	tests := []struct {
		name          string
		quota, shadow bool
		exhaust, keys []string
		want          rlsv3.RateLimitResponse_Code
	}{
		{"all quota descriptors over", false, false, []string{"q1", "q2"}, []string{"q1", "q2"}, OVER},
		{"some quota descriptors over", false, false, []string{"q1"}, []string{"q1", "q2"}, OK},
		{"no quota descriptor over", false, false, nil, []string{"q1", "q2"}, OK},
		{"non-quota over beside quota OK", false, false, []string{"r"}, []string{"q1", "r"}, OVER},
		{"the only quota descriptor over beside non-quota OK", false, false, []string{"q1"}, []string{"q1", "r"}, OVER},
		{"shadowed quota descriptor counts as passing", false, false, []string{"q1", "qs"}, []string{"q1", "qs"}, OK},
		{"unlimited does not count as quota", true, false, []string{"r"}, []string{"r", "inf"}, OVER},
		{"global quota: one of two over", true, false, []string{"r"}, []string{"r", "q2"}, OK},
		{"global quota: all over", true, false, []string{"r", "q1"}, []string{"r", "q1"}, OVER},
		{"global quota: a no-limit descriptor passes", true, false, []string{"r"}, []string{"r", "none"}, OK},
		{"global shadow over all-quota-over", false, true, []string{"q1", "q2"}, []string{"q1", "q2"}, OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{QuotaMode: tt.quota, ShadowMode: tt.shadow}, cfg)
			for _, k := range tt.exhaust {
				h.call(t, rq("q", d(k, "v")))
			}
			var ds []*rlv3.RateLimitDescriptor
			for _, k := range tt.keys {
				ds = append(ds, d(k, "v"))
			}
			resp := h.call(t, rq("q", ds...))
			if resp.OverallCode != tt.want {
				t.Fatalf("overall %s, want %s; statuses %q", resp.OverallCode, tt.want, statuses(resp))
			}
		})
	}
}

// The reference's example config as integration-test/scripts/replaces.sh
// uses it (names banned_limit, bkthomps, fake_name; replacers override,
// bkthomps and category=account).
const replacesYAML = `
domain: rl
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: mock
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: destination_cluster
        value: override
        rate_limit:
          unit: minute
          requests_per_unit: 2
          replaces:
            - name: banned_limit
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          unit: minute
          requests_per_unit: 2
          replaces:
            - name: bkthomps
      - key: destination_cluster
        value: fake
        rate_limit: {name: fake_name, unit: minute, requests_per_unit: 2}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: bar
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: bar
        value: banned
        rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}
      - key: bar
        value: bkthomps
        rate_limit: {name: bkthomps, unit: minute, requests_per_unit: 1}
  - key: category
    value: account
    rate_limit:
      unit: minute
      requests_per_unit: 4
      replaces:
        - name: bkthomps
        - name: fake_name
`

// TestReplaces replays replaces.sh: Envoy's /twoheader route sends
// (foo, bar), /fourheader adds (source_cluster, destination_cluster),
// /fiveheader adds (category).
func TestReplaces(t *testing.T) {
	h := newHarness(t, Options{}, replacesYAML)
	two := func(foo, bar string) []*rlv3.RateLimitDescriptor {
		return []*rlv3.RateLimitDescriptor{d("foo", foo, "bar", bar)}
	}
	four := func(foo, bar, dst string) []*rlv3.RateLimitDescriptor {
		return append(two(foo, bar), d("source_cluster", "proxy", "destination_cluster", dst))
	}
	five := func(foo, bar, dst, cat string) []*rlv3.RateLimitDescriptor {
		return append(four(foo, bar, dst), d("category", cat))
	}
	steps := []struct {
		ds []*rlv3.RateLimitDescriptor
		ok bool
	}{
		// replaces raises the limit
		{two("bkthomps", "banned"), false},
		{four("bkthomps", "banned", "mock"), false},
		{four("bkthomps", "banned", "override"), true},
		{four("bkthomps", "banned", "override"), true},
		{four("bkthomps", "banned", "override"), false},
		// replaces does not touch the original limit
		{four("my_foo", "bkthomps", "bkthomps"), true},
		{four("my_foo", "bkthomps", "bkthomps"), true},
		{four("my_foo", "bkthomps", "bkthomps"), false},
		{four("my_foo", "bkthomps", "not_bkthomps"), true},
		{four("my_foo", "bkthomps", "not_bkthomps"), false},
		{four("my_foo", "bkthomps", "bkthomps"), false},
		// one node replaces several names
		{five("my_foo", "bkthomps", "fake", "account"), true},
		{five("my_foo", "bkthomps", "fake", "account"), true},
		{five("my_foo", "bkthomps", "fake", "account"), true},
		{five("my_foo", "bkthomps", "fake", "account"), true},
		{five("my_foo", "bkthomps", "fake", "account"), false},
		{two("foo_2", "bkthomps"), true},
		{two("foo_2", "bkthomps"), false},
		{four("foo_3", "bar_3", "fake"), true},
		{four("foo_3", "bar_3", "fake"), true},
		{four("foo_3", "bar_3", "fake"), false},
		{five("my_foo", "bkthomps", "fake", "account"), false},
	}
	for i, s := range steps {
		resp := h.call(t, rq("rl", s.ds...))
		if got := resp.OverallCode == OK; got != s.ok {
			t.Fatalf("step %d: overall %s, want ok=%v; statuses %q", i, resp.OverallCode, s.ok, statuses(resp))
		}
	}
	// A replaced descriptor reports no limit (in the next minute, when the
	// override's 2/min is fresh again).
	h.clock.Advance(time.Minute)
	expect(t, h.call(t, rq("rl", four("x", "banned", "override")...)), OK,
		"OK rem=0", "OK 2/MINUTE rem=1 reset=1m0s")
}

func TestReplacesDropsOnlyNamedRules(t *testing.T) {
	const cfg = `
domain: r
descriptors:
  - key: user
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 1}
      - {name: per_hour, unit: hour, requests_per_unit: 100}
  - key: vip
    rate_limit:
      unlimited: true
      replaces:
        - name: per_second
`
	h := newHarness(t, Options{}, cfg)
	// Without vip, per_second binds after one call.
	expect(t, h.call(t, rq("r", d("user", "a"))), OK, "OK per_second:1/SECOND rem=0 reset=1s")
	// An unlimited node replaces per_second: only per_hour is decided.
	for i := range 3 {
		expect(t, h.call(t, rq("r", d("user", "b"), d("vip", "yes"))), OK,
			fmt.Sprintf("OK per_hour:100/HOUR rem=%d reset=1h0m0s", 99-i), "OK rem=4294967295")
	}
}

func TestOverride(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: shadowed
    shadow_mode: true
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: shared
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	tests := []struct {
		name  string
		setup []*rlv3.RateLimitDescriptor
		req   *rlv3.RateLimitDescriptor
		code  rlsv3.RateLimitResponse_Code
		want  string
	}{
		{"skips matching", nil, override(d("blocked", "1"), 2, typev3.RateLimitUnit_MINUTE, 0), OK, "OK 2/MINUTE rem=1 reset=1m0s"},
		{"unit_multiplier", nil, override(d("x", "1"), 3, typev3.RateLimitUnit_MINUTE, 5), OK, "OK 3/5xMINUTE rem=2 reset=5m0s"},
		{"unit_multiplier 1 is not reported", nil, override(d("x", "1"), 3, typev3.RateLimitUnit_MINUTE, 1), OK, "OK 3/MINUTE rem=2 reset=1m0s"},
		{"unit_multiplier 0 means 1", nil, override(d("x", "1"), 3, typev3.RateLimitUnit_HOUR, 0), OK, "OK 3/HOUR rem=2 reset=1h0m0s"},
		{"week (response enum 7)", nil, override(d("x", "1"), 1, typev3.RateLimitUnit(7), 0), OK, "OK 1/WEEK rem=0 reset=62h0m0s"},
		{"month", nil, override(d("x", "1"), 1, typev3.RateLimitUnit_MONTH, 0), OK, ""},
		{"year", nil, override(d("x", "1"), 1, typev3.RateLimitUnit_YEAR, 0), OK, ""},
		{"0 blocks", nil, override(d("x", "1"), 0, typev3.RateLimitUnit_SECOND, 0), OVER, "OVER_LIMIT 0/SECOND rem=0 reset=1s"},
		{"shadow and quota off", nil, override(d("shadowed", "1"), 0, typev3.RateLimitUnit_SECOND, 0), OVER, "OVER_LIMIT 0/SECOND rem=0 reset=1s"},
		{"shares a configured window's count", []*rlv3.RateLimitDescriptor{d("shared", "1"), d("shared", "1")},
			override(d("shared", "1"), 10, typev3.RateLimitUnit_MINUTE, 0), OK, "OK 10/MINUTE rem=7 reset=1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{}, cfg)
			for _, s := range tt.setup {
				h.call(t, rq("d", s))
			}
			resp := h.call(t, rq("d", tt.req))
			if tt.want == "" {
				if resp.OverallCode != tt.code || resp.Statuses[0].CurrentLimit.GetUnit().String() != tt.req.Limit.Unit.String() {
					t.Fatalf("got %s %q", resp.OverallCode, statuses(resp))
				}
				return
			}
			expect(t, resp, tt.code, tt.want)
		})
	}
}

func TestHitsAddend(t *testing.T) {
	const cfg = `
domain: c
descriptors:
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	h := newHarness(t, Options{}, cfg)
	steps := []struct {
		name       string
		requestAdd uint32
		desc       *rlv3.RateLimitDescriptor
		code       rlsv3.RateLimitResponse_Code
		remaining  uint32
	}{
		{"unset means 1", 0, d("c", "1"), OK, 9},
		{"request hits_addend", 3, d("c", "1"), OK, 6},
		{"descriptor hits_addend wins", 3, addend(d("c", "1"), 2), OK, 4},
		{"descriptor 0 is a peek", 5, addend(d("c", "1"), 0), OK, 4},
		{"refund", 0, refund(addend(d("c", "1"), 3)), OK, 7},
		{"refund of the request addend", 2, refund(d("c", "1")), OK, 9},
		{"refund never beyond full", 0, refund(addend(d("c", "1"), 100)), OK, 10},
		{"denied request cost consumes nothing", 11, d("c", "1"), OVER, 10},
		{"exactly the rest", 0, addend(d("c", "1"), 10), OK, 0},
		{"peek at the limit is admitted", 0, addend(d("c", "1"), 0), OK, 0},
		{"one more is denied", 0, d("c", "1"), OVER, 0},
		{"huge cost is clamped, denied", 0, addend(d("c", "1"), math.MaxUint64), OVER, 0},
	}
	for _, s := range steps {
		req := rq("c", s.desc)
		req.HitsAddend = s.requestAdd
		resp := h.call(t, req)
		st := resp.Statuses[0]
		if st.Code != s.code || st.LimitRemaining != s.remaining {
			t.Fatalf("%s: got %s, want %s rem=%d", s.name, statusString(st), s.code, s.remaining)
		}
	}
	if c := costOf(addend(d("c", "1"), math.MaxUint64), 0); c.N != MaxCost {
		t.Fatalf("cost %d not clamped to %d", c.N, uint64(MaxCost))
	}
}

func TestSeveralRules(t *testing.T) {
	const cfg = `
domain: m
descriptors:
  - key: user
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 2}
      - {name: hourly, unit: hour, requests_per_unit: 3}
`
	h := newHarness(t, Options{}, cfg)
	call := func() *rlsv3.RateLimitResponse { return h.call(t, rq("m", d("user", "alice"))) }
	expect(t, call(), OK, "OK burst:2/SECOND rem=1 reset=1s")
	expect(t, call(), OK, "OK burst:2/SECOND rem=0 reset=1s")
	// burst denies; hourly would admit but must not consume.
	expect(t, call(), OVER, "OVER_LIMIT burst:2/SECOND rem=0 reset=1s")
	h.clock.Advance(time.Second)
	// hourly has 1 left (not 0): the denied call consumed nothing.
	expect(t, call(), OK, "OK hourly:3/HOUR rem=0 reset=59m59s")
	expect(t, call(), OVER, "OVER_LIMIT hourly:3/HOUR rem=0 reset=59m59s")
	// burst still has 1 left in this second: the hourly denial took nothing.
	h.svc.SetConfig(parseConfig(t, `
domain: m
descriptors:
  - key: user
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 2}
`))
	expect(t, call(), OK, "OK burst:2/SECOND rem=0 reset=1s")
}

func TestStatusesInRequestOrderAndOneBackendCall(t *testing.T) {
	const cfg = `
domain: o
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 7}
  - key: free
    rate_limit: {unlimited: true}
`
	h := newHarness(t, Options{}, cfg)
	h.call(t, rq("o", d("a", "1")))
	calls, checks := h.mem.calls.Load(), h.mem.checks.Load()
	resp := h.call(t, rq("o", d("c", "1"), d("nope", "1"), d("a", "1"), d("free", "1"), d("b", "1"), d("c", "2")))
	expect(t, resp, OVER,
		"OK 7/HOUR rem=6 reset=1h0m0s",
		"OK rem=0",
		"OVER_LIMIT 1/SECOND rem=0 reset=1s",
		"OK rem=4294967295",
		"OK 5/MINUTE rem=4 reset=1m0s",
		"OK 7/HOUR rem=6 reset=1h0m0s")
	if got := h.mem.calls.Load() - calls; got != 1 {
		t.Fatalf("%d backend calls for one request, want 1", got)
	}
	if got := h.mem.checks.Load() - checks; got != 4 {
		t.Fatalf("%d checks sent, want 4 (one per limited descriptor)", got)
	}
}

func TestDurationUntilResetMillis(t *testing.T) {
	h := newHarness(t, Options{ResetMillis: true}, basicYAML)
	h.clock.Advance(123456789 * time.Nanosecond) // now .373456789 into the second
	st := h.call(t, rq("basic", d("key1", "x"))).Statuses[0]
	// 626.543211 ms left, rounded up to the millisecond.
	if got := st.DurationUntilReset.AsDuration(); got != 627*time.Millisecond {
		t.Fatalf("duration_until_reset %s, want 627ms", got)
	}
	for _, tt := range []struct{ in, want time.Duration }{
		{0, 0}, {-time.Second, 0}, {time.Nanosecond, time.Millisecond}, {time.Millisecond, time.Millisecond},
		{1500 * time.Microsecond, 2 * time.Millisecond},
	} {
		if got := ceilMillis(tt.in); got != tt.want {
			t.Errorf("ceilMillis(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestShareThreshold(t *testing.T) {
	const cfg = `
domain: st
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    value: t*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
`
	h := newHarness(t, Options{}, cfg)
	for range 10 {
		h.call(t, rq("st", d("files", "files/a.pdf")))
	}
	expect(t, h.call(t, rq("st", d("files", "files/b.csv"))), OVER, "OVER_LIMIT 10/HOUR rem=0 reset=1h0m0s")
	for i := range 10 {
		expect(t, h.call(t, rq("st", d("files_no_share", fmt.Sprintf("files_no_share/%d", i)))), OK, "OK 10/HOUR rem=9 reset=1h0m0s")
	}
	// A shared parent level: t1 and t2 share the user's counter.
	expect(t, h.call(t, rq("st", d("tenant", "t1", "user", "u"))), OK, "OK 2/HOUR rem=1 reset=1h0m0s")
	expect(t, h.call(t, rq("st", d("tenant", "t2", "user", "u"))), OK, "OK 2/HOUR rem=0 reset=1h0m0s")
	expect(t, h.call(t, rq("st", d("tenant", "t1", "user", "v"))), OK, "OK 2/HOUR rem=1 reset=1h0m0s")
}

// TestDurationUntilResetWholeSeconds checks duration_until_reset as
// Envoy reads it: its x-ratelimit-reset header (enable_x_ratelimit_headers,
// which Envoy Gateway turns on by default) is the Duration's seconds field,
// the fraction dropped. The incumbent sends whole seconds to the window's
// end, unit − now mod unit with now in whole seconds; so must sluice by
// default, or the header says one second less, and 0 (retry now, to be
// denied again) through the last second of every window and always for a
// per-second limit. ResetMillis keeps the fraction.
func TestDurationUntilResetWholeSeconds(t *testing.T) {
	cases := []struct {
		name    string
		advance time.Duration // from t0, .25 s into a second
		req     *rlsv3.RateLimitRequest
		unit    int64 // seconds
		millis  bool
		want    time.Duration
	}{
		{"per second", 0, rq("basic", d("key1", "a")), 1, false, time.Second},
		{"per minute", 12*time.Second + 500*time.Millisecond, rq("another", d("key2", "a")), 60, false, 48 * time.Second},
		{"per hour", 0, rq("another", d("key3", "a")), 3600, false, time.Hour},
		{"per second, to the millisecond", 0, rq("basic", d("key1", "b")), 1, true, 750 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{ResetMillis: tc.millis}, basicYAML, anotherYAML)
			h.clock.Advance(tc.advance)
			st := h.call(t, tc.req).Statuses[0]
			got := st.GetDurationUntilReset().AsDuration()
			if got != tc.want {
				t.Fatalf("duration_until_reset %s, want %s", got, tc.want)
			}
			if tc.millis {
				return
			}
			now := h.clock.Now().Unix()
			if header, incumbent := st.GetDurationUntilReset().GetSeconds(), tc.unit-now%tc.unit; header != incumbent {
				t.Errorf("Envoy's x-ratelimit-reset would be %d, the incumbent's %d", header, incumbent)
			}
		})
	}
}
