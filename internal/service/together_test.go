package service

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
)

// togetherConfig has a roomy hourly limit (a), a tight one (b) and a
// token bucket (c), all in one domain.
const togetherConfig = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: token_bucket}
`

// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: with AllOrNothing, a request
// with a denied descriptor leaves every other descriptor's count as it
// was; without it, each descriptor is decided on its own.
func TestAllOrNothing(t *testing.T) {
	tests := []struct {
		name         string
		allOrNothing bool
		// what the second [a, b, c] request reports (b is then over), and
		// what a, alone, then reports
		second []string
		after  string
	}{
		{
			name: "off: admitted descriptors keep their charge", allOrNothing: false,
			second: []string{"OK 10/HOUR rem=8 reset=1h0m0s", "OVER_LIMIT 1/HOUR rem=0 reset=1h0m0s", "OK 5/HOUR rem=3 reset=24m0s"},
			after:  "OK 10/HOUR rem=7 reset=1h0m0s",
		},
		{
			name: "on: nothing is charged when one is over", allOrNothing: true,
			second: []string{"OK 10/HOUR rem=9 reset=1h0m0s", "OVER_LIMIT 1/HOUR rem=0 reset=1h0m0s", "OK 5/HOUR rem=4 reset=12m0s"},
			after:  "OK 10/HOUR rem=8 reset=1h0m0s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{AllOrNothing: tt.allOrNothing}, togetherConfig)
			expect(t, h.call(t, rq("d", d("a", "1"), d("b", "1"), d("c", "1"))), OK,
				"OK 10/HOUR rem=9 reset=1h0m0s", "OK 1/HOUR rem=0 reset=1h0m0s", "OK 5/HOUR rem=4 reset=12m0s")
			expect(t, h.call(t, rq("d", d("a", "1"), d("b", "1"), d("c", "1"))), OVER, tt.second...)
			expect(t, h.call(t, rq("d", d("a", "1"))), OK, tt.after)
		})
	}
}

// A request whose every descriptor is admitted is charged in full with
// AllOrNothing; peeks, refunds and descriptors without a limit are left
// alone when another is over.
func TestAllOrNothingLeavesOthersAlone(t *testing.T) {
	h := newHarness(t, Options{AllOrNothing: true}, togetherConfig)
	expect(t, h.call(t, rq("d", d("a", "1"), d("b", "1"))), OK,
		"OK 10/HOUR rem=9 reset=1h0m0s", "OK 1/HOUR rem=0 reset=1h0m0s")
	// b is over: the peek of a reports and consumes nothing, the refund
	// of a gives back one (it is not undone), z has no limit.
	expect(t, h.call(t, rq("d", addend(d("a", "1"), 0), refund(d("a", "1")), d("b", "1"), d("z", "1"))), OVER,
		"OK 10/HOUR rem=9 reset=1h0m0s", "OK 10/HOUR rem=10 reset=1h0m0s", "OVER_LIMIT 1/HOUR rem=0 reset=1h0m0s", "OK rem=0")
	expect(t, h.call(t, rq("d", d("a", "1"))), OK, "OK 10/HOUR rem=9 reset=1h0m0s")
}

// newTogetherHarness is newHarness with AllOrNothing on a backend that
// decides a request's checks together, with the memory backend's own
// DecideTogether, or declines every call when decline is set; Decide
// calls still go through the harness's counting backend.
func newTogetherHarness(t *testing.T, cfg string, decline bool) (*harness, *stacktest.Together) {
	t.Helper()
	h := newHarness(t, Options{AllOrNothing: true}, cfg)
	tb := &stacktest.Together{Backend: h.mem, Decider: h.mem.Backend.(backend.TogetherDecider), Decline: decline}
	h.svc = New(Options{AllOrNothing: true, Backend: tb, Logger: stacktest.QuietLogger()})
	h.svc.SetConfig(parseConfig(t, cfg))
	return h, tb
}

// With a backend that decides a request's checks together, the service
// hands it the whole request and sends no compensating refunds.
func TestAllOrNothingTogetherBackend(t *testing.T) {
	tests := []struct {
		name    string
		decline bool
		calls   int64 // Decide calls for the denied request
	}{
		{name: "decided together: no refunds", calls: 0},
		{name: "declined: decided, then refunded", decline: true, calls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, tb := newTogetherHarness(t, togetherConfig, tt.decline)

			expect(t, h.call(t, rq("d", d("a", "1"), d("b", "1"))), OK,
				"OK 10/HOUR rem=9 reset=1h0m0s", "OK 1/HOUR rem=0 reset=1h0m0s")
			calls := h.mem.calls.Load()
			expect(t, h.call(t, rq("d", d("a", "1"), d("b", "1"))), OVER,
				"OK 10/HOUR rem=9 reset=1h0m0s", "OVER_LIMIT 1/HOUR rem=0 reset=1h0m0s")
			if got := h.mem.calls.Load() - calls; got != tt.calls {
				t.Errorf("%d Decide calls for a denied request, want %d", got, tt.calls)
			}
			expect(t, h.call(t, rq("d", d("a", "1"))), OK, "OK 10/HOUR rem=8 reset=1h0m0s")
			if tb.Calls != 3 {
				t.Errorf("DecideTogether called %d times, want 3", tb.Calls)
			}
		})
	}
}

// chargeConfig has a roomy limit (a) and a quota descriptor (q), which
// charges a cost that does not fit.
const chargeConfig = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: q
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// With AllOrNothing, a charged descriptor that is denied keeps its charge
// (that is what charging is for: a debit that does not fit still binds the
// quota), while the request's admitted descriptors are given back theirs;
// decided together or refunded after alike.
func TestAllOrNothingKeepsDeniedCharge(t *testing.T) {
	for _, decline := range []bool{false, true} {
		t.Run(map[bool]string{false: "together", true: "refunded"}[decline], func(t *testing.T) {
			h, _ := newTogetherHarness(t, chargeConfig, decline)

			expect(t, h.call(t, rq("d", d("a", "1"), addend(d("q", "1"), 3))), OVER,
				"OK 10/HOUR rem=10 reset=1h0m0s", "OVER_LIMIT 2/HOUR rem=0 reset=1h0m0s")
			// q holds 3 of 2: even one more is denied; a was given back.
			expect(t, h.call(t, rq("d", d("q", "1"))), OVER, "OVER_LIMIT 2/HOUR rem=0 reset=1h0m0s")
			expect(t, h.call(t, rq("d", d("a", "1"))), OK, "OK 10/HOUR rem=9 reset=1h0m0s")
		})
	}
}

// A request that carries one descriptor several times and is denied: its
// admitted copies are refunded one after the other, and each reports the
// state after the last refund (the whole limit left, since nothing stays
// charged), decided together or refunded after alike. Before, refunded
// copies reported 1 and 2 left: each the state after its own refund.
func TestAllOrNothingRepeatedDescriptor(t *testing.T) {
	const cfg = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 2}
`
	for _, decline := range []bool{false, true} {
		h, _ := newTogetherHarness(t, cfg, decline)
		expect(t, h.call(t, rq("d", d("a", "1"), d("a", "1"), d("a", "1"))), OVER,
			"OK 2/HOUR rem=2 reset=1h0m0s", "OK 2/HOUR rem=2 reset=1h0m0s", "OVER_LIMIT 2/HOUR rem=0 reset=1h0m0s")
		expect(t, h.call(t, rq("d", d("a", "1"))), OK, "OK 2/HOUR rem=1 reset=1h0m0s")
	}
}
