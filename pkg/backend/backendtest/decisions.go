package backendtest

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/identity"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// mixed is one rule of every algorithm; the token bucket binds first.
var mixed = []limit.Rule{
	{Name: "fixed", Unit: limit.Minute, Limit: 10},
	{Name: "bucket", Algorithm: limit.TokenBucket, Unit: limit.Minute, Limit: 2},
	{Name: "log", Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 5},
	{Name: "sliding", Algorithm: limit.SlidingWindow, Unit: limit.Hour, Limit: 10},
	{Name: "gcra", Algorithm: limit.GCRA, Unit: limit.Hour, Limit: 100, Burst: 50},
	{Name: "leaky", Algorithm: limit.LeakyBucket, Unit: limit.Second, Multiplier: 30, Limit: 20},
}

// testAllOrNothing: a denial by one rule consumes nothing in any rule.
func (s *suite) testAllOrNothing(t *testing.T) {
	e := s.env(t, base)
	id := e.id("x")
	for i := range 2 {
		if d := e.one("take", id, mixed, 1); !d.Allowed {
			t.Fatalf("request %d: %s, want admitted", i+1, format(d))
		}
	}
	for _, n := range []uint64{1, 3} {
		d := e.one("denied by the bucket", id, mixed, n)
		if d.Allowed || d.Binding != 1 {
			t.Fatalf("cost %d: %s, want denied with the bucket (1) binding", n, format(d))
		}
	}
	// Peek each rule alone: each holds exactly the two admitted requests.
	want := []uint64{8, 0, 3, 8, 48, 18}
	for i, r := range mixed {
		d := e.one("peek "+r.Name, id, []limit.Rule{r}, 0)
		if got := d.BindingOutcome().Remaining; got != want[i] {
			t.Errorf("rule %s after a denied request: remaining %d, want %d (a denial consumed)", r.Name, got, want[i])
		}
	}
	// The same holds when the denying rule comes first or last.
	reordered := append([]limit.Rule{mixed[1]}, mixed[2:]...)
	reordered = append(reordered, mixed[0])
	if d := e.one("bucket first", id, reordered, 1); d.Allowed || d.Binding != 0 {
		t.Errorf("bucket first: %s, want denied with binding 0", format(d))
	}
	e.wait(30 * time.Second) // the bucket refills 1
	if d := e.one("after refill", id, mixed, 1); !d.Allowed {
		t.Errorf("after the bucket refilled: %s, want admitted", format(d))
	}
}

func (s *suite) testBinding(t *testing.T) {
	tests := []struct {
		name    string
		rules   []limit.Rule
		before  uint64 // taken beforehand with the same rules
		n       uint64
		allowed bool
		binding int
	}{
		{"least remaining", []limit.Rule{
			{Unit: limit.Minute, Limit: 10},
			{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 3},
			{Algorithm: limit.TokenBucket, Unit: limit.Minute, Limit: 5},
		}, 0, 1, true, 1},
		{"tie: the longest reset", []limit.Rule{
			{Unit: limit.Minute, Limit: 3},
			{Unit: limit.Hour, Limit: 3},
			{Unit: limit.Second, Limit: 3},
		}, 0, 1, true, 1},
		{"tie on both: the first", []limit.Rule{
			{Name: "a", Unit: limit.Minute, Limit: 3},
			{Name: "b", Algorithm: limit.SlidingLog, Unit: limit.Second, Multiplier: 40, Limit: 3},
		}, 0, 1, true, 0},
		{"denied: the denied rule with the longest reset", []limit.Rule{
			{Unit: limit.Second, Limit: 1},
			{Unit: limit.Minute, Limit: 10},
			{Unit: limit.Hour, Limit: 1},
			{Algorithm: limit.GCRA, Unit: limit.Minute, Limit: 1},
		}, 1, 1, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := s.env(t, base)
			id := e.id("x")
			if tt.before > 0 {
				e.one("before", id, tt.rules, tt.before)
			}
			d := e.one("check", id, tt.rules, tt.n)
			if d.Allowed != tt.allowed || d.Binding != tt.binding {
				t.Errorf("got %s, want allowed=%v binding=%d", format(d), tt.allowed, tt.binding)
			}
		})
	}
}

