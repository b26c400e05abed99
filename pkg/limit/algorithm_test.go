package limit

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// step is one request in a scenario: advance the clock by dt, then decide
// cost against the rule.
type step struct {
	dt        time.Duration
	n         uint64
	refund    bool
	allowed   bool
	remaining uint64
	reset     time.Duration
}

func take(dt time.Duration, n uint64, allowed bool, remaining uint64, reset time.Duration) step {
	return step{dt: dt, n: n, allowed: allowed, remaining: remaining, reset: reset}
}

func refund(dt time.Duration, n uint64, remaining uint64, reset time.Duration) step {
	return step{dt: dt, n: n, refund: true, allowed: true, remaining: remaining, reset: reset}
}

type scenario struct {
	name  string
	rule  Rule
	start Micros // the first step's instant, before its dt
	steps []step
}

// second0 is the start of a one-second (and one-minute, one-hour) window.
const second0 Micros = 1_700_000_000_000_000 - 1_700_000_000_000_000%3_600_000_000

func runScenarios(t *testing.T, scenarios []scenario) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var s State
			now := sc.start
			for i, st := range sc.steps {
				now += st.dt.Microseconds()
				before := cloneState(s)
				d := Decide([]Rule{sc.rule}, []*State{&s}, now, Cost{N: st.n, Refund: st.refund})
				got := d.Outcomes[0]
				want := Outcome{Allowed: st.allowed, Remaining: st.remaining, Reset: st.reset}
				if got != want {
					t.Fatalf("step %d (t=+%v, n=%d, refund=%v): got %+v, want %+v (state before %+v)",
						i, time.Duration(now-sc.start)*time.Microsecond, st.n, st.refund, got, want, before)
				}
				if d.Allowed != st.allowed {
					t.Fatalf("step %d: Decision.Allowed = %v", i, d.Allowed)
				}
				if (!got.Allowed || st.n == 0) && !sameState(before, s) {
					t.Fatalf("step %d: denial or peek changed the state: %+v → %+v", i, before, s)
				}
			}
		})
	}
}

func cloneState(s State) State {
	s.Log = append([]LogEntry(nil), s.Log...)
	return s
}

func sameState(a, b State) bool {
	if a.Window != b.Window || a.Count != b.Count || a.Prev != b.Prev || a.Level != b.Level || a.At != b.At || a.Expires != b.Expires || len(a.Log) != len(b.Log) {
		return false
	}
	for i := range a.Log {
		if a.Log[i] != b.Log[i] {
			return false
		}
	}
	return true
}

func TestFixedWindow(t *testing.T) {
	three := Rule{Unit: Second, Limit: 3}
	half := second0 + 500_000
	runScenarios(t, []scenario{
		{"burst then deny", three, half, []step{
			take(0, 1, true, 2, 500*ms),
			take(0, 1, true, 1, 500*ms),
			take(100*ms, 1, true, 0, 400*ms),
			take(0, 1, false, 0, 400*ms),
			take(400*ms-time.Microsecond, 1, false, 0, time.Microsecond), // 1µs before the edge
			take(time.Microsecond, 1, true, 2, time.Second),              // at the edge
		}},
		{"cost larger than the limit", three, half, []step{
			take(0, 4, false, 3, 500*ms),
			take(0, 3, true, 0, 500*ms),
			take(500*ms, 4, false, 3, time.Second),
		}},
		{"partial cost", three, half, []step{
			take(0, 2, true, 1, 500*ms),
			take(0, 2, false, 1, 500*ms),
			take(0, 1, true, 0, 500*ms),
		}},
		{"refund never above full", three, half, []step{
			take(0, 3, true, 0, 500*ms),
			refund(0, 2, 2, 500*ms),
			refund(0, 10, 3, 500*ms),
			take(0, 3, true, 0, 500*ms),
			refund(500*ms, 1, 3, time.Second), // a new window: nothing to give back
		}},
		{"peek", three, half, []step{
			take(0, 0, true, 3, 500*ms),
			take(0, 3, true, 0, 500*ms),
			take(0, 0, true, 0, 500*ms), // full but not over: a peek is admitted
			take(0, 1, false, 0, 500*ms),
		}},
		{"limit zero", Rule{Unit: Minute, Limit: 0}, second0 + 15_000_000, []step{
			take(0, 1, false, 0, 45*time.Second),
			take(0, 0, true, 0, 45*time.Second),
			refund(0, 1, 0, 45*time.Second),
		}},
		{"five minutes", Rule{Unit: Minute, Multiplier: 5, Limit: 2}, second0 + 60_000_000, []step{
			take(0, 2, true, 0, 4*time.Minute),
			take(4*time.Minute-time.Microsecond, 1, false, 0, time.Microsecond),
			take(time.Microsecond, 1, true, 1, 5*time.Minute),
		}},
	})
}

