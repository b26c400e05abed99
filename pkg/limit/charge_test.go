package limit

import (
	"testing"
	"time"
)

// TestChargeBindsEveryAlgorithm: a charged cost that does not fit is
// reported denied, consumed, and leaves later peeks denied until the rule
// has paid it back; an uncharged one consumes nothing.
func TestChargeBindsEveryAlgorithm(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, LeakyBucket, GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			r := Rule{Algorithm: a, Unit: Minute, Limit: 10}
			var s State
			now := second0 + 20_000_000
			decide := func(n uint64, charge bool) Decision {
				return Decide([]Rule{r}, []*State{&s}, now, Cost{N: n, Charge: charge})
			}
			decide(5, true)
			before := cloneState(s)
			if d := decide(100, false); d.Allowed || !sameState(before, s) {
				t.Fatalf("uncharged 100 with 5 left: allowed=%v, state %+v → %+v", d.Allowed, before, s)
			}
			d := decide(100, true)
			if d.Allowed || d.Outcomes[0].Remaining != 0 || d.Outcomes[0].Reset <= 0 {
				t.Fatalf("charged 100 with 5 left: %+v, want denied, 0 remaining, a reset", d)
			}
			p := decide(0, false)
			if p.Allowed {
				t.Fatalf("peek after the charge admitted: %+v", p)
			}
			now += p.Outcomes[0].Reset.Microseconds() - 1
			if decide(0, false).Allowed {
				t.Fatalf("peek 1µs before the reported reset admitted")
			}
			now++
			if !decide(0, false).Allowed {
				t.Fatalf("peek at the reported reset denied")
			}
		})
	}
}

// TestChargeAllRules: a charged cost is taken by every rule of the
// decision, also those it fitted.
func TestChargeAllRules(t *testing.T) {
	rules := []Rule{{Unit: Minute, Limit: 3}, {Algorithm: TokenBucket, Unit: Hour, Limit: 100}}
	states := []*State{{}, {}}
	d := Decide(rules, states, second0, Cost{N: 5, Charge: true})
	if d.Allowed || d.Binding != 0 || d.Outcomes[0].Allowed || !d.Outcomes[1].Allowed {
		t.Fatalf("charged 5 on 3/minute and 100/hour: %+v", d)
	}
	if states[0].Count != 5 || states[1].Level != 5 {
		t.Fatalf("states after the charge: %+v %+v, want count 5 and level 5", states[0], states[1])
	}
	if d.Outcomes[1].Remaining != 95 {
		t.Errorf("the rule the cost fitted reports %d remaining, want 95 (after the charge)", d.Outcomes[1].Remaining)
	}
}

// TestChargeCapped: a charged count stops at MaxCharge.
func TestChargeCapped(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindow, SlidingLog} {
		r := Rule{Algorithm: a, Unit: Hour, Limit: 10}
		var s State
		for range 3 {
			Decide([]Rule{r}, []*State{&s}, second0, Cost{N: 1 << 62, Charge: true})
		}
		var got uint64
		switch a {
		case SlidingLog:
			_, got = logBase(s.Log)
		default:
			got = s.Count
		}
		if got != MaxCharge {
			t.Errorf("%s: three charges of 2^62 count %d, want MaxCharge", a, got)
		}
	}
}

// TestLoweredRateExtendsExpiry: a meter lowered from 10/s to 1/s while
// throttled extends the state's Expires on the first read, so a store that
// drops it at Expires cannot hand out capacity.
func TestLoweredRateExtendsExpiry(t *testing.T) {
	fast := Rule{Algorithm: TokenBucket, Unit: Second, Limit: 10, Burst: 10}
	slow := Rule{Algorithm: TokenBucket, Unit: Second, Limit: 1, Burst: 10}
	var s State
	Decide([]Rule{fast}, []*State{&s}, second0, Cost{N: 10})
	if s.Expires != second0+1_000_000 {
		t.Fatalf("Expires after draining 10 at 10/s: %d, want +1 s", s.Expires-second0)
	}
	now := second0 + 50_000
	if d := Decide([]Rule{slow}, []*State{&s}, now, Cost{N: 1}); d.Allowed {
		t.Fatalf("lowered rate admitted with the bucket full: %+v", d)
	}
	if want := second0 + 10_000_000; s.Expires != want {
		t.Fatalf("Expires after a read at 1/s: +%v, want +10s", time.Duration(s.Expires-second0)*time.Microsecond)
	}
	// A write at the fast rate never moves it earlier.
	Decide([]Rule{fast}, []*State{&s}, second0+2_000_000, Cost{N: 1})
	if s.Expires != second0+10_000_000 {
		t.Errorf("a write at the fast rate moved Expires to +%v", time.Duration(s.Expires-second0)*time.Microsecond)
	}
}