// testBatch: several checks in one Decide call are decided independently.
func (s *suite) testBatch(t *testing.T) {
	e := s.env(t, base)
	rules := threePerMinute(limit.FixedWindow)
	ds := e.decide("batch",
		backend.Check{Identity: e.id("a"), Rules: rules, Cost: limit.Cost{N: 1}},
		backend.Check{Identity: e.id("b"), Rules: rules, Cost: limit.Cost{N: 2}},
		backend.Check{Identity: e.id("c")},
		backend.Check{Identity: e.id("d"), Rules: rules, Cost: limit.Cost{N: 0}},
		backend.Check{Identity: e.id("e"), Rules: rules, Cost: limit.Cost{N: 4}},
		backend.Check{Identity: e.id("f"), Rules: mixed, Cost: limit.Cost{N: 1}},
	)
	wantRemaining := []uint64{2, 1, 0, 3, 3}
	wantAllowed := []bool{true, true, true, true, false}
	for i, want := range wantRemaining {
		d := ds[i]
		if d.Allowed != wantAllowed[i] || d.BindingOutcome().Remaining != want {
			t.Errorf("check %d: %s, want allowed=%v remaining=%d", i, format(d), wantAllowed[i], want)
		}
	}
	if ds[2].Binding != -1 || len(ds[2].Outcomes) != 0 {
		t.Errorf("check without rules: %s, want binding -1 and no outcomes", format(ds[2]))
	}
	if len(ds[5].Outcomes) != len(mixed) {
		t.Errorf("check with %d rules got %d outcomes", len(mixed), len(ds[5].Outcomes))
	}

	// Two checks of one identity in one call: each is atomic, so exactly
	// one of two requests for a quota of 1 is admitted, whatever the order.
	one := []limit.Rule{{Unit: limit.Minute, Limit: 1}}
	id := e.id("same")
	res := e.b.Decide(e.ctx, []backend.Check{
		{Identity: id, Rules: one, Cost: limit.Cost{N: 1}},
		{Identity: id, Rules: one, Cost: limit.Cost{N: 1}},
	})
	if len(res) != 2 || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("same identity twice: %+v", res)
	}
	if res[0].Allowed == res[1].Allowed {
		t.Errorf("same identity twice with a quota of 1: allowed %v and %v, want exactly one", res[0].Allowed, res[1].Allowed)
	}

	// An empty batch gets an empty answer.
	if res := e.b.Decide(e.ctx, nil); len(res) != 0 {
		t.Errorf("Decide(nil) = %d results", len(res))
	}
}

func (s *suite) testEmptyRules(t *testing.T) {
	e := s.env(t, base)
	for _, c := range []backend.Check{
		{Identity: e.id("nil")},
		{Identity: e.id("empty"), Rules: []limit.Rule{}, Cost: limit.Cost{N: 5}},
		{Identity: e.id("refund"), Cost: limit.Cost{N: 5, Refund: true}},
	} {
		d := e.decide("no rules", c)[0]
		if !d.Allowed || d.Binding != -1 || len(d.Outcomes) != 0 {
			t.Errorf("check without rules (cost %+v): %s, want allowed, binding -1, no outcomes", c.Cost, format(d))
		}
	}
}

