package service

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/internal/stacktest"
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
			second: []string{"OK 10/HOUR rem=8 reset=59m59.75s", "OVER_LIMIT 1/HOUR rem=0 reset=59m59.75s", "OK 5/HOUR rem=3 reset=24m0s"},
			after:  "OK 10/HOUR rem=7 reset=59m59.75s",
		},
		{
			name: "on: nothing is charged when one is over", allOrNothing: true,
			second: []string{"OK 10/HOUR rem=9 reset=59m59.75s", "OVER_LIMIT 1/HOUR rem=0 reset=59m59.75s", "OK 5/HOUR rem=4 reset=12m0s"},
			after:  "OK 10/HOUR rem=8 reset=59m59.75s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{AllOrNothing: tt.allOrNothing}, togetherConfig)
			expect(t, h.call(t, rq("d", d("a", "1"), d("b", "1"), d("c", "1"))), OK,
				"OK 10/HOUR rem=9 reset=59m59.75s", "OK 1/HOUR rem=0 reset=59m59.75s", "OK 5/HOUR rem=4 reset=12m0s")
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
		"OK 10/HOUR rem=9 reset=59m59.75s", "OK 1/HOUR rem=0 reset=59m59.75s")
	// b is over: the peek of a reports and consumes nothing, the refund
	// of a gives back one (it is not undone), z has no limit.
	expect(t, h.call(t, rq("d", addend(d("a", "1"), 0), refund(d("a", "1")), d("b", "1"), d("z", "1"))), OVER,
		"OK 10/HOUR rem=9 reset=59m59.75s", "OK 10/HOUR rem=10 reset=59m59.75s", "OVER_LIMIT 1/HOUR rem=0 reset=59m59.75s", "OK rem=0")
	expect(t, h.call(t, rq("d", d("a", "1"))), OK, "OK 10/HOUR rem=9 reset=59m59.75s")
}

// togetherMemory is the real memory backend given a DecideTogether: it
// peeks every check and charges them only if all would be admitted. It is
// atomic only without concurrent callers, which is all this test needs: it
// checks that the service uses a backend's DecideTogether and then refunds
// nothing it did not charge.
type togetherMemory struct {
	*countingBackend
	together int
}

func (b *togetherMemory) DecideTogether(ctx context.Context, checks []backend.Check) []backend.Result {
	b.together++
	peeks := make([]backend.Check, len(checks))
	for i, c := range checks {
		peeks[i] = c
		if !c.Cost.Refund {
			peeks[i].Cost.N = 0
		}
	}
	results := b.countingBackend.Decide(ctx, peeks)
	for i, r := range results {
		if r.Err == nil && !checks[i].Cost.Refund && r.Decision.BindingOutcome().Remaining < checks[i].Cost.N {
			for j := range results {
				if results[j].Err == nil && !checks[j].Cost.Refund && results[j].Decision.BindingOutcome().Remaining < checks[j].Cost.N {
					results[j].Decision.Allowed = false
				}
			}
			return results
		}
	}
	return b.countingBackend.Decide(ctx, checks)
}

// With a backend that decides a request's checks together, the service
// hands it the whole request and sends no compensating refunds.
func TestAllOrNothingTogetherBackend(t *testing.T) {
	h := newHarness(t, Options{AllOrNothing: true}, togetherConfig)
	tb := &togetherMemory{countingBackend: h.mem}
	h.svc = New(Options{AllOrNothing: true, Backend: tb, Logger: stacktest.QuietLogger()})
	h.svc.SetConfig(parseConfig(t, togetherConfig))

	expect(t, h.call(t, rq("d", d("a", "1"), d("b", "1"))), OK,
		"OK 10/HOUR rem=9 reset=59m59.75s", "OK 1/HOUR rem=0 reset=59m59.75s")
	calls := h.mem.calls.Load()
	resp := h.call(t, rq("d", d("a", "1"), d("b", "1")))
	if resp.OverallCode != OVER {
		t.Fatalf("second call %v, want OVER_LIMIT", resp.OverallCode)
	}
	if got := h.mem.calls.Load() - calls; got != 1 {
		t.Errorf("%d backend calls for a denied request, want 1 (the together decision, no refunds)", got)
	}
	expect(t, h.call(t, rq("d", d("a", "1"))), OK, "OK 10/HOUR rem=8 reset=59m59.75s")
	if tb.together != 3 {
		t.Errorf("DecideTogether called %d times, want 3", tb.together)
	}
}