func TestFixedWindowLoweredLimit(t *testing.T) {
	r := Rule{Unit: Second, Limit: 5}
	var s State
	r.Apply(&s, second0, Cost{N: 5})
	r.Limit = 3 // same ID: the usage is kept
	o := r.Check(&s, second0+1, Cost{})
	if o.Allowed || o.Remaining != 0 {
		t.Fatalf("peek over a lowered limit: %+v, want denied with 0 remaining", o)
	}
	if o := r.Check(&s, second0+1_000_000, Cost{N: 3}); !o.Allowed {
		t.Fatalf("next window: %+v, want admitted", o)
	}
}

func TestFixedWindowCalendar(t *testing.T) {
	loc := zone(t, "Asia/Shanghai")
	r := Rule{Unit: Day, Limit: 2, Location: loc}
	runScenarios(t, []scenario{
		{"shanghai day", r, at(t, "2024-05-01T22:00:00+08:00"), []step{
			take(0, 2, true, 0, 2*time.Hour),
			take(2*time.Hour-time.Microsecond, 1, false, 0, time.Microsecond),
			take(time.Microsecond, 1, true, 1, 24*time.Hour),
		}},
	})
	ny := Rule{Unit: Day, Limit: 1, Location: zone(t, "America/New_York")}
	runScenarios(t, []scenario{
		{"new york 23h day", ny, at(t, "2024-03-10T00:00:00-05:00"), []step{
			take(0, 1, true, 0, 23*time.Hour),
			take(23*time.Hour, 1, true, 0, 24*time.Hour),
		}},
	})
}

func TestSlidingWindow(t *testing.T) {
	ten := Rule{Algorithm: SlidingWindow, Unit: Second, Limit: 10}
	runScenarios(t, []scenario{
		{"weights the previous window", ten, second0 + 500_000, []step{
			take(0, 10, true, 0, 1500*ms), // whole again when this window has left the last period
			// cur+N > L: wait into the next window until 10·(1-e)/1 + 1 ≤ 10, e = 0.1 s.
			take(0, 1, false, 0, 600*ms),
			take(600*ms-time.Microsecond, 1, false, 0, time.Microsecond),
			take(time.Microsecond, 1, true, 0, 1900*ms), // est 9 + 1
			// cur+N ≤ L: only the previous window's weight is in the way: 10·(1-e) ≤ 8, e = 0.2 s.
			take(0, 1, false, 0, 100*ms),
			take(100*ms, 1, true, 0, 1800*ms),
			take(400*ms, 0, true, 4, 1400*ms), // e = 0.6: 10·0.4 + 2 = 6
			take(1400*ms, 0, true, 10, 0),     // both windows out of the period
		}},
		{"previous window only", ten, second0 + 900_000, []step{
			take(0, 4, true, 6, 1100*ms),
			take(200*ms, 0, true, 6, 900*ms), // e = 0.1: 4·0.9 = 3.6 → floor(6.4)
			take(0, 7, false, 6, 150*ms),     // 4·(1-e) ≤ 3 at e = 0.25
			take(150*ms-time.Microsecond, 7, false, 6, time.Microsecond),
			take(time.Microsecond, 7, true, 0, 1750*ms),
		}},
		{"cost larger than the limit", ten, second0 + 500_000, []step{
			take(0, 11, false, 10, 0),
			take(0, 1, true, 9, 1500*ms),
			take(0, 11, false, 9, 1500*ms),
		}},
		{"refund gives back only the current window", ten, second0 + 500_000, []step{
			take(0, 6, true, 4, 1500*ms),
			refund(0, 2, 6, 1500*ms),
			refund(0, 100, 10, 0),
			take(0, 8, true, 2, 1500*ms),
			refund(750*ms, 3, 4, 750*ms), // e = 0.25: 8·0.75 = 6, nothing in this window to refund
		}},
		{"peek", ten, second0, []step{
			take(0, 0, true, 10, 0),
			take(0, 10, true, 0, 2*time.Second),
			take(0, 0, true, 0, 2*time.Second),
		}},
		{"limit zero", Rule{Algorithm: SlidingWindow, Unit: Second}, second0 + 1, []step{
			take(0, 1, false, 0, 0),
			take(0, 0, true, 0, 0),
		}},
		{"skipped windows start fresh", ten, second0, []step{
			take(0, 10, true, 0, 2*time.Second),
			take(2*time.Second, 10, true, 0, 2*time.Second),
		}},
		{"minute multiplier", Rule{Algorithm: SlidingWindow, Unit: Minute, Multiplier: 2, Limit: 4}, second0 + 60_000_000, []step{
			take(0, 4, true, 0, 3*time.Minute),
			take(time.Minute, 1, false, 0, 30*time.Second), // next window: 4·(1-e/2m) ≤ 3 at e = 30 s
			take(30*time.Second, 1, true, 0, 3*time.Minute+30*time.Second),
		}},
	})
}

