package denycache

import (
	"math"
	"time"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// This file decides which denials are safe to remember and computes the
// answer a remembered denial gives later. A cached answer must be the
// Decision the inner backend would return at that instant, field by field,
// provided nothing changed the descriptor's state in between (this process
// invalidates on every change it sees; see the package doc for what it
// cannot see). So a denial is remembered only when every rule's Outcome is
// predictable from the Outcome itself, for a known interval, by one of
// these laws (pkg/limit's formulas, per algorithm; A = now + Reset):
//
//   - kindFixed: a fixed window. Within the window the count is constant,
//     so Remaining is constant and Reset = A - now for any cost, admitted or
//     denied. Valid until the window ends (A). A cost m is admitted iff
//     m ≤ Remaining (Remaining = L - count; when count ≥ L Remaining is 0
//     and no cost is admitted).
//   - kindWhole: any other algorithm whose state holds nothing (Remaining
//     == capacity and Reset == 0). Without traffic it stays whole, and a
//     whole rule answers cost m with {m ≤ capacity, capacity, 0}. Valid
//     forever.
//   - kindLinear: any other algorithm, with Reset > 0: Allowed stays what
//     it was, Remaining stays constant and Reset = A - now, until the
//     first instant the floored Remaining can grow. Quota only grows with
//     time, and A is exact to the µs (pkg/limit settles it), so:
//     a denied rule whose Remaining + 1 == cost ≤ capacity keeps its
//     Remaining until A, where the cost is admitted (any algorithm);
//     for a meter (token/leaky bucket, GCRA) the level drains linearly, so
//     from A, the instant it reaches its target (capacity - cost when
//     denied, empty otherwise), the instant Remaining can first grow is
//     bounded below by A - 1 - ceil(k·P/L) with k = target's Remaining -
//     Remaining - 1; a margin covers float64 rounding. A meter with L = 0
//     only forgets its level at A: constant until then.
//     For a sliding log or sliding window that is partly used and not the
//     rule that denies at cost-1 distance, the Outcome does not reveal when
//     Remaining grows: not predictable.
//
// A denial is remembered until the earliest of these instants, and only for
// its cost, or a larger cost when every rule is kindFixed or kindWhole (for
// the other kinds a larger cost waits longer by an amount the Outcome does
// not reveal). A denial with an unknown unit, a Reset capped at
// MaxWaitMicros, or no instant at all (denied forever with Reset 0) is not
// remembered.

// kind is how one rule's Outcome evolves while the state is untouched.
type kind uint8

const (
	kindFixed kind = iota + 1
	kindWhole
	kindLinear
)

// memo is one rule of a remembered denial: the rule as it was checked and
// what its Outcome will be at any instant before the variant expires.
type memo struct {
	rule      limit.Rule
	kind      kind
	allowed   bool // kindLinear: Allowed
	remaining uint64
	at        limit.Micros // kindFixed, kindLinear: A, where Reset reaches 0
}

// variant is one remembered denial of an identity: its rules, the cost that
// was denied, and until when the memos hold.
type variant struct {
	memos   []memo
	cost    uint64
	until   limit.Micros // exclusive: the earliest instant a memo may change
	stretch bool         // a larger cost is answered too: every memo is kindFixed or kindWhole
}

// maxReset is the largest Reset that still counts down linearly: pkg/limit
// caps every Reset at MaxWaitMicros.
const maxReset = time.Duration(limit.MaxWaitMicros) * time.Microsecond

// remember returns the variant that answers rules and cost n like d, the
// inner backend's denial at now, or ok false when d is not predictable.
func remember(rules []limit.Rule, n uint64, d limit.Decision, now limit.Micros) (v variant, ok bool) {
	if d.Allowed || n == 0 || len(rules) == 0 || len(d.Outcomes) != len(rules) {
		return variant{}, false
	}
	v = variant{memos: make([]memo, len(rules)), cost: n, stretch: true}
	finite := false
	for i, r := range rules {
		o := d.Outcomes[i]
		if r.PeriodMicros() <= 0 || o.Reset >= maxReset {
			return variant{}, false
		}
		m := memo{rule: r, remaining: o.Remaining}
		reset := o.Reset.Microseconds()
		capacity := r.Capacity()
		var until limit.Micros
		switch {
		case r.Algorithm == limit.FixedWindow:
			if reset <= 0 {
				return variant{}, false
			}
			m.kind, m.at = kindFixed, now+reset
			until = m.at
		case o.Remaining == capacity && reset == 0:
			m.kind = kindWhole
		case reset <= 0:
			return variant{}, false
		case !o.Allowed && n <= capacity && o.Remaining+1 == n:
			m.kind, m.at = kindLinear, now+reset
			until = m.at
		case r.Algorithm.IsMeter():
			m.kind, m.allowed, m.at = kindLinear, o.Allowed, now+reset
			until = meterUntil(r, n, o, m.at)
		default:
			return variant{}, false
		}
		if m.kind == kindLinear {
			v.stretch = false
		}
		if m.kind != kindWhole {
			if !finite || until < v.until {
				v.until = until
			}
			finite = true
		}
		v.memos[i] = m
	}
	if !finite || v.until <= now {
		return variant{}, false
	}
	return v, true
}

// meterUntil is the first instant at which a meter's floored Remaining may
// differ from o.Remaining, given A = at, the instant its level reaches its
// target: capacity - n when o denies a cost it can hold, empty otherwise.
func meterUntil(r limit.Rule, n uint64, o limit.Outcome, at limit.Micros) limit.Micros {
	target := r.Capacity() // Remaining once the level is empty
	if !o.Allowed && n <= target {
		target = n // Remaining once the cost is admitted
	}
	if r.Limit == 0 || o.Remaining+1 >= target {
		return at
	}
	k := float64(target - o.Remaining - 1)
	p, l := float64(r.PeriodMicros()), float64(r.Limit)
	perUnit := p / l                                               // µs to drain one unit
	margin := 2 + math.Ceil(float64(r.Capacity())*perUnit*0x1p-45) // float64 rounding of the level, with room
	wait := math.Ceil(k*perUnit) + 1 + margin
	if !(wait < float64(limit.MaxWaitMicros)) {
		return math.MinInt64
	}
	return at - int64(wait)
}

// matches reports whether the variant was made for exactly these rules, as
// far as the decision depends on them: algorithm, period, time zone, limit
// and burst (not the name).
func (v *variant) matches(rules []limit.Rule) bool {
	if len(rules) != len(v.memos) {
		return false
	}
	for i := range rules {
		if !sameRule(&rules[i], &v.memos[i].rule) {
			return false
		}
	}
	return true
}

// sameRules reports whether v and w were made for the same rules.
func (v *variant) sameRules(w *variant) bool {
	if len(v.memos) != len(w.memos) {
		return false
	}
	for i := range v.memos {
		if !sameRule(&v.memos[i].rule, &w.memos[i].rule) {
			return false
		}
	}
	return true
}

// sameRule compares what a decision depends on. Time zones compare by
// pointer: a reloaded config brings new pointers, which only costs misses.
func sameRule(a, b *limit.Rule) bool {
	return a.Algorithm == b.Algorithm && a.Unit == b.Unit && a.Multiplier == b.Multiplier &&
		a.Limit == b.Limit && a.Burst == b.Burst && a.Location == b.Location
}

// answers reports whether the variant answers cost n at now.
func (v *variant) answers(n uint64, now limit.Micros) bool {
	return now < v.until && (n == v.cost || (n > v.cost && v.stretch))
}

// answer fills out (len(v.memos) long) with the Outcomes the inner backend
// would give for cost n at now, and returns the Decision. The caller has
// checked answers(n, now).
func (v *variant) answer(n uint64, now limit.Micros, out []limit.Outcome) limit.Decision {
	for i := range v.memos {
		m := &v.memos[i]
		var o limit.Outcome
		switch m.kind {
		case kindFixed:
			o = limit.Outcome{Allowed: n <= m.remaining, Remaining: m.remaining, Reset: micros(m.at - now)}
		case kindLinear:
			o = limit.Outcome{Allowed: m.allowed, Remaining: m.remaining, Reset: micros(m.at - now)}
		case kindWhole:
			o = limit.Outcome{Allowed: n <= m.remaining, Remaining: m.remaining}
		}
		out[i] = o
	}
	d := limit.Decision{Outcomes: out}
	d.Bind()
	return d
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