func (s *suite) testCalendarWindow(t *testing.T) {
	load := func(t *testing.T, name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatalf("load %s: %v", name, err)
		}
		return loc
	}
	t.Run("shanghai day", func(t *testing.T) {
		loc := load(t, "Asia/Shanghai")
		e := s.env(t, time.Date(2030, 5, 1, 23, 59, 59, 500_000_000, loc))
		id, rules := e.id("x"), []limit.Rule{{Unit: limit.Day, Limit: 2, Location: loc}}
		e.expect("take 2", e.one("take", id, rules, 2), true, 0, 500*time.Millisecond)
		e.expect("over", e.one("over", id, rules, 1), false, 0, 500*time.Millisecond)
		e.wait(500 * time.Millisecond)
		e.expect("local midnight", e.one("take", id, rules, 1), true, 1, 24*time.Hour)
	})
	t.Run("new york 23h day", func(t *testing.T) {
		loc := load(t, "America/New_York")
		e := s.env(t, time.Date(2030, 3, 10, 0, 0, 0, 0, loc)) // DST starts at 02:00
		id, rules := e.id("x"), []limit.Rule{{Unit: limit.Day, Limit: 1, Location: loc}}
		e.expect("take", e.one("take", id, rules, 1), true, 0, 23*time.Hour)
		e.wait(23*time.Hour - us)
		e.expect("last µs", e.one("over", id, rules, 1), false, 0, us)
		e.wait(us)
		e.expect("next day", e.one("take", id, rules, 1), true, 0, 24*time.Hour)
	})
	t.Run("berlin month", func(t *testing.T) {
		loc := load(t, "Europe/Berlin")
		e := s.env(t, time.Date(2030, 2, 28, 23, 0, 0, 0, loc))
		id, rules := e.id("x"), []limit.Rule{{Unit: limit.Month, Limit: 1, Location: loc}}
		e.expect("take", e.one("take", id, rules, 1), true, 0, time.Hour)
		e.expect("over", e.one("over", id, rules, 1), false, 0, time.Hour)
		e.wait(time.Hour)
		// March 2030 has 31 days, one of them 23 hours long.
		e.expect("march", e.one("take", id, rules, 1), true, 0, 31*24*time.Hour-time.Hour)
	})
	t.Run("kathmandu hour", func(t *testing.T) {
		loc := load(t, "Asia/Kathmandu")
		e := s.env(t, time.Date(2030, 6, 1, 10, 30, 0, 0, loc))
		id, rules := e.id("x"), []limit.Rule{{Unit: limit.Hour, Limit: 1, Location: loc}}
		e.expect("take", e.one("take", id, rules, 1), true, 0, 30*time.Minute)
		e.wait(30 * time.Minute)
		e.expect("local hour", e.one("take", id, rules, 1), true, 0, time.Hour)
	})
}

// testRaiseLimit: the state key does not include the limit, so raising a
// limit keeps the usage counted.
func (s *suite) testRaiseLimit(t *testing.T) {
	s.perAlgorithm(t, func(t *testing.T, e *env, a limit.Algorithm) {
		id, rules := e.id("x"), threePerMinute(a)
		e.one("take 3", id, rules, 3)
		raised := []limit.Rule{rules[0]}
		raised[0].Limit = 5
		if d := e.one("peek raised", id, raised, 0); d.BindingOutcome().Remaining != 2 {
			t.Errorf("after raising 3 → 5 with 3 used: %s, want 2 remaining", format(d))
		}
		// Full again at base, under the raised limit: the reset of a full
		// rule of threePerMinute.
		e.expect("take 2 more", e.one("take", id, raised, 2), true, 0, e.firstReset(a))
		if d := e.one("over", id, raised, 1); d.Allowed {
			t.Errorf("a sixth request under a limit of 5: %s", format(d))
		}
	})
}

// testChangeAlgorithm: a window rule whose algorithm or period changes
// starts afresh; so does a meter after a window rule (a meter's state is
// its own); going back finds the original state.
func (s *suite) testChangeAlgorithm(t *testing.T) {
	e := s.env(t, base)
	id := e.id("x")
	fixed := threePerMinute(limit.FixedWindow)
	e.one("take 3", id, fixed, 3)
	for _, r := range []limit.Rule{
		{Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 3},
		{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 3},
		{Algorithm: limit.TokenBucket, Unit: limit.Minute, Limit: 3},
		{Unit: limit.Second, Multiplier: 60, Limit: 3}, // same length, but another unit: another ID
		{Unit: limit.Hour, Limit: 3},
	} {
		if d := e.one("changed", id, []limit.Rule{r}, 1); !d.Allowed || d.BindingOutcome().Remaining != 2 {
			t.Errorf("%s after a full fixed window: %s, want a fresh state (2 remaining)", r, format(d))
		}
	}
	if d := e.one("back to fixed", id, fixed, 1); d.Allowed {
		t.Errorf("back to the original rule: %s, want its state kept (denied)", format(d))
	}
}

