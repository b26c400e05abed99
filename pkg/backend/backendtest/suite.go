// Package backendtest is the behaviour every backend.Backend must show,
// written once and run against each backend: the memory backend, Redis
// standalone and Redis Cluster each call Run from their own tests.
//
// The suite drives a fake clock that it passes to the Factory; a backend
// under test must decide at that clock's instants (the Redis backend takes
// them as a script argument in tests instead of reading TIME). Every result
// is compared, field by field, with what pkg/limit's pure functions decide
// on the same requests (a model of the store), and the main scenarios also
// spell out the expected numbers by hand.
//
// What the suite assumes of a backend, so it can run against stores whose
// state outlives one subtest (a Redis server):
//
//   - Identities are unique per subtest and per Run (derived from t.Name()
//     and a random suffix), so leftover state never meets a later subtest.
//   - Each subtest has its own clock, which only moves forward. Instants are
//     in the 2030s, so a store that expires keys at absolute instants never
//     sees them in the past.
//   - A store must not lose state before limit.Rule.Expiry says it may.
//     Under a fake clock a store that sets relative TTLs from it (Redis
//     PEXPIRE) must add slack, since the fake clock does not advance with
//     real time: a state that expires 1µs of fake time from now may be read
//     a second of real time later.
//
// The package knows nothing of any particular backend.
package backendtest