func TestSlidingLog(t *testing.T) {
	three := Rule{Algorithm: SlidingLog, Unit: Second, Limit: 3}
	runScenarios(t, []scenario{
		{"exact rolling period", three, second0 + 300_000, []step{
			take(0, 1, true, 2, time.Second),
			take(100*ms, 1, true, 1, time.Second),
			take(100*ms, 1, true, 0, time.Second),
			take(100*ms, 1, false, 0, 700*ms), // the oldest leaves at +1 s
			take(700*ms-time.Microsecond, 1, false, 0, time.Microsecond),
			take(time.Microsecond, 1, true, 0, time.Second),
			take(0, 2, false, 0, 200*ms), // the two oldest must leave
			take(200*ms, 2, true, 0, time.Second),
		}},
		{"cost larger than the limit", three, second0, []step{
			take(0, 4, false, 3, 0),
			take(0, 1, true, 2, time.Second),
			take(500*ms, 4, false, 2, 500*ms),
		}},
		{"refund drops the newest", three, second0, []step{
			take(0, 1, true, 2, time.Second),
			take(400*ms, 2, true, 0, time.Second),
			refund(100*ms, 1, 1, 900*ms),
			refund(0, 1, 2, 500*ms),
			refund(0, 5, 3, 0),
		}},
		{"peek", three, second0, []step{
			take(0, 0, true, 3, 0),
			take(0, 3, true, 0, time.Second),
			take(250*ms, 0, true, 0, 750*ms),
		}},
		{"limit zero", Rule{Algorithm: SlidingLog, Unit: Second}, second0, []step{
			take(0, 1, false, 0, 0),
			take(0, 0, true, 0, 0),
		}},
	})
}

func TestSlidingLogMemory(t *testing.T) {
	r := Rule{Algorithm: SlidingLog, Unit: Second, Limit: 5}
	var s State
	now := second0
	for range 1000 {
		rules, states := []Rule{r}, []*State{&s}
		Decide(rules, states, now, Cost{N: 1})
		if len(s.Log) > int(r.Limit) {
			t.Fatalf("log holds %d entries, limit %d", len(s.Log), r.Limit)
		}
		now += 7_919
	}
	if cap(s.Log) > 16 {
		t.Errorf("log array grew to %d for a limit of 5: expired entries are not reused", cap(s.Log))
	}
}

