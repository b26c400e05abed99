package limit

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestDecideAllOrNothing(t *testing.T) {
	rules := []Rule{
		{Name: "fixed", Unit: Second, Limit: 5},
		{Name: "bucket", Algorithm: TokenBucket, Unit: Second, Limit: 2},
		{Name: "log", Algorithm: SlidingLog, Unit: Minute, Limit: 10},
		{Name: "sliding", Algorithm: SlidingWindow, Unit: Minute, Limit: 10},
	}
	states := []*State{{}, {}, {}, {}}
	now := second0
	for i := range 2 {
		if d := Decide(rules, states, now, Cost{N: 1}); !d.Allowed {
			t.Fatalf("request %d denied: %+v", i, d)
		}
	}
	snapshot := make([]State, len(states))
	for i, s := range states {
		snapshot[i] = cloneState(*s)
	}
	d := Decide(rules, states, now, Cost{N: 1})
	if d.Allowed || d.Binding != 1 {
		t.Fatalf("third request: %+v, want denied by the bucket (index 1)", d)
	}
	for i, s := range states {
		if !sameState(snapshot[i], *s) {
			t.Errorf("rule %s consumed on a denied decision: %+v → %+v", rules[i].Name, snapshot[i], *s)
		}
	}
	// Rules that alone admitted report the unchanged state (a peek).
	want := []Outcome{
		{Allowed: true, Remaining: 3, Reset: time.Second},
		{Allowed: false, Remaining: 0, Reset: 500 * ms},
		{Allowed: true, Remaining: 8, Reset: time.Minute},
		{Allowed: true, Remaining: 8, Reset: 2 * time.Minute},
	}
	for i, o := range d.Outcomes {
		if o != want[i] {
			t.Errorf("outcome of %s = %+v, want %+v", rules[i].Name, o, want[i])
		}
	}
	// Peeking each rule alone shows nothing was consumed.
	for i, r := range rules {
		if o := r.Check(states[i], now, Cost{}); o.Remaining != want[i].Remaining {
			t.Errorf("peek %s: remaining %d, want %d", r.Name, o.Remaining, want[i].Remaining)
		}
	}
}

func TestDecideRefundAlwaysApplies(t *testing.T) {
	rules := []Rule{
		{Unit: Second, Limit: 5},
		{Algorithm: GCRA, Unit: Second, Limit: 5},
		{Algorithm: SlidingLog, Unit: Second}, // limit 0
	}
	states := []*State{{}, {}, {}}
	Decide(rules[:2], states[:2], second0, Cost{N: 5})
	d := Decide(rules, states, second0, Cost{N: 2, Refund: true})
	if !d.Allowed {
		t.Fatalf("refund denied: %+v", d)
	}
	if states[0].Count != 3 || states[1].Level != 3 {
		t.Errorf("refund not applied: %+v %+v", states[0], states[1])
	}
	if d.Binding != 2 {
		t.Errorf("binding = %d, want the limit-0 rule (least remaining)", d.Binding)
	}
}

func TestDecidePeekChangesNothing(t *testing.T) {
	rules := []Rule{
		{Unit: Second, Limit: 5},
		{Algorithm: SlidingLog, Unit: Second, Limit: 5},
		{Algorithm: SlidingWindow, Unit: Second, Limit: 5},
		{Algorithm: LeakyBucket, Unit: Second, Limit: 5},
	}
	states := []*State{{}, {}, {}, {}}
	Decide(rules, states, second0, Cost{N: 2})
	snapshot := make([]State, len(states))
	for i, s := range states {
		snapshot[i] = cloneState(*s)
	}
	d := Decide(rules, states, second0+1000, Cost{})
	if !d.Allowed {
		t.Fatalf("peek denied: %+v", d)
	}
	for i, s := range states {
		if !sameState(snapshot[i], *s) {
			t.Errorf("peek changed rule %d: %+v → %+v", i, snapshot[i], *s)
		}
	}
}

func TestDecideBinding(t *testing.T) {
	tests := []struct {
		name    string
		rules   []Rule
		before  []uint64 // cost taken per rule beforehand, alone
		cost    uint64
		allowed bool
		binding int
	}{
		{"no rules", nil, nil, 1, true, -1},
		{"least remaining", []Rule{
			{Unit: Second, Limit: 10},
			{Unit: Minute, Limit: 3},
			{Unit: Hour, Limit: 5},
		}, nil, 1, true, 1},
		{"tie broken by the longest reset", []Rule{
			{Unit: Second, Limit: 3},
			{Unit: Hour, Limit: 3},
			{Unit: Minute, Limit: 3},
		}, nil, 1, true, 1},
		{"full tie: lowest index", []Rule{
			{Unit: Minute, Limit: 3},
			{Name: "same", Unit: Minute, Limit: 3},
		}, nil, 1, true, 0},
		{"denied: the denied rule, not the one with least remaining", []Rule{
			{Unit: Minute, Limit: 1},
			{Unit: Second, Limit: 5},
		}, []uint64{0, 5}, 1, false, 1},
		{"denied by two: the longest reset", []Rule{
			{Unit: Second, Limit: 1},
			{Unit: Hour, Limit: 1},
			{Unit: Minute, Limit: 1},
		}, []uint64{1, 1, 1}, 1, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states := make([]*State, len(tt.rules))
			for i := range states {
				states[i] = &State{}
				if i < len(tt.before) && tt.before[i] > 0 {
					tt.rules[i].Apply(states[i], second0, Cost{N: tt.before[i]})
				}
			}
			d := Decide(tt.rules, states, second0+1, Cost{N: tt.cost})
			if d.Allowed != tt.allowed || d.Binding != tt.binding || len(d.Outcomes) != len(tt.rules) {
				t.Fatalf("got allowed=%v binding=%d (%+v), want allowed=%v binding=%d", d.Allowed, d.Binding, d.Outcomes, tt.allowed, tt.binding)
			}
		})
	}
}

