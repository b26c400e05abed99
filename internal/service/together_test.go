package service

import (
	"testing"
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