func TestMeters(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, LeakyBucket, GCRA} {
		rate := Rule{Algorithm: a, Unit: Second, Limit: 10, Burst: 20}
		runScenarios(t, []scenario{
			{a.String() + "/burst then refill", rate, second0 + 123_456, []step{
				take(0, 15, true, 5, 1500*ms),
				take(0, 5, true, 0, 2*time.Second),
				take(0, 1, false, 0, 100*ms),
				take(100*ms-time.Microsecond, 1, false, 0, time.Microsecond),
				take(time.Microsecond, 1, true, 0, 2*time.Second),
				take(0, 5, false, 0, 500*ms),
				take(2*time.Second, 0, true, 20, 0),
			}},
			{a.String() + "/cost larger than the capacity", rate, second0, []step{
				take(0, 21, false, 20, 0),
				take(0, 10, true, 10, time.Second),
				take(0, 21, false, 10, time.Second),
			}},
			{a.String() + "/refund never above full", rate, second0, []step{
				take(0, 20, true, 0, 2*time.Second),
				refund(500*ms, 5, 10, time.Second), // drained 5, gave back 5
				refund(0, 100, 20, 0),
				take(0, 20, true, 0, 2*time.Second),
			}},
			{a.String() + "/peek", rate, second0, []step{
				take(0, 0, true, 20, 0),
				take(0, 20, true, 0, 2*time.Second),
				take(0, 0, true, 0, 2*time.Second),
				take(250*ms, 0, true, 2, 1750*ms),
			}},
			{a.String() + "/burst defaults to the limit", Rule{Algorithm: a, Unit: Minute, Limit: 3}, second0, []step{
				take(0, 3, true, 0, time.Minute),
				take(0, 1, false, 0, 20*time.Second),
				take(20*time.Second, 1, true, 0, time.Minute),
			}},
			{a.String() + "/thirds", Rule{Algorithm: a, Unit: Second, Limit: 3}, second0, []step{
				take(0, 3, true, 0, time.Second),
				take(0, 1, false, 0, 333334*time.Microsecond),
				take(333333*time.Microsecond, 1, false, 0, time.Microsecond),
				take(time.Microsecond, 1, true, 0, time.Second), // level 3 - 1.000002 + 1
			}},
			{a.String() + "/limit zero never drains", Rule{Algorithm: a, Unit: Second, Limit: 0, Burst: 2}, second0, []step{
				take(0, 2, true, 0, time.Second),
				take(500*ms, 1, false, 0, 500*ms), // the level is forgotten one period after the last admission
				take(500*ms, 2, true, 0, time.Second),
			}},
			{a.String() + "/limit and burst zero", Rule{Algorithm: a, Unit: Second}, second0, []step{
				take(0, 1, false, 0, 0),
				take(0, 0, true, 0, 0),
			}},
			{a.String() + "/hour multiplier", Rule{Algorithm: a, Unit: Hour, Multiplier: 2, Limit: 4}, second0, []step{
				take(0, 4, true, 0, 2*time.Hour),
				take(0, 1, false, 0, 30*time.Minute),
				take(30*time.Minute, 1, true, 0, 2*time.Hour),
			}},
		})
	}
}

func TestUnknownUnit(t *testing.T) {
	for a := FixedWindow; a <= GCRA; a++ {
		r := Rule{Algorithm: a, Limit: 10}
		var s State
		if o := r.Check(&s, second0, Cost{N: 1}); o != (Outcome{}) {
			t.Errorf("%v: cost against an unknown unit: %+v, want a denial", a, o)
		}
		if o := r.Check(&s, second0, Cost{}); !o.Allowed {
			t.Errorf("%v: a peek is denied", a)
		}
		r.Apply(&s, second0, Cost{N: 1})
		if !sameState(s, State{}) || r.Expiry(&s, second0) != 0 {
			t.Errorf("%v: Apply changed the state: %+v", a, s)
		}
	}
}

func TestKeyMatchesID(t *testing.T) {
	berlin, shanghai := zone(t, "Europe/Berlin"), zone(t, "Asia/Shanghai")
	berlin2 := zone(t, "Europe/Berlin")
	var rules []Rule
	for a := FixedWindow; a <= GCRA; a++ {
		for u := Second; u <= Year; u++ {
			for _, m := range []uint32{0, 1, 2, 60} {
				for _, loc := range []*time.Location{nil, time.UTC, berlin, berlin2, shanghai} {
					rules = append(rules, Rule{Algorithm: a, Unit: u, Multiplier: m, Location: loc, Limit: uint64(m) * 3})
					if loc == nil && m < 2 {
						rules = append(rules, Rule{Name: "a", Algorithm: a, Unit: u, Multiplier: m},
							Rule{Name: "b", Algorithm: a, Unit: u, Multiplier: m}, Rule{Slot: 1, Algorithm: a, Unit: u, Multiplier: m})
					}
				}
			}
		}
	}
	for _, r := range rules {
		for _, o := range rules {
			if (r.Key() == o.Key()) != (r.ID() == o.ID()) {
				t.Fatalf("Key and ID disagree for %q and %q", r.ID(), o.ID())
			}
		}
	}
}

