package backendtest

import (
	"testing"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// reset resets rules of id on the backend and in the model.
func (e *env) reset(what, id string, rules []limit.Rule) {
	e.t.Helper()
	r, ok := e.b.(backend.Resetter)
	if !ok {
		e.t.Skipf("%T does not implement backend.Resetter (optional)", e.b)
	}
	if err := r.Reset(e.ctx, id, rules); err != nil {
		e.t.Fatalf("%s: Reset: %v", what, err)
	}
	for _, rule := range rules {
		delete(e.model[id], rule.ID())
	}
}

// testReset: a Resetter forgets exactly the state of the rules it is given,
// for one identity: a client over its limit is admitted again with the
// whole limit; another rule of the same identity, and the same rule of
// another identity, keep their counts; resetting an unknown identity is
// not an error.
func (s *suite) testReset(t *testing.T) {
	s.perAlgorithm(t, func(t *testing.T, e *env, a limit.Algorithm) {
		id, other := e.id("x"), e.id("other")
		rules := threePerMinute(a)
		e.one("take 3", id, rules, 3)
		e.one("other takes 2", other, rules, 2)
		e.expect("over before reset", e.one("over", id, rules, 1), false, 0, e.overReset(a))
		e.reset("reset", id, rules)
		e.expect("peek after reset", e.one("peek", id, rules, 0), true, 3, e.wholeReset(a))
		// e.one compares every outcome, reset included, with the model,
		// which forgot the state too.
		if d := e.one("take 1", id, rules, 1); !d.Allowed || d.BindingOutcome().Remaining != 2 {
			t.Errorf("after reset: %s, want admitted with 2 remaining", format(d))
		}
		if d := e.one("other unchanged", other, rules, 0); d.BindingOutcome().Remaining != 1 {
			t.Errorf("another identity's state changed: remaining %d, want 1", d.BindingOutcome().Remaining)
		}
		e.reset("reset unknown", e.id("never"), rules)
	})
	t.Run("OneRule", func(t *testing.T) {
		e := s.env(t, base)
		id := e.id("x")
		window := limit.Rule{Name: "window", Algorithm: limit.FixedWindow, Unit: limit.Minute, Limit: 3}
		log := limit.Rule{Name: "log", Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 10}
		bucket := limit.Rule{Name: "bucket", Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 10}
		all := []limit.Rule{window, log, bucket}
		e.one("take 3", id, all, 3)
		e.expect("window binds", e.one("over", id, all, 1), false, 0, e.overReset(limit.FixedWindow))
		e.reset("reset the window", id, []limit.Rule{window})
		d := e.one("peek", id, all, 0)
		for i, want := range []uint64{3, 7, 7} {
			if got := d.Outcomes[i].Remaining; got != want {
				t.Errorf("after resetting only %s: %s remaining %d, want %d", window.Name, all[i].Name, got, want)
			}
		}
		e.reset("reset the log", id, []limit.Rule{log})
		d = e.one("peek", id, all, 0)
		for i, want := range []uint64{3, 10, 7} {
			if got := d.Outcomes[i].Remaining; got != want {
				t.Errorf("after resetting %s too: %s remaining %d, want %d", log.Name, all[i].Name, got, want)
			}
		}
	})
}
