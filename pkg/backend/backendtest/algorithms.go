package backendtest

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/limit"
)

const us = time.Microsecond

// threePerMinute is the rule most scenarios use: 3 per minute (capacity 3
// for the meters).
func threePerMinute(a limit.Algorithm) []limit.Rule {
	return []limit.Rule{{Name: "three", Algorithm: a, Unit: limit.Minute, Limit: 3}}
}

// expectation is the binding outcome expected after one step.
type expectation struct {
	allowed   bool
	remaining uint64
	reset     time.Duration
}

// testAlgorithms: for every algorithm, admit up to the limit, deny with the
// right remaining and reset, still deny 1µs before the reset, admit at it.
// The clock starts 20 s into a minute; the numbers follow docs/algorithms.md.
func (s *suite) testAlgorithms(t *testing.T) {
	tests := []struct {
		algorithm limit.Algorithm
		admits    [3]expectation // three requests of cost 1
		denied    expectation    // the fourth
		again     expectation    // after waiting the denial's reset
	}{
		{limit.FixedWindow,
			[3]expectation{{true, 2, 40 * time.Second}, {true, 1, 40 * time.Second}, {true, 0, 40 * time.Second}},
			expectation{false, 0, 40 * time.Second},
			expectation{true, 2, time.Minute}},
		{limit.SlidingLog,
			[3]expectation{{true, 2, time.Minute}, {true, 1, time.Minute}, {true, 0, time.Minute}},
			expectation{false, 0, time.Minute},
			expectation{true, 2, time.Minute}},
		// Next window: 3·(60-e)/60 + 1 ≤ 3 at e = 20 s, i.e. in 60 s; then
		// whole again two windows after 12:01.
		{limit.SlidingWindow,
			[3]expectation{{true, 2, 100 * time.Second}, {true, 1, 100 * time.Second}, {true, 0, 100 * time.Second}},
			expectation{false, 0, time.Minute},
			expectation{true, 0, 100 * time.Second}},
		{limit.TokenBucket,
			[3]expectation{{true, 2, 20 * time.Second}, {true, 1, 40 * time.Second}, {true, 0, time.Minute}},
			expectation{false, 0, 20 * time.Second},
			expectation{true, 0, time.Minute}},
		{limit.LeakyBucket,
			[3]expectation{{true, 2, 20 * time.Second}, {true, 1, 40 * time.Second}, {true, 0, time.Minute}},
			expectation{false, 0, 20 * time.Second},
			expectation{true, 0, time.Minute}},
		{limit.GCRA,
			[3]expectation{{true, 2, 20 * time.Second}, {true, 1, 40 * time.Second}, {true, 0, time.Minute}},
			expectation{false, 0, 20 * time.Second},
			expectation{true, 0, time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.algorithm.String(), func(t *testing.T) {
			e := s.env(t, base)
			id, rules := e.id("x"), threePerMinute(tt.algorithm)
			for i, x := range tt.admits {
				e.expect("request "+string(rune('1'+i)), e.one("admit", id, rules, 1), x.allowed, x.remaining, x.reset)
			}
			d := e.one("fourth", id, rules, 1)
			e.expect("fourth request", d, tt.denied.allowed, tt.denied.remaining, tt.denied.reset)
			if d.Binding != 0 {
				t.Errorf("fourth request: binding %d, want 0", d.Binding)
			}
			wait := d.BindingOutcome().Reset
			e.wait(wait - us)
			e.expect("1µs before the reset", e.one("early", id, rules, 1), false, 0, us)
			e.wait(us)
			e.expect("at the reset", e.one("again", id, rules, 1), tt.again.allowed, tt.again.remaining, tt.again.reset)
			// Long idle: whole again.
			e.wait(10 * time.Minute)
			d = e.one("idle peek", id, rules, 0)
			if o := d.BindingOutcome(); !d.Allowed || o.Remaining != 3 {
				t.Errorf("after 10 idle minutes: %s, want allowed with 3 remaining", format(d))
			}
		})
	}
}

func (s *suite) testRefund(t *testing.T) {
	s.perAlgorithm(t, func(t *testing.T, e *env, a limit.Algorithm) {
		id, rules := e.id("x"), threePerMinute(a)
		e.expect("take 3", e.one("take", id, rules, 3), true, 0, e.firstReset(a))
		d := e.refund("refund 2", id, rules, 2)
		if o := d.BindingOutcome(); !d.Allowed || o.Remaining != 2 {
			t.Errorf("refund 2 of 3: %s, want allowed with 2 remaining", format(d))
		}
		d = e.refund("refund 10", id, rules, 10)
		if o := d.BindingOutcome(); !d.Allowed || o.Remaining != 3 {
			t.Errorf("refund more than was taken: %s, want 3 remaining (never above full)", format(d))
		}
		e.expect("take 3 again", e.one("take", id, rules, 3), true, 0, e.firstReset(a))
		e.expect("then over", e.one("over", id, rules, 1), false, 0, e.overReset(a))
		// A refund is admitted even when the rule is full.
		d = e.refund("refund 1 when full", id, rules, 1)
		if !d.Allowed || d.BindingOutcome().Remaining != 1 {
			t.Errorf("refund when full: %s", format(d))
		}
	})
}

// firstReset is the reset after taking the whole quota of threePerMinute at
// base; a rule of any limit per minute filled at base (by one request or
// several, before or after a raise) resets the same.
func (e *env) firstReset(a limit.Algorithm) time.Duration {
	switch a {
	case limit.FixedWindow:
		return 40 * time.Second
	case limit.SlidingWindow:
		return 100 * time.Second
	}
	return time.Minute
}

// overReset is the reset of a denied cost of 1 right after firstReset.
func (e *env) overReset(a limit.Algorithm) time.Duration {
	switch a {
	case limit.FixedWindow:
		return 40 * time.Second
	case limit.SlidingLog, limit.SlidingWindow:
		return time.Minute
	}
	return 20 * time.Second
}

func (s *suite) testPeek(t *testing.T) {
	s.perAlgorithm(t, func(t *testing.T, e *env, a limit.Algorithm) {
		id, rules := e.id("x"), threePerMinute(a)
		e.expect("peek fresh", e.one("peek", id, rules, 0), true, 3, e.wholeReset(a))
		e.one("take 3", id, rules, 3)
		for range 3 {
			e.expect("peek when full", e.one("peek", id, rules, 0), true, 0, e.firstReset(a))
		}
		e.expect("take after peeks", e.one("over", id, rules, 1), false, 0, e.overReset(a))
	})
}

// wholeReset is the reset reported by a fresh rule of threePerMinute at base.
func (e *env) wholeReset(a limit.Algorithm) time.Duration {
	if a == limit.FixedWindow {
		return 40 * time.Second
	}
	return 0
}

func (s *suite) testCostOverLimit(t *testing.T) {
	s.perAlgorithm(t, func(t *testing.T, e *env, a limit.Algorithm) {
		id, rules := e.id("x"), threePerMinute(a)
		e.expect("cost 4 of 3, fresh", e.one("cost 4", id, rules, 4), false, 3, e.wholeReset(a))
		e.expect("nothing consumed", e.one("peek", id, rules, 0), true, 3, e.wholeReset(a))
		e.one("take 1", id, rules, 1)
		d := e.one("cost 4 after 1", id, rules, 4)
		if o := d.BindingOutcome(); d.Allowed || o.Remaining != 2 || o.Reset != e.firstReset(a)-e.meterShare(a) {
			t.Errorf("cost 4 after taking 1: %s, want denied, 2 remaining, reset when whole again (%v)", format(d), e.firstReset(a)-e.meterShare(a))
		}
		// Limit 0 denies every cost.
		zero := []limit.Rule{{Algorithm: a, Unit: limit.Minute}}
		if d := e.one("limit 0", e.id("zero"), zero, 1); d.Allowed {
			t.Errorf("limit 0 admitted a request: %s", format(d))
		}
	})
}

// meterShare is how much sooner a meter holding 1 of 3 is whole than one
// holding 3.
func (e *env) meterShare(a limit.Algorithm) time.Duration {
	if a.IsMeter() {
		return 40 * time.Second
	}
	return 0
}

func (s *suite) testFixedWindowRollover(t *testing.T) {
	e := s.env(t, base)
	id, rules := e.id("x"), []limit.Rule{{Unit: limit.Second, Multiplier: 10, Limit: 2}}
	// base is 20 s into a minute: the 10 s window [12:00:20, 12:00:30).
	e.expect("first", e.one("take", id, rules, 2), true, 0, 10*time.Second)
	e.wait(10*time.Second - us)
	e.expect("last µs of the window", e.one("take", id, rules, 1), false, 0, us)
	e.wait(us)
	e.expect("first µs of the next", e.one("take", id, rules, 1), true, 1, 10*time.Second)
	e.wait(25 * time.Second) // skip a whole window
	e.expect("two windows later", e.one("take", id, rules, 2), true, 0, 5*time.Second)
}

func (s *suite) testSlidingWindowRollover(t *testing.T) {
	e := s.env(t, base)
	id := e.id("x")
	rules := []limit.Rule{{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 10}}
	// 12:00:20, window 12:00.
	e.expect("take 10", e.one("take", id, rules, 10), true, 0, 100*time.Second)
	e.wait(55 * time.Second) // 12:01:15: 10·45/60 = 7.5 of the last minute
	e.expect("peek", e.one("peek", id, rules, 0), true, 2, 45*time.Second)
	e.expect("take 2", e.one("take", id, rules, 2), true, 0, 105*time.Second)
	// 7.5 + 2 + 1 > 10: wait until the previous window weighs
	// 10·(60-e)/60 ≤ 10 - 2 - 1, at e = 18 s.
	e.expect("over", e.one("over", id, rules, 1), false, 0, 3*time.Second)
	e.wait(3 * time.Second)
	e.expect("admitted", e.one("take", id, rules, 1), true, 0, 102*time.Second)
	e.wait(3 * time.Minute) // both windows out of the period
	e.expect("whole", e.one("peek", id, rules, 0), true, 10, 0)
}
