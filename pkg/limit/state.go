package limit

import "time"

// State is one rule's stored state for one descriptor. The zero State is an
// idle rule: nothing counted. Which fields an algorithm uses:
//
//	FixedWindow    Window, Count
//	SlidingWindow  Window, Count, Prev
//	SlidingLog     Log
//	meters         Level, At   (TokenBucket, LeakyBucket, GCRA)
//
// The functions in this package only read fields of the rule's algorithm
// and leave the others alone, but a State must not be shared between rules.
type State struct {
	// Window is the start of the window Count belongs to (FixedWindow,
	// SlidingWindow). A Count whose Window is not the current window is
	// stale: it counts as 0 (or as Prev for SlidingWindow when it is the
	// window just before).
	Window Micros
	// Count is the cost counted in Window (FixedWindow, SlidingWindow).
	Count uint64
	// Prev is the cost counted in the window before Window (SlidingWindow).
	Prev uint64
	// Level is the cost held in the bucket, in cost units, as of At
	// (meters). It drains at Limit per period.
	Level float64
	// At is when Level was computed (meters).
	At Micros
	// Log holds one instant per admitted unit of cost, oldest first
	// (SlidingLog). It never holds more than Limit entries after Apply
	// trims it.
	Log []Micros
}

// MaxWaitMicros caps every Reset: 2^53 µs (about 285 years), the largest
// whole number of microseconds a float64 (a Lua number) holds exactly.
const MaxWaitMicros int64 = 1 << 53

// Check returns r's Outcome for cost at now against s, without changing s.
// For an admitted cost, Remaining and Reset describe the state after Apply.
// A peek (cost.N == 0) is admitted unless the rule is already over its
// limit (after the limit was lowered); a refund is always admitted.
// A rule with an unknown unit admits only peeks and refunds, with
// Remaining 0 and Reset 0.
func (r Rule) Check(s *State, now Micros, cost Cost) Outcome {
	if r.PeriodMicros() <= 0 {
		return Outcome{Allowed: cost.N == 0 || cost.Refund}
	}
	switch {
	case r.Algorithm.IsMeter():
		return r.meterCheck(s, now, cost)
	case r.Algorithm == SlidingWindow:
		return r.swCheck(s, now, cost)
	case r.Algorithm == SlidingLog:
		return r.logCheck(s, now, cost)
	}
	return r.fwCheck(s, now, cost)
}

// Apply commits cost into s at now: it takes cost.N (or gives it back for a
// refund) whether or not the rule admits it, so call it only when the whole
// Decision was allowed, or for refunds. A peek (cost.N == 0) changes
// nothing.
func (r Rule) Apply(s *State, now Micros, cost Cost) {
	if r.PeriodMicros() <= 0 || cost.N == 0 {
		return
	}
	switch {
	case r.Algorithm.IsMeter():
		r.meterApply(s, now, cost)
	case r.Algorithm == SlidingWindow:
		r.swApply(s, now, cost)
	case r.Algorithm == SlidingLog:
		r.logApply(s, now, cost)
	default:
		r.fwApply(s, now, cost)
	}
}

// Expiry is the instant from which s is equivalent to the zero State for r,
// so a store may delete it then. It returns 0 when s is already equivalent
// to the zero State at now.
func (r Rule) Expiry(s *State, now Micros) Micros {
	if r.PeriodMicros() <= 0 {
		return 0
	}
	var at Micros
	switch {
	case r.Algorithm.IsMeter():
		at = r.meterWholeAt(s.Level, s.At)
	case r.Algorithm == SlidingWindow:
		at = r.swExpiry(s)
	case r.Algorithm == SlidingLog:
		if n := len(s.Log); n > 0 {
			at = s.Log[n-1] + r.PeriodMicros()
		}
	default:
		if s.Count > 0 {
			_, at = r.Window(s.Window)
		}
	}
	if at <= now {
		return 0
	}
	return at
}

// Decide decides cost against every rule at once: it checks every rule,
// then applies the cost to all of them only if all admitted it (a refund
// always applies), and returns the Decision with Allowed and Binding set by
// Decision.Bind. states[i] belongs to rules[i].
//
// When the Decision is denied nothing is consumed, so the Outcomes of the
// rules that alone would have admitted the cost describe the unchanged
// state: their Remaining and Reset are those of a peek.
//
// A missing or nil states[i] is treated as a zero State that is not kept.
func Decide(rules []Rule, states []*State, now Micros, cost Cost) Decision {
	d := Decision{Outcomes: make([]Outcome, len(rules))}
	var scratch State
	state := func(i int) *State {
		if i < len(states) && states[i] != nil {
			return states[i]
		}
		scratch = State{}
		return &scratch
	}
	for i, r := range rules {
		d.Outcomes[i] = r.Check(state(i), now, cost)
	}
	d.Bind()
	if d.Allowed {
		if cost.N != 0 {
			for i, r := range rules {
				r.Apply(state(i), now, cost)
			}
		}
		return d
	}
	peek := Cost{}
	for i, r := range rules {
		if d.Outcomes[i].Allowed {
			d.Outcomes[i] = r.Check(state(i), now, peek)
		}
	}
	return d
}

// resetOf converts a wait in µs to a Reset: negative waits are 0, long ones
// are capped at MaxWaitMicros.
func resetOf(wait int64) time.Duration {
	if wait <= 0 {
		return 0
	}
	if wait > MaxWaitMicros {
		wait = MaxWaitMicros
	}
	return time.Duration(wait) * time.Microsecond
}

// StateKey identifies a rule's stored state like ID does, as a comparable
// value that costs no allocation: r.Key() == o.Key() exactly when
// r.ID() == o.ID(). In-process stores key their maps with it.
type StateKey struct {
	algorithm  Algorithm
	unit       Unit
	multiplier int64
	zone       string
}

// Key returns the StateKey of r.
func (r Rule) Key() StateKey {
	k := StateKey{algorithm: r.Algorithm, unit: r.Unit, multiplier: r.multiplier()}
	if r.Location != nil {
		k.zone = r.Location.String()
	}
	return k
}
