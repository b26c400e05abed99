package backendtest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// This file is the behaviour of backend.TogetherDecider, run on every
// backend that implements it: a request's checks decided as one, where a
// denied check means no check consumes, and no interleaving of
// concurrent requests sees a request partly charged.

// together returns e's backend as a TogetherDecider, or skips the test
// when the backend does not implement it.
func (e *env) together() backend.TogetherDecider {
	e.t.Helper()
	td, ok := e.b.(backend.TogetherDecider)
	if !ok {
		e.t.Skip("the backend does not implement backend.TogetherDecider")
	}
	probe := []backend.Check{{Identity: e.id("probe"), Rules: []limit.Rule{{Unit: limit.Hour, Limit: 1}}}}
	if _, ok := td.DecideTogether(e.ctx, probe); !ok {
		e.t.Skip("the backend declines DecideTogether even for one check (a wrapper around a backend without it)")
	}
	return td
}

// declined skips the test when the backend declined checks that it may
// place apart (a Redis Cluster backend whose checks hash to different
// nodes), and says so.
func (e *env) declined(what string) {
	e.t.Helper()
	e.t.Skipf("%s: DecideTogether declined checks of several identities (a store that places them on different nodes)", what)
}

// decideTogether sends checks to DecideTogether and fails the test on a
// declined call, an error or a wrong number of results.
func (e *env) decideTogether(what string, checks ...backend.Check) []limit.Decision {
	e.t.Helper()
	res, ok := e.together().DecideTogether(e.ctx, checks)
	if !ok {
		e.declined(what)
	}
	return e.decisions(what, "DecideTogether", checks, res)
}

// remaining peeks id's rules with Decide (outside the model) and returns
// the binding rule's Remaining.
func (e *env) remaining(id string, rules []limit.Rule) uint64 {
	e.t.Helper()
	res := e.b.Decide(e.ctx, []backend.Check{{Identity: id, Rules: rules}})
	if len(res) != 1 || res[0].Err != nil {
		e.t.Fatalf("peek %s: %+v", id, res)
	}
	return res[0].BindingOutcome().Remaining
}

func (s *suite) testTogether(t *testing.T) {
	t.Run("Decisions", s.testTogetherDecisions)
	t.Run("NoPartialCharge", s.testTogetherConcurrency)
	t.Run("AskedAgainWhileDenied", s.testTogetherAskedAgain)
}

// testTogetherAskedAgain: a request asked again and again while one of its
// checks stays over its limit (an abusive client; what a cache of denials
// in front of a store answers) is denied each time, check for check as
// pkg/limit decides each alone, and consumes nothing: when every check is
// over, each reports its own denial; when one is, the others report a peek.
func (s *suite) testTogetherAskedAgain(t *testing.T) {
	s.perAlgorithm(t, func(t *testing.T, e *env, alg limit.Algorithm) {
		e.together()
		rules := []limit.Rule{{Algorithm: alg, Unit: limit.Minute, Limit: 2}}
		a, b, c := e.id("a"), e.id("b"), e.id("c")
		e.decide("fill a and b", backend.Check{Identity: a, Rules: rules, Cost: limit.Cost{N: 2}},
			backend.Check{Identity: b, Rules: rules, Cost: limit.Cost{N: 2}})
		both := []backend.Check{{Identity: a, Rules: rules, Cost: limit.Cost{N: 1}}, {Identity: b, Rules: rules, Cost: limit.Cost{N: 1}}}
		withC := []backend.Check{{Identity: a, Rules: rules, Cost: limit.Cost{N: 1}}, {Identity: c, Rules: rules, Cost: limit.Cost{N: 1}}}
		for round := range 4 {
			e.wait(time.Second)
			now := limit.MicrosOf(e.clock.Now())
			for _, req := range [][]backend.Check{both, both, withC, withC} {
				d := e.decideTogether(fmt.Sprintf("round %d", round), req...)
				for i, got := range d {
					asked := req[i]
					if asked.Identity == c {
						asked.Cost.N = 0 // beside a denial it reports a peek
					}
					want := e.model.decide(asked, now)
					if !SameDecision(got, want) || got.Allowed != (asked.Identity == c) {
						t.Errorf("round %d, check %d of %d: got %s, want %s", round, i, len(req), format(got), format(want))
					}
				}
			}
		}
		if got := e.remaining(c, rules); got != 2 {
			t.Errorf("c, asked only beside a denial: %d remaining, want 2 (nothing consumed)", got)
		}
	})
}

