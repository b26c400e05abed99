package backendtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// debit decides a charged cost (limit.Cost.Charge): the response-path debit
// of a check-then-debit quota.
func (e *env) debit(what, id string, rules []limit.Rule, n uint64) limit.Decision {
	e.t.Helper()
	return e.decide(what, backend.Check{Identity: id, Rules: rules, Cost: limit.Cost{N: n, Charge: true}})[0]
}

// testCheckThenDebit is Envoy's token-quota pattern on every algorithm: the
// request path peeks (hits_addend 0), the response path debits the real
// cost, charged. With 2 per minute the third peek is still admitted (two
// units used, none over) and its debit takes the count over the limit, so
// the fourth peek is denied: three requests pass, as envoyproxy/ratelimit
// lets three pass. Then a debit larger than what is left: it is charged,
// every later peek is denied until the window or the drain has paid it
// back, and at that instant a peek is admitted again.
func (s *suite) testCheckThenDebit(t *testing.T) {
	s.perAlgorithm(t, func(t *testing.T, e *env, a limit.Algorithm) {
		id := e.id("quota")
		rules := []limit.Rule{{Algorithm: a, Unit: limit.Minute, Limit: 2}}
		passed := 0
		for i := range 6 {
			if !e.one(fmt.Sprint("peek ", i+1), id, rules, 0).Allowed {
				break
			}
			passed++
			e.debit(fmt.Sprint("debit ", i+1), id, rules, 1)
		}
		if passed != 3 {
			t.Errorf("check-then-debit on 2 per minute passed %d requests, want 3", passed)
		}

		// A debit larger than what is left (100 tokens of 5 left).
		big := e.id("big")
		ten := []limit.Rule{{Algorithm: a, Unit: limit.Minute, Limit: 10}}
		e.debit("debit 5", big, ten, 5)
		d := e.debit("debit 100 with 5 left", big, ten, 100)
		if d.Allowed || d.BindingOutcome().Remaining != 0 {
			t.Errorf("a debit of 100 with 5 left: %s, want denied (charged) with 0 remaining", format(d))
		}
		p := e.one("peek after the big debit", big, ten, 0)
		if p.Allowed {
			t.Fatalf("peek after a debit past the limit: %s, want denied", format(p))
		}
		wait := p.BindingOutcome().Reset
		if wait <= 0 {
			t.Fatalf("denied peek reports reset %v", wait)
		}
		e.wait(wait - us)
		if d := e.one("peek 1µs before the reset", big, ten, 0); d.Allowed {
			t.Errorf("peek 1µs before the reported reset: %s, want denied", format(d))
		}
		e.wait(us)
		if d := e.one("peek at the reset", big, ten, 0); !d.Allowed {
			t.Errorf("peek at the reported reset: %s, want admitted", format(d))
		}
	})
}

// testUnchargedDenialConsumesNothing: without Charge, a cost that does not
// fit still consumes nothing (the default everywhere but quotas).
func (s *suite) testUnchargedDenialConsumesNothing(t *testing.T) {
	s.perAlgorithm(t, func(t *testing.T, e *env, a limit.Algorithm) {
		id, rules := e.id("x"), threePerMinute(a)
		e.one("take 2", id, rules, 2)
		if d := e.one("take 5", id, rules, 5); d.Allowed {
			t.Fatalf("5 with 1 left admitted: %s", format(d))
		}
		if d := e.one("take 1", id, rules, 1); !d.Allowed {
			t.Errorf("the denied 5 consumed quota: %s", format(d))
		}
	})
}