// TestExpiredStateReadsAsZero: a state past its Expires decides like the
// zero State, whatever its fields say.
func TestExpiredStateReadsAsZero(t *testing.T) {
	slow := Rule{Algorithm: GCRA, Unit: Minute, Limit: 1, Burst: 5}
	s := State{Level: 5, At: second0, Expires: second0 + 1000}
	if d := Decide([]Rule{slow}, []*State{&s}, second0+1000, Cost{N: 5}); !d.Allowed {
		t.Fatalf("expired state still counted: %+v", d)
	}
	if s.Level != 5 || s.Expires != second0+1000+5*60_000_000 {
		t.Fatalf("state after a write on an expired state: %+v", s)
	}
}

// TestSlidingLogOneEntryPerRequest: one request is one entry whatever its
// cost, so a huge cost costs no memory or time (a log of one instant per
// unit held 4e8 instants for one request).
func TestSlidingLogOneEntryPerRequest(t *testing.T) {
	r := Rule{Algorithm: SlidingLog, Unit: Hour, Limit: 4294967295}
	var s State
	now := second0
	for _, n := range []uint64{1_000_000, 400_000_000, 7, 3_000_000_000} {
		Decide([]Rule{r}, []*State{&s}, now, Cost{N: n})
		now += 1000
	}
	if len(s.Log) != 4 {
		t.Fatalf("4 requests left %d log entries", len(s.Log))
	}
	d := Decide([]Rule{r}, []*State{&s}, now, Cost{N: 0})
	if want := uint64(4294967295 - 3_401_000_007); d.Outcomes[0].Remaining != want {
		t.Errorf("remaining %d, want %d", d.Outcomes[0].Remaining, want)
	}
	// Denied: the first two entries must leave (1e6 + 4e8 units).
	d = Decide([]Rule{r}, []*State{&s}, now, Cost{N: 1_200_000_000})
	if d.Allowed || d.Outcomes[0].Reset != time.Hour-3*time.Millisecond {
		t.Errorf("denied 1.2e9: %+v, want a reset when the second entry leaves", d)
	}
	// A refund takes from the newest entries, splitting one.
	Decide([]Rule{r}, []*State{&s}, now, Cost{N: 3_000_000_003, Refund: true})
	if len(s.Log) != 3 || s.Log[2].N != 4 || s.Log[2].Sum != 401_000_004 {
		t.Errorf("after refunding 3e9+3: %+v", s.Log)
	}
}

// TestChargeOwesAtMostOnePeriod: one charge, however large (a hits_addend
// of 2^64-1), leaves every algorithm denying for at most about two of its
// periods -- a meter's level passes its capacity by at most one period's
// drain -- and a meter already deeper than that is not lowered by a charge.
func TestChargeOwesAtMostOnePeriod(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, LeakyBucket, GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			r := Rule{Algorithm: a, Unit: Hour, Limit: 100}
			var s State
			d := Decide([]Rule{r}, []*State{&s}, second0, Cost{N: 1<<64 - 1, Charge: true})
			if d.Allowed {
				t.Fatalf("charged 2^64-1: %+v", d)
			}
			if reset := d.Outcomes[0].Reset; reset <= 0 || reset > 2*time.Hour {
				t.Fatalf("charged 2^64-1 on 100/hour: reset %v, want at most two periods", reset)
			}
			if a.IsMeter() {
				if s.Level != 200 {
					t.Fatalf("level %v after the charge, want capacity + one period's drain, 200", s.Level)
				}
				s.Level = 1000
				Decide([]Rule{r}, []*State{&s}, s.At, Cost{N: 5, Charge: true})
				if s.Level != 1000 {
					t.Fatalf("a charge on a level of 1000 left %v, want it kept", s.Level)
				}
			}
		})
	}
}