// testTogetherDecisions: all admitted → all charged, as Decide would; one
// denied → the others report a peek and consume nothing, except refunds
// and denied charged costs, which keep their effect.
func (s *suite) testTogetherDecisions(t *testing.T) {
	ten := []limit.Rule{{Unit: limit.Hour, Limit: 10}}
	one := []limit.Rule{{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 1}}
	logs := []limit.Rule{{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 5}}
	e := s.env(t, base)
	e.together()
	a, b, c := e.id("a"), e.id("b"), e.id("c")

	d := e.decideTogether("all fit", backend.Check{Identity: a, Rules: ten, Cost: limit.Cost{N: 2}},
		backend.Check{Identity: b, Rules: one, Cost: limit.Cost{N: 1}}, backend.Check{Identity: c, Rules: logs, Cost: limit.Cost{N: 1}})
	for i, want := range []uint64{8, 0, 4} {
		if !d[i].Allowed || d[i].BindingOutcome().Remaining != want {
			t.Errorf("all fit: check %d %s, want admitted with %d remaining", i, format(d[i]), want)
		}
	}

	d = e.decideTogether("b is over", backend.Check{Identity: a, Rules: ten, Cost: limit.Cost{N: 2}},
		backend.Check{Identity: b, Rules: one, Cost: limit.Cost{N: 1}}, backend.Check{Identity: c, Rules: logs, Cost: limit.Cost{N: 1}})
	if !d[0].Allowed || d[0].BindingOutcome().Remaining != 8 || !d[2].Allowed || d[2].BindingOutcome().Remaining != 4 {
		t.Errorf("b is over: the others %s and %s, want peeks (admitted, 8 and 4 remaining)", format(d[0]), format(d[2]))
	}
	if d[1].Allowed {
		t.Errorf("b is over: b %s, want denied", format(d[1]))
	}
	if got := e.remaining(a, ten); got != 8 {
		t.Errorf("a after a denied request: %d remaining, want 8 (charged though b was over)", got)
	}
	if got := e.remaining(c, logs); got != 4 {
		t.Errorf("c after a denied request: %d remaining, want 4 (charged though b was over)", got)
	}

	// The same identity twice: the second sees the first's charge.
	d = e.decideTogether("twice", backend.Check{Identity: a, Rules: ten, Cost: limit.Cost{N: 5}},
		backend.Check{Identity: a, Rules: ten, Cost: limit.Cost{N: 5}})
	if !d[0].Allowed || d[1].Allowed {
		t.Errorf("a twice 5 with 8 left: %s, %s, want the first admitted (a peek), the second denied", format(d[0]), format(d[1]))
	}
	if got := e.remaining(a, ten); got != 8 {
		t.Errorf("a after a request denied by its own second check: %d remaining, want 8", got)
	}

	// A refund beside a denial is applied; a denied charged cost is
	// charged; an admitted one is not.
	d = e.decideTogether("refund and charge", backend.Check{Identity: a, Rules: ten, Cost: limit.Cost{N: 3, Refund: true}},
		backend.Check{Identity: c, Rules: logs, Cost: limit.Cost{N: 1, Charge: true}},
		backend.Check{Identity: b, Rules: one, Cost: limit.Cost{N: 1}})
	if !d[0].Allowed || d[1].Allowed != true || d[2].Allowed {
		t.Errorf("refund and charge: %s / %s / %s, want admitted, admitted, denied", format(d[0]), format(d[1]), format(d[2]))
	}
	if got := e.remaining(a, ten); got != 10 {
		t.Errorf("a after a refund of 3 beside a denial: %d remaining, want 10", got)
	}
	if got := e.remaining(c, logs); got != 4 {
		t.Errorf("c after an admitted charged cost beside a denial: %d remaining, want 4 (not charged)", got)
	}
	d = e.decideTogether("denied charge", backend.Check{Identity: c, Rules: logs, Cost: limit.Cost{N: 6, Charge: true}},
		backend.Check{Identity: a, Rules: ten, Cost: limit.Cost{N: 1}})
	if d[0].Allowed || !d[1].Allowed || d[1].BindingOutcome().Remaining != 10 {
		t.Errorf("denied charge: %s / %s, want denied, then a peek with 10 remaining", format(d[0]), format(d[1]))
	}
	if got := e.remaining(c, logs); got != 0 {
		t.Errorf("c after a denied charged cost: %d remaining, want 0 (a charged cost is taken even when denied)", got)
	}
	if got := e.remaining(a, ten); got != 10 {
		t.Errorf("a beside a denied charged cost: %d remaining, want 10", got)
	}
}