// testLimitChange raises and lowers each algorithm's limit mid-window and
// holds every answer to pkg/limit (the model keeps every state, with its
// Expires, forever). The scenario of the meters is the over-admission a
// store that expires state at the old rate shows: 10/s (burst 10) drained,
// lowered to 1/s while the client is throttled, 1.2 s later a cost of 5
// must still be denied (level ≈ 8.8 of 10).
func (s *suite) testLimitChange(t *testing.T) {
	s.perAlgorithm(t, func(t *testing.T, e *env, a limit.Algorithm) {
		id := e.id("x")
		fast := []limit.Rule{{Algorithm: a, Unit: limit.Second, Limit: 10, Burst: 10}}
		slow := []limit.Rule{{Algorithm: a, Unit: limit.Second, Limit: 1, Burst: 10}}
		raised := []limit.Rule{{Algorithm: a, Unit: limit.Second, Limit: 20, Burst: 20}}
		e.one("take 10 at 10/s", id, fast, 10)
		e.wait(50 * time.Millisecond)
		if d := e.one("lowered to 1/s, throttled", id, slow, 1); d.Allowed && a.IsMeter() {
			t.Errorf("after lowering 10/s → 1/s with the bucket full: %s, want denied", format(d))
		}
		e.wait(1200 * time.Millisecond)
		d := e.one("cost 5, 1.2 s later at 1/s", id, slow, 5)
		if a.IsMeter() && d.Allowed {
			t.Errorf("a lowered rate handed out capacity: %s, want denied (level ≈ 8.8 of 10)", format(d))
		}
		// Raising keeps what is counted and admits the difference.
		e.wait(100 * time.Millisecond)
		e.one("raised, take 1", id, raised, 1)
		e.one("raised, peek", id, raised, 0)
		// Lower again mid-window, then back.
		e.one("lowered, take 1", id, slow, 1)
		e.wait(300 * time.Millisecond)
		e.one("fast, peek", id, fast, 0)
		e.one("slow, peek", id, slow, 0)
		e.wait(2 * time.Second)
		e.one("slow, take 3", id, slow, 3)
		e.wait(20 * time.Second)
		e.one("slow, take 1 later", id, slow, 1)
	})
}

// testSharedStateKeepsSlowestExpiry: two rule sets share a meter's state
// ID with different rates. A read under the fast rate must not make a
// store forget the state before the slow rate has drained it: every backend
// answers as pkg/limit does, whichever rule touched the state last.
func (s *suite) testSharedStateKeepsSlowestExpiry(t *testing.T) {
	for _, a := range []limit.Algorithm{limit.TokenBucket, limit.LeakyBucket, limit.GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			e := s.env(t, base)
			id := e.id("x")
			slow := []limit.Rule{{Algorithm: a, Unit: limit.Minute, Limit: 1, Burst: 5}}
			fast := []limit.Rule{{Algorithm: a, Unit: limit.Minute, Limit: 60, Burst: 5}}
			e.one("slow takes 5", id, slow, 5)
			e.wait(time.Second)
			e.one("fast peeks", id, fast, 0)
			e.wait(10 * time.Second) // drained at the fast rate, not at the slow one
			if d := e.one("slow takes 1", id, slow, 1); d.Allowed {
				t.Errorf("the slow rule, 11 s after taking its whole burst at 1/minute: %s, want denied", format(d))
			}
		})
	}
}

// testHugeCost: one request of a huge cost costs bounded work and memory
// on every algorithm (a sliding log stores one entry per request, not one
// per unit of cost), and is decided, not reported as an error.
func (s *suite) testHugeCost(t *testing.T) {
	const limitMax = 4294967295
	s.perAlgorithm(t, func(t *testing.T, e *env, a limit.Algorithm) {
		ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
		defer cancel()
		e.ctx = ctx
		rules := []limit.Rule{{Algorithm: a, Unit: limit.Hour, Limit: limitMax}}
		id := e.id("x")
		e.expect("1e6", e.one("cost 1e6", id, rules, 1_000_000), true, limitMax-1_000_000, e.hugeReset(a, 1_000_000))
		e.one("cost 4e8", id, rules, 400_000_000)
		e.one("the rest", id, rules, limitMax-401_000_000)
		if d := e.one("one more", id, rules, 1); d.Allowed {
			t.Errorf("one more past the limit: %s", format(d))
		}
		e.debit("charge 1e9 more", id, rules, 1_000_000_000)
		e.wait(time.Second)
		e.one("peek", id, rules, 0)
		e.refund("refund", id, rules, 2_000_000_000)
	})
}