import (
	"cmp"
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/identity"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// Factory builds a fresh backend whose clock is now (a fake clock the
// suite controls). The suite closes the backend when the subtest ends.
type Factory func(t *testing.T, now func() time.Time) backend.Backend

// Run runs every behavioural test against backends built by f.
func Run(t *testing.T, f Factory) {
	s := &suite{factory: f, run: fmt.Sprintf("%016x", rand.Uint64())}
	t.Run("Algorithms", s.testAlgorithms)
	t.Run("Refund", s.testRefund)
	t.Run("Peek", s.testPeek)
	t.Run("CostOverLimit", s.testCostOverLimit)
	t.Run("FixedWindowRollover", s.testFixedWindowRollover)
	t.Run("SlidingWindowRollover", s.testSlidingWindowRollover)
	t.Run("AllOrNothing", s.testAllOrNothing)
	t.Run("Binding", s.testBinding)
	t.Run("Batch", s.testBatch)
	t.Run("EmptyRules", s.testEmptyRules)
	t.Run("CalendarWindow", s.testCalendarWindow)
	t.Run("RaiseLimitKeepsUsage", s.testRaiseLimit)
	t.Run("LimitChange", s.testLimitChange)
	t.Run("SharedStateKeepsSlowestExpiry", s.testSharedStateKeepsSlowestExpiry)
	t.Run("CheckThenDebit", s.testCheckThenDebit)
	t.Run("UnchargedDenialConsumesNothing", s.testUnchargedDenialConsumesNothing)
	t.Run("HugeCost", s.testHugeCost)
	t.Run("OtherStatesBounded", s.testOtherStatesBounded)
	t.Run("LogCheckDoesNotTrim", s.testLogCheckDoesNotTrim)
	t.Run("ChangeAlgorithmStartsFresh", s.testChangeAlgorithm)
	t.Run("MeterKeepsLevel", s.testMeterKeepsLevel)
	t.Run("IdentitiesDoNotCollide", s.testIdentities)
	t.Run("Concurrency", s.testConcurrency)
	t.Run("Together", s.testTogether)
	t.Run("Model", s.testModel)
	t.Run("Ping", s.testPing)
	t.Run("Reset", s.testReset)
}

type suite struct {
	factory Factory
	run     string // random, once per Run: keeps identities unique across runs
}

// env is one subtest's backend, clock, namespace and model.
type env struct {
	t     *testing.T
	clock *testenv.Clock // only moves forward
	b     backend.Backend
	ns    string
	model model
	ctx   context.Context // bounds every call; cancelled when the subtest ends
}

// base is the default start instant: 20 s into a minute, in 2030.
var base = time.Date(2030, 5, 1, 12, 0, 20, 0, time.UTC)

func (s *suite) env(t *testing.T, start time.Time) *env {
	t.Helper()
	c := testenv.NewClock(start)
	b := s.factory(t, c.Now)
	if b == nil {
		t.Fatal("factory returned a nil backend")
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return &env{t: t, clock: c, b: b, ns: s.run + "/" + t.Name(), model: model{}, ctx: ctx}
}

// wait moves the clock forward by d.
func (e *env) wait(d time.Duration) {
	e.t.Helper()
	if d < 0 {
		e.t.Fatalf("the clock only moves forward (wait %v)", d)
	}
	e.clock.Advance(d)
}

// id returns an identity unique to this subtest and name.
func (e *env) id(name string) string {
	return identity.Encode("backendtest", []identity.Entry{{Key: "ns", Value: e.ns}, {Key: "id", Value: name}})
}

// decide sends checks in one Decide call at the clock's instant, fails the
// test on an error or a wrong number of results, compares every Decision
// with the model's, and returns the Decisions.
func (e *env) decide(what string, checks ...backend.Check) []limit.Decision {
	e.t.Helper()
	now := e.clock.Now()
	out := e.decisions(what, "Decide", checks, e.b.Decide(e.ctx, checks))
	for i, d := range out {
		want := e.model.decide(checks[i], limit.MicrosOf(now))
		if !SameDecision(d, want) {
			e.t.Errorf("%s at %s: check %d (%s, cost %+v):\n  got  %s\n  want %s",
				what, now.Format(time.RFC3339Nano), i, describe(checks[i].Rules), checks[i].Cost, format(d), format(want))
		}
	}
	return out
}

// decisions fails the test when call (the method that was called) returned
// a wrong number of results or an error for any check, and returns the
// results' Decisions.
func (e *env) decisions(what, call string, checks []backend.Check, res []backend.Result) []limit.Decision {
	e.t.Helper()
	if len(res) != len(checks) {
		e.t.Fatalf("%s: %s returned %d results for %d checks", what, call, len(res), len(checks))
	}
	out := make([]limit.Decision, len(res))
	for i, r := range res {
		if r.Err != nil {
			e.t.Fatalf("%s: check %d: %v", what, i, r.Err)
		}
		out[i] = r.Decision
	}
	return out
}

// one decides a single check.
func (e *env) one(what, id string, rules []limit.Rule, n uint64) limit.Decision {
	e.t.Helper()
	return e.decide(what, backend.Check{Identity: id, Rules: rules, Cost: limit.Cost{N: n}})[0]
}

// refund decides a single refund.
func (e *env) refund(what, id string, rules []limit.Rule, n uint64) limit.Decision {
	e.t.Helper()
	return e.decide(what, backend.Check{Identity: id, Rules: rules, Cost: limit.Cost{N: n, Refund: true}})[0]
}

// expect checks the binding outcome of d against hand-computed values.
func (e *env) expect(what string, d limit.Decision, allowed bool, remaining uint64, reset time.Duration) {
	e.t.Helper()
	o := d.BindingOutcome()
	if d.Allowed != allowed || o.Allowed != allowed || o.Remaining != remaining || o.Reset != reset {
		e.t.Errorf("%s: got allowed=%v remaining=%d reset=%v, want allowed=%v remaining=%d reset=%v",
			what, d.Allowed, o.Remaining, o.Reset, allowed, remaining, reset)
	}
}

// SameDecision reports whether a and b are the same decision: the same
// Allowed and Binding, and equal Outcomes, rule for rule. Tests of a
// backend that wraps another (a cache in front of a store) compare with it.
func SameDecision(a, b limit.Decision) bool {
	if a.Allowed != b.Allowed || a.Binding != b.Binding || len(a.Outcomes) != len(b.Outcomes) {
		return false
	}
	for i := range a.Outcomes {
		if a.Outcomes[i] != b.Outcomes[i] {
			return false
		}
	}
	return true
}

func format(d limit.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "allowed=%v binding=%d", d.Allowed, d.Binding)
	for i, o := range d.Outcomes {
		fmt.Fprintf(&b, " [%d: allowed=%v remaining=%d reset=%v]", i, o.Allowed, o.Remaining, o.Reset)
	}
	return b.String()
}

func describe(rules []limit.Rule) string {
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = r.String()
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// model is the reference store: pkg/limit's functions on plain maps, and
// backend.MaxOtherStates.
type model map[string]map[string]*limit.State // identity → rule ID → state

func (m model) decide(c backend.Check, now limit.Micros) limit.Decision {
	byRule := m[c.Identity]
	if byRule == nil {
		byRule = make(map[string]*limit.State)
		m[c.Identity] = byRule
	}
	states := make([]*limit.State, len(c.Rules))
	named := make(map[string]bool, len(c.Rules))
	for i, r := range c.Rules {
		id := r.ID()
		named[id] = true
		st := byRule[id]
		if st == nil {
			st = &limit.State{}
			byRule[id] = st
		}
		states[i] = st
	}
	d := limit.Decide(c.Rules, states, now, c.Cost)
	// Forget the live states of other rules beyond MaxOtherStates: those
	// that expire last, ties by the larger ID.
	var others []string
	for id, st := range byRule {
		if !named[id] && st.Expires > now && !strings.HasPrefix(id, "sl.") { // a log keeps its own key
			others = append(others, id)
		}
	}
	if len(others) > backend.MaxOtherStates && backend.CountsBeside(c.Rules) {
		slices.SortFunc(others, func(a, b string) int {
			if c := cmp.Compare(byRule[a].Expires, byRule[b].Expires); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		for _, id := range others[backend.MaxOtherStates:] {
			delete(byRule, id)
		}
	}
	return d
}

// algorithms lists every algorithm, for per-algorithm subtests.
var algorithms = []limit.Algorithm{limit.FixedWindow, limit.SlidingLog, limit.SlidingWindow, limit.TokenBucket, limit.LeakyBucket, limit.GCRA}

// perAlgorithm runs test once per algorithm, each as a subtest named after
// the algorithm with its own env starting at base.
func (s *suite) perAlgorithm(t *testing.T, test func(t *testing.T, e *env, a limit.Algorithm)) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) { test(t, s.env(t, base), a) })
	}
}

// exact lists the algorithms that admit exactly Limit at one instant.
var exact = []limit.Algorithm{limit.FixedWindow, limit.SlidingLog, limit.TokenBucket, limit.LeakyBucket, limit.GCRA}

func (s *suite) testPing(t *testing.T) {
	e := s.env(t, base)
	if err := e.b.Ping(e.ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}
