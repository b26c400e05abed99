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
// A State is not safe for concurrent use: the store serialises the checks
// of one descriptor (the memory backend under a shard lock, the Redis
// backend inside one script call).
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
	// Log holds one entry per admitted (or charged) request, oldest first
	// (SlidingLog): its instant and its cost, so one request costs one
	// entry whatever its cost.
	Log []LogEntry
	// Expires is the instant, a whole millisecond, from which the state
	// counts as the zero State, whatever its other fields say; 0 when no
	// expiry was recorded (the fields alone decide). Decide sets it to the
	// latest Expiry that any rule deciding this state computed, and never
	// moves it earlier while the state lives: a rule whose limit was lowered
	// (a meter that drains more slowly) extends it on its first read, so a
	// store that drops the state at Expires never forgets usage a later
	// rule still counts. It is what a store keeps as the state's TTL.
	Expires Micros
}

// LogEntry is one request of a sliding log: when it was admitted and what
// it cost. Sum is the total cost of this entry and every entry before it
// since the log was last empty, so the cost of any stretch of the log is a
// difference of two sums; a float64, computed as Lua computes it, and kept
// at most 2^53 (exact) by rebasing the sums when an entry would pass it.
type LogEntry struct {
	At  Micros
	N   uint64
	Sum float64
}

// expired reports whether s counts as the zero State at now.
func (s *State) expired(now Micros) bool { return s.Expires != 0 && s.Expires <= now }

// reset empties s, keeping its log's array.
func (s *State) reset() { *s = State{Log: s.Log[:0]} }

// MaxWaitMicros caps every Reset: 2^53 µs (about 285 years), the largest
// whole number of microseconds a float64 (a Lua number) holds exactly.
const MaxWaitMicros int64 = 1 << 53

// maxInstant is the latest instant a meter computes (2^53 µs, in 2255):
// instants stay exact in a float64, so Lua computes the same ones.
const maxInstant Micros = 1 << 53

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
	if s.expired(now) {
		s = &State{}
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
// Decision was allowed, for refunds, or for a charged cost. A peek
// (cost.N == 0) changes nothing. It updates s.Expires as Decide does for a
// single rule.
func (r Rule) Apply(s *State, now Micros, cost Cost) {
	if r.PeriodMicros() <= 0 || cost.N == 0 {
		return
	}
	before := s.liveExpires(now)
	r.apply(s, now, cost)
	s.Expires = before
	r.stamp(s, now)
}

// apply is Apply without the Expires bookkeeping.
func (r Rule) apply(s *State, now Micros, cost Cost) {
	if r.PeriodMicros() <= 0 || cost.N == 0 {
		return
	}
	if s.expired(now) {
		s.reset()
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

// liveExpires is s.Expires, or 0 when it has passed.
func (s *State) liveExpires(now Micros) Micros {
	if s.Expires > now {
		return s.Expires
	}
	return 0
}

// stamp records in s.Expires the expiry r computes for s's fields, rounded
// up to the millisecond, unless s.Expires is later already; a state whose
// fields are empty gets 0. Lua: the record's e, max(e read, new).
func (r Rule) stamp(s *State, now Micros) {
	x := r.fieldsExpiry(s, now)
	if x == 0 {
		s.Expires = 0
		return
	}
	s.Expires = max(s.Expires, ceilMillis(x))
}

// Expiry is the instant from which s is equivalent to the zero State for r,
// so a store may delete it then: s.Expires when it is set, else what r
// computes from the fields. It returns 0 when s is already equivalent to
// the zero State at now.
func (r Rule) Expiry(s *State, now Micros) Micros {
	if s.Expires != 0 {
		return s.liveExpires(now)
	}
	return r.fieldsExpiry(s, now)
}

// fieldsExpiry is the instant from which s's fields are equivalent to the
// zero State for r, 0 if they already are at now. Only a meter's depends
// on the rule's Limit (how fast it drains).
func (r Rule) fieldsExpiry(s *State, now Micros) Micros {
	if r.PeriodMicros() <= 0 || s.expired(now) {
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
			at = s.Log[n-1].At + r.PeriodMicros()
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
// always applies, and so does a charged cost: Cost.Charge), and returns the
// Decision with Allowed and Binding set by Decision.Bind. states[i] belongs
// to rules[i]; rules with the same ID share one State.
//
// When the Decision is denied and nothing was charged, nothing is consumed,
// so the Outcomes of the rules that alone would have admitted the cost
// describe the unchanged state: their Remaining and Reset are those of a
// peek.
//
// A state whose Expires has passed is the zero State. After a write every
// state's Expires is the latest of its earlier Expires and what each rule
// computes for its new fields; after a read (a denial, a peek) it is
// extended to what a rule computes when that is later (a lowered limit),
// and is otherwise left alone. A store that writes the states back only
// when a Decide changed one of them must compare Expires too.
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
	charge := cost.Charge && !cost.Refund
	if (d.Allowed || charge) && cost.N != 0 {
		var inline [8]Micros
		before := inline[:0]
		for i := range rules {
			before = append(before, state(i).liveExpires(now))
		}
		for i, r := range rules {
			r.apply(state(i), now, cost)
		}
		// Expiries from the final fields (rules sharing a state see all
		// the rules' costs), as the Lua script computes them.
		for i := range rules {
			state(i).Expires = before[i]
		}
		for i, r := range rules {
			r.stamp(state(i), now)
		}
		return d
	}
	if !d.Allowed {
		peek := Cost{}
		for i, r := range rules {
			if d.Outcomes[i].Allowed {
				d.Outcomes[i] = r.Check(state(i), now, peek)
			}
		}
	}
	// A read extends an expiry that a rule now computes later (only a
	// meter whose limit was lowered can).
	for i, r := range rules {
		s := state(i)
		if x := r.fieldsExpiry(s, now); x != 0 && s.Expires != 0 && ceilMillis(x) > s.Expires {
			s.Expires = ceilMillis(x)
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
// r.ID() == o.ID(). In-process stores key their maps with it. The zero
// StateKey is the key of the zero Rule.
type StateKey struct {
	algorithm  Algorithm
	unit       Unit
	multiplier int64
	zone       string
	// meter is set for the meters, whose state the name or the slot
	// names (algorithm and period are then zero).
	meter bool
	name  string
	slot  uint8
}

// OwnsKey reports whether the state is a sliding log's, which a store may
// keep apart from the descriptor's other states (a Redis sorted set of its
// own).
func (k StateKey) OwnsKey() bool { return k.algorithm == SlidingLog }

// Key returns the StateKey of r.
func (r Rule) Key() StateKey {
	if r.Algorithm.IsMeter() && r.PeriodMicros() > 0 {
		if r.Name != "" {
			return StateKey{meter: true, name: r.Name}
		}
		return StateKey{meter: true, slot: r.Slot}
	}
	k := StateKey{algorithm: r.Algorithm, unit: r.Unit, multiplier: r.multiplier()}
	if r.Location != nil {
		k.zone = r.Location.String()
	}
	return k
}