// hugeReset is the reset of the first request of testHugeCost.
func (e *env) hugeReset(a limit.Algorithm, n uint64) time.Duration {
	switch a {
	case limit.FixedWindow:
		return 59*time.Minute + 40*time.Second // base is 12:00:20; the window ends at 13:00
	case limit.SlidingWindow:
		return time.Hour + 59*time.Minute + 40*time.Second // whole two windows after 12:00
	case limit.SlidingLog:
		return time.Hour
	}
	// A meter drains n at 4294967295 per hour.
	r := limit.Rule{Algorithm: a, Unit: limit.Hour, Limit: 4294967295}
	var st limit.State
	d := limit.Decide([]limit.Rule{r}, []*limit.State{&st}, 0, limit.Cost{N: n})
	return d.Outcomes[0].Reset
}

// testOtherStatesBounded: checks that name a new rule each time (a limit
// override with a new unit_multiplier on every request) leave at most
// backend.MaxOtherStates states beside the rules of a check, so an
// ordinary check's work stays bounded; the configured rule keeps its count
// through it all, and the states kept are those that expire first. The
// overrides are sliding windows: a store may keep an epoch-aligned fixed
// window's count apart, in a key of its own that no other check reads and
// that expires with its window, where it costs other checks no work and so
// is not bounded.
func (s *suite) testOtherStatesBounded(t *testing.T) {
	e := s.env(t, base)
	id := e.id("x")
	configured := []limit.Rule{{Unit: limit.Minute, Limit: 1000}}
	e.one("configured takes 1", id, configured, 1)
	for m := range uint32(3 * backend.MaxOtherStates) {
		// Periods from 2 to 49 minutes, then 10 to 57 years: the far
		// ones must be the first forgotten.
		unit, mult := limit.Minute, 2+m
		if m%2 == 1 {
			unit, mult = limit.Year, 10+m
		}
		e.one(fmt.Sprint("override ", m), id, []limit.Rule{{Algorithm: limit.SlidingWindow, Unit: unit, Multiplier: mult, Limit: 5}}, 1)
		e.one(fmt.Sprint("configured ", m), id, configured, 1)
	}
	if d := e.one("configured peek", id, configured, 0); d.BindingOutcome().Remaining != 1000-1-3*backend.MaxOtherStates {
		t.Errorf("the configured rule lost its count: %s", format(d))
	}
	// The earliest override still counts; the first far one is forgotten.
	if d := e.one("override 0 again", id, []limit.Rule{{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Multiplier: 2, Limit: 5}}, 0); d.BindingOutcome().Remaining != 4 {
		t.Errorf("a near override was forgotten: %s", format(d))
	}
	if d := e.one("override 1 again", id, []limit.Rule{{Algorithm: limit.SlidingWindow, Unit: limit.Year, Multiplier: 11, Limit: 5}}, 0); d.BindingOutcome().Remaining != 5 {
		t.Errorf("a far override was kept beyond the bound: %s", format(d))
	}
}

// testLogCheckDoesNotTrim: a check of sliding logs alone does not read the
// other rules' states, so it trims none of them on any backend; the rule
// that expires last keeps its count until a check beside it trims.
func (s *suite) testLogCheckDoesNotTrim(t *testing.T) {
	e := s.env(t, base)
	id := e.id("x")
	for m := range uint32(backend.MaxOtherStates + 1) {
		e.one(fmt.Sprint("override ", m), id, []limit.Rule{{Unit: limit.Minute, Multiplier: 2 + m, Limit: 5}}, 1)
	}
	e.one("log alone", id, []limit.Rule{{Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 5}}, 1)
	last := []limit.Rule{{Unit: limit.Minute, Multiplier: 2 + backend.MaxOtherStates, Limit: 5}}
	if d := e.one("the last override again", id, last, 0); d.BindingOutcome().Remaining != 4 {
		t.Errorf("a check of a sliding log alone trimmed the other states: %s", format(d))
	}
}