// TestMeterID: a meter's state id names the meter (its name, or its slot
// when unnamed) and nothing else, so it survives a change of limit, period,
// burst or meter algorithm; a window rule's id changes with its algorithm
// and period, never with its name or slot.
func TestMeterID(t *testing.T) {
	tests := []struct {
		name string
		a, b Rule
		same bool
	}{
		{"a unit change at the same rate", Rule{Algorithm: TokenBucket, Unit: Second, Limit: 10}, Rule{Algorithm: TokenBucket, Unit: Minute, Limit: 600}, true},
		{"any period, limit and burst", Rule{Algorithm: GCRA, Unit: Second, Limit: 10, Burst: 30}, Rule{Algorithm: GCRA, Unit: Day, Multiplier: 7, Limit: 3}, true},
		{"another meter algorithm", Rule{Algorithm: TokenBucket, Unit: Second}, Rule{Algorithm: LeakyBucket, Unit: Second}, true},
		{"a named meter", Rule{Name: "burst", Algorithm: TokenBucket, Unit: Second}, Rule{Name: "burst", Algorithm: GCRA, Unit: Hour, Limit: 9}, true},
		{"a time zone means nothing to a meter", Rule{Algorithm: GCRA, Unit: Day}, Rule{Algorithm: GCRA, Unit: Day, Location: time.UTC}, true},
		{"another name", Rule{Name: "burst", Algorithm: TokenBucket, Unit: Second}, Rule{Name: "burst2", Algorithm: TokenBucket, Unit: Second}, false},
		{"named and unnamed", Rule{Name: "burst", Algorithm: TokenBucket, Unit: Second}, Rule{Algorithm: TokenBucket, Unit: Second}, false},
		{"another slot", Rule{Algorithm: TokenBucket, Unit: Second}, Rule{Slot: 1, Algorithm: TokenBucket, Unit: Second}, false},
		{"a window and a meter", Rule{Unit: Second}, Rule{Algorithm: TokenBucket, Unit: Second}, false},
		{"a window's unit", Rule{Unit: Second, Limit: 10}, Rule{Unit: Minute, Limit: 600}, false},
		{"a window's name and slot", Rule{Name: "a", Unit: Second}, Rule{Slot: 3, Unit: Second, Limit: 5}, true},
	}
	for _, tc := range tests {
		if got := tc.a.ID() == tc.b.ID(); got != tc.same {
			t.Errorf("%s: %q and %q: same id %v, want %v", tc.name, tc.a.ID(), tc.b.ID(), got, tc.same)
		}
		if got := tc.a.Key() == tc.b.Key(); got != tc.same {
			t.Errorf("%s: same key %v, want %v", tc.name, got, tc.same)
		}
		for _, id := range []string{tc.a.ID(), tc.b.ID()} {
			for _, c := range id {
				if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/+-", c) {
					t.Errorf("id %q holds %q", id, c)
				}
			}
		}
	}
}

func ExampleDecide() {
	rules := []Rule{
		{Name: "burst", Algorithm: TokenBucket, Unit: Second, Limit: 1, Burst: 2},
		{Name: "hourly", Algorithm: SlidingWindow, Unit: Hour, Limit: 100},
	}
	states := []*State{{}, {}}
	now := MicrosOf(time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC))
	for i := range 3 {
		d := Decide(rules, states, now, Cost{N: 1})
		b := d.BindingOutcome()
		fmt.Printf("request %d: allowed=%v binding=%s remaining=%d reset=%v\n", i, d.Allowed, rules[d.Binding].Name, b.Remaining, b.Reset)
	}
	// Output:
	// request 0: allowed=true binding=burst remaining=1 reset=1s
	// request 1: allowed=true binding=burst remaining=0 reset=2s
	// request 2: allowed=false binding=burst remaining=0 reset=1s
}