// testMeterKeepsLevel: a meter's level (cost taken, draining at the
// rule's rate) is kept whatever changes in the rule but the meter itself:
// its unit at the same rate (10 per second → 600 per minute: nothing
// changes), its multiplier, its meter algorithm, its burst and its limit
// (then drained at the new rate). A named meter is keyed by its name, an
// unnamed one by its slot: another name or slot is another meter.
func (s *suite) testMeterKeepsLevel(t *testing.T) {
	e := s.env(t, base)
	id := e.id("x")
	meter := func(a limit.Algorithm, u limit.Unit, mult uint32, l, burst uint64) []limit.Rule {
		return []limit.Rule{{Algorithm: a, Unit: u, Multiplier: mult, Limit: l, Burst: burst}}
	}
	e.expect("take 25 of 30", e.one("take", id, meter(limit.TokenBucket, limit.Second, 0, 10, 30), 25), true, 5, 2500*time.Millisecond)
	for _, c := range []struct {
		what      string
		rules     []limit.Rule
		remaining uint64
		reset     time.Duration // until the level drains to 0
	}{
		{"600 per minute, the same rate", meter(limit.TokenBucket, limit.Minute, 0, 600, 30), 5, 2500 * time.Millisecond},
		{"20 per 2 seconds, the same rate", meter(limit.TokenBucket, limit.Second, 2, 20, 30), 5, 2500 * time.Millisecond},
		{"a leaky bucket", meter(limit.LeakyBucket, limit.Second, 0, 10, 30), 5, 2500 * time.Millisecond},
		{"gcra", meter(limit.GCRA, limit.Minute, 0, 600, 30), 5, 2500 * time.Millisecond},
		{"a burst of 40", meter(limit.TokenBucket, limit.Second, 0, 10, 40), 15, 2500 * time.Millisecond},
		{"20 per second: drains twice as fast", meter(limit.TokenBucket, limit.Second, 0, 20, 30), 5, 1250 * time.Millisecond},
		{"5 per minute: drains slowly", meter(limit.TokenBucket, limit.Minute, 0, 5, 30), 5, 300 * time.Second},
	} {
		e.expect(c.what, e.one(c.what, id, c.rules, 0), true, c.remaining, c.reset)
	}
	// Half a second at 600 per minute drains 5: the level is 20.
	e.wait(500 * time.Millisecond)
	e.expect("drained at the new rate", e.one("peek", id, meter(limit.GCRA, limit.Minute, 0, 600, 30), 0), true, 10, 2*time.Second)

	// Other meters of the descriptor: a named one, a renamed one, a second
	// unnamed one (slot 1), each starting empty; the first keeps its level.
	named := meter(limit.TokenBucket, limit.Second, 0, 10, 30)
	named[0].Name = "burst"
	renamed := meter(limit.TokenBucket, limit.Second, 0, 10, 30)
	renamed[0].Name = "burst2"
	second := meter(limit.TokenBucket, limit.Second, 0, 10, 30)
	second[0].Slot = 1
	for _, c := range []struct {
		what  string
		rules []limit.Rule
	}{{"a named meter", named}, {"a renamed meter", renamed}, {"a second unnamed meter", second}} {
		e.expect(c.what, e.one(c.what, id, c.rules, 0), true, 30, 0)
	}
	e.expect("the first meter again", e.one("peek", id, meter(limit.TokenBucket, limit.Second, 0, 10, 30), 0), true, 10, 2*time.Second)
	e.one("take 30 of the named meter", id, named, 30)
	named[0].Unit, named[0].Limit = limit.Hour, 36000 // the same rate
	e.expect("the named meter per hour", e.one("peek", id, named, 0), true, 0, 3*time.Second)
}