// testTogetherConcurrency: requests for a and b (quota 20 each, 20 of
// them: all must be admitted) race with many requests for b and c, where c
// is exhausted. If any interleaving showed a b-and-c request's charge of b,
// even for a moment, an a-and-b request would be denied by it; at the end
// a and b must hold exactly the 20 admitted requests.
func (s *suite) testTogetherConcurrency(t *testing.T) {
	const quota, noise, workers = 20, 400, 8
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.TokenBucket, limit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			e := s.env(t, base)
			td := e.together()
			rules := []limit.Rule{{Algorithm: alg, Unit: limit.Hour, Limit: quota}}
			a, b, c := e.id("a"), e.id("b"), e.id("c")
			cRules := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
			e.one("exhaust c", c, cRules, 1)
			if _, ok := td.DecideTogether(e.ctx, []backend.Check{{Identity: a, Rules: rules}, {Identity: b, Rules: rules}, {Identity: c, Rules: cRules}}); !ok {
				e.declined("a, b and c")
			}

			jobs := make(chan []backend.Check, quota+noise)
			for i := range quota + noise {
				if i%((quota+noise)/quota) == 0 && i/((quota+noise)/quota) < quota {
					jobs <- []backend.Check{{Identity: a, Rules: rules, Cost: limit.Cost{N: 1}}, {Identity: b, Rules: rules, Cost: limit.Cost{N: 1}}}
				} else if i%2 == 0 {
					jobs <- []backend.Check{{Identity: b, Rules: rules, Cost: limit.Cost{N: 1}}, {Identity: c, Rules: cRules, Cost: limit.Cost{N: 1}}}
				} else {
					jobs <- []backend.Check{{Identity: c, Rules: cRules, Cost: limit.Cost{N: 1}}, {Identity: b, Rules: rules, Cost: limit.Cost{N: 1}}}
				}
			}
			close(jobs)
			var admitted, sent atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for checks := range jobs {
						res, ok := td.DecideTogether(e.ctx, checks)
						if !ok || len(res) != len(checks) {
							t.Errorf("DecideTogether: ok=%v, %d results for %d checks", ok, len(res), len(checks))
							return
						}
						all := true
						for _, r := range res {
							if r.Err != nil {
								t.Errorf("DecideTogether: %v", r.Err)
								return
							}
							all = all && r.Allowed
						}
						if checks[0].Identity == a || checks[1].Identity == a {
							sent.Add(1)
							if all {
								admitted.Add(1)
							}
						} else if all {
							t.Errorf("a request with the exhausted c was admitted")
						}
					}
				}()
			}
			wg.Wait()
			if sent.Load() != quota || admitted.Load() != quota {
				t.Errorf("%d of %d requests for a and b admitted, want all %d (another request's passing charge of b denied one)",
					admitted.Load(), sent.Load(), quota)
			}
			if ra, rb := e.remaining(a, rules), e.remaining(b, rules); ra != 0 || rb != 0 {
				t.Errorf("after the race: a %d and b %d remaining, want 0 and 0 (a request was partly charged)", ra, rb)
			}
		})
	}
}