func TestDecideMissingStates(t *testing.T) {
	rules := []Rule{{Unit: Second, Limit: 1}, {Unit: Second, Limit: 1}}
	d := Decide(rules, []*State{nil}, second0, Cost{N: 1})
	if !d.Allowed || len(d.Outcomes) != 2 {
		t.Fatalf("got %+v", d)
	}
}

// randomRule draws a rule of algorithm a with a small limit and a period
// from one second to a few hours.
func randomRule(rng *rand.Rand, a Algorithm) Rule {
	units := []Unit{Second, Second, Minute, Hour}
	r := Rule{
		Algorithm:  a,
		Unit:       units[rng.IntN(len(units))],
		Multiplier: uint32(rng.IntN(4)),
		Limit:      uint64(rng.IntN(12)),
	}
	if a.IsMeter() && rng.IntN(2) == 0 {
		r.Burst = uint64(rng.IntN(20))
	}
	return r
}

// TestResetIsExact checks, over random traffic for every algorithm, that a
// client denied with Reset is admitted when it waits exactly Reset and still
// denied at Reset-1µs; that an admitted Outcome equals a peek right after
// it; and that at Expiry a state decides like the zero State.
func TestResetIsExact(t *testing.T) {
	for a := FixedWindow; a <= GCRA; a++ {
		t.Run(a.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(a), 42))
			checked := 0
			for range 300 {
				r := randomRule(rng, a)
				p := r.PeriodMicros()
				var s State
				now := second0 + rng.Int64N(p)
				for range 60 {
					now += rng.Int64N(p/3 + 1)
					cost := Cost{N: uint64(rng.IntN(int(r.Capacity()) + 2))}
					if rng.IntN(10) == 0 {
						cost.Refund = true
					}
					o := Decide([]Rule{r}, []*State{&s}, now, cost).Outcomes[0]
					if o.Allowed {
						peek := r.Check(&s, now, Cost{})
						if cost.N > 0 && !cost.Refund && (peek.Remaining != o.Remaining || peek.Reset != o.Reset) {
							t.Fatalf("%v: admitted %d at %d: %+v, but a peek right after gives %+v", r, cost.N, now, o, peek)
						}
						continue
					}
					if cost.N > r.Capacity() {
						continue // never admitted: Reset is when the rule is whole again
					}
					w := o.Reset.Microseconds()
					if got := r.Check(&s, now+w, cost); !got.Allowed {
						t.Fatalf("%v: denied %d at %d (state %+v) with Reset %v, but still denied after waiting it: %+v", r, cost.N, now, s, o.Reset, got)
					}
					if w > 0 {
						if got := r.Check(&s, now+w-1, cost); got.Allowed {
							t.Fatalf("%v: denied %d at %d (state %+v) with Reset %v, but admitted 1µs earlier", r, cost.N, now, s, o.Reset)
						}
					}
					checked++
				}
				if exp := r.Expiry(&s, now); exp != 0 {
					var zero State
					for n := uint64(0); n <= r.Capacity()+1; n++ {
						c := Cost{N: n}
						if got, want := r.Check(&s, exp, c), r.Check(&zero, exp, c); got != want {
							t.Fatalf("%v: at Expiry %d state %+v decides %+v, the zero state %+v", r, exp, s, got, want)
						}
					}
				}
			}
			if checked < 100 {
				t.Fatalf("only %d denials checked", checked)
			}
		})
	}
}

func TestInvalidRulesDoNotPanic(t *testing.T) {
	rules := []Rule{
		{Algorithm: Algorithm(99), Unit: Second, Limit: 1},
		{Algorithm: Algorithm(-1), Unit: Unit(-3), Limit: 1},
		{Unit: Unit(77), Limit: 1},
	}
	for _, r := range rules {
		_ = r.ID()
		_ = r.String()
		_ = r.Key()
		var s State
		_ = Decide([]Rule{r}, []*State{&s}, second0, Cost{N: 1})
		_ = r.Expiry(&s, second0)
	}
}