// testIdentities: identities built from values full of separators, braces,
// newlines and 64 KiB strings each get their own state.
func (s *suite) testIdentities(t *testing.T) {
	e := s.env(t, base)
	long := strings.Repeat("v", 64<<10)
	descriptors := [][]identity.Entry{
		{{Key: "a", Value: "b_c"}},
		{{Key: "a_b", Value: "c"}},
		{{Key: "k", Value: "a|b=c"}},
		{{Key: "k", Value: "a"}, {Key: "b", Value: "c"}},
		{{Key: "k", Value: "{tag}"}},
		{{Key: "k", Value: "}{"}},
		{{Key: "k", Value: "line\nbreak"}},
		{{Key: "k", Value: "line"}, {Key: "break", Value: ""}},
		{{Key: "k", Value: "%7B"}},
		{{Key: "k", Value: ""}},
		{{Key: "k"}, {Key: "", Value: ""}},
		{{Key: "k", Value: long}},
		{{Key: "k", Value: long + "w"}},
		{{Key: "k", Value: "\x00\xff"}},
	}
	rules := []limit.Rule{{Unit: limit.Minute, Limit: 1}}
	seen := make(map[string]int)
	ids := make([]string, len(descriptors))
	for i, entries := range descriptors {
		entries = append([]identity.Entry{{Key: "ns", Value: e.ns}}, entries...)
		ids[i] = identity.Encode("backendtest", entries)
		if j, dup := seen[ids[i]]; dup {
			t.Fatalf("descriptors %d and %d encode to the same identity %q", j, i, ids[i])
		}
		seen[ids[i]] = i
	}
	for i, id := range ids {
		if d := e.one("first", id, rules, 1); !d.Allowed {
			t.Errorf("descriptor %d (%.40q): first request denied: its state collides with another's", i, descriptors[i][0].Value)
		}
	}
	for i, id := range ids {
		if d := e.one("second", id, rules, 1); d.Allowed {
			t.Errorf("descriptor %d (%.40q): second request admitted: its state was lost", i, descriptors[i][0].Value)
		}
	}
}

// testConcurrency: 64 goroutines hammer one identity at one instant; an
// exact algorithm admits exactly its limit.
func (s *suite) testConcurrency(t *testing.T) {
	const workers, calls, quota = 64, 4, 50
	run := func(t *testing.T, e *env, id string, rules []limit.Rule) int64 {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start // all at once
				for range calls {
					res := e.b.Decide(e.ctx, []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: 1}}})
					if len(res) != 1 || res[0].Err != nil {
						t.Errorf("concurrent Decide: %+v", res)
						return
					}
					if res[0].Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		return admitted.Load()
	}
	for _, a := range append(exact, limit.SlidingWindow) {
		t.Run(a.String(), func(t *testing.T) {
			e := s.env(t, base)
			id := e.id("x")
			rules := []limit.Rule{{Algorithm: a, Unit: limit.Hour, Limit: quota}}
			if got := run(t, e, id, rules); got != quota {
				t.Errorf("%d concurrent requests for a quota of %d: %d admitted", workers*calls, quota, got)
			}
			// The model has not seen the storm: check the peek by hand.
			res := e.b.Decide(e.ctx, []backend.Check{{Identity: id, Rules: rules}})
			if len(res) != 1 || res[0].Err != nil || !res[0].Allowed || res[0].BindingOutcome().Remaining != 0 {
				t.Errorf("peek after the storm: %+v, want allowed with 0 remaining", res)
			}
		})
	}
	t.Run("all or nothing", func(t *testing.T) {
		e := s.env(t, base)
		id := e.id("x")
		rules := []limit.Rule{
			{Unit: limit.Hour, Limit: 40},
			{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 30},
			{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 45},
		}
		if got := run(t, e, id, rules); got != 30 {
			t.Errorf("%d concurrent requests, binding quota 30: %d admitted", workers*calls, got)
		}
		for i, want := range []uint64{10, 0, 15} {
			res := e.b.Decide(e.ctx, []backend.Check{{Identity: id, Rules: rules[i : i+1]}})
			if len(res) != 1 || res[0].Err != nil || res[0].BindingOutcome().Remaining != want {
				t.Errorf("rule %d after the storm: %+v, want %d remaining (a denied request consumed)", i, res, want)
			}
		}
	})
}
