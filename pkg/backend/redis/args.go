package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// maxExact is 2^53: a Lua number (a float64) holds every integer up to it
// exactly. appendHead and prepareRule clamp costs to maxExact and limits and
// capacities to maxExact-1, so every clamped cost is still larger than every
// clamped limit: for limits and bursts below 2^53 the script decides exactly
// as pkg/limit for every cost (a cost above the limit is denied either way,
// and a refund that large empties the rule either way). Limits of 2^53 per
// period and more are not represented exactly; no deployment configures
// them.
const maxExact uint64 = 1 << 53

// The ARGV layout of the decide script: decideHead slots, then ruleSlots per rule,
// and calendarSlots more for a calendar-aligned fixed window.
const (
	decideHead    = 3
	ruleSlots     = 5
	calendarSlots = 5
)

// Algorithm codes of the decide script's ARGV alg slot.
const (
	algNone    = "0" // unknown unit: admits only peeks and refunds
	algFixed   = "1"
	algLog     = "2"
	algSliding = "3"
	algMeter   = "4"
	// algCalendar is a fixed window aligned to a time zone's calendar,
	// followed by calendarSlots window slots.
	algCalendar = "5"
)

// scriptClock says which clock a decide call runs on. The zero scriptClock runs on
// Redis's clock (TIME) with At 0, the epoch; set At to the instance's
// clock whenever a rule may be calendar-aligned.
type scriptClock struct {
	// Fixed makes the script use At as now instead of Redis's TIME. For
	// tests only: production instances must share Redis's clock.
	Fixed bool
	// At is the test instant when Fixed. Otherwise it is the calling
	// instance's own clock, used only to compute the calendar windows
	// around the present (decide.lua picks the one that holds Redis's now).
	At limit.Micros
}

// argCount returns at most how many ARGV slots a decide call for n rules
// takes (exactly, when every rule is a calendar-aligned fixed window), for
// sizing a buffer. In a batch, each descriptor takes at most argCount of
// its rules, and the call two slots more.
func argCount(n int) int { return decideHead + (ruleSlots+calendarSlots)*n }

// appendHead appends the first three ARGV slots of a single-descriptor
// decide call: now, N and the mode ("0" take, "1" refund, "2" charge). The cost goes as an integer, which
// go-redis writes as the decimal string the script reads; integers below
// 256 box without allocating, so the common costs cost nothing here.
func appendHead(dst []any, cost limit.Cost, clock scriptClock) []any {
	return appendCost(append(dst, nowArg(clock)), cost)
}

// nowArg is ARGV[1]: the test instant, or "" for Redis's clock.
func nowArg(clock scriptClock) any {
	if clock.Fixed {
		return strconv.FormatInt(clock.At, 10)
	}
	return any("") // boxed constant: no allocation
}

// appendCost appends N and the mode.
func appendCost(dst []any, cost limit.Cost) []any {
	mode := any("0") // boxed constants: no allocation
	switch {
	case cost.Refund:
		mode = any("1")
	case cost.Charge:
		mode = any("2")
	}
	return append(dst, min(cost.N, maxExact), mode)
}

// appendBatchHead appends the first two ARGV slots of a batch call (one
// call deciding several descriptors, each as its own call would; see
// CONTRACT.md, "Batches"): now, and "b". appendBatchItem follows, once
// per descriptor.
func appendBatchHead(dst []any, clock scriptClock) []any {
	return append(dst, nowArg(clock), any("b"))
}

// appendTogetherHead is appendBatchHead for a batch decided together: if
// any descriptor is denied, none consumes (CONTRACT.md, "Batches decided
// together"). The items are the same.
func appendTogetherHead(dst []any, clock scriptClock) []any {
	return append(dst, nowArg(clock), any("t"))
}

// appendBatchItem appends one descriptor's slots of a batch call: its
// number of KEYS (nkeys: those appendKeys gave it, which the call's KEYS
// hold in the same order as its items), its number of slots after that
// count, N, refund and its rules' slots.
func appendBatchItem(dst []any, nkeys int, cost limit.Cost, rules []*ruleArgs, clock scriptClock) []any {
	na := 2
	for _, a := range rules {
		na += ruleSlots
		if a.calendar {
			na += calendarSlots
		}
	}
	dst = appendCost(append(dst, nkeys, na), cost)
	for _, a := range rules {
		dst = a.appendTo(dst, clock)
	}
	return dst
}

// repeatItem is the one slot of a batch item that decides the next
// descriptor with the previous item's slots: its number of KEYS, of slots,
// its cost and its rules' slots, the same values (CONTRACT.md, "Batches").
// Its KEYS are its own. The batch's first item cannot be one.
const repeatItem = "="

// appendRepeatItem appends a repeatItem.
func appendRepeatItem(dst []any) []any {
	return append(dst, any(repeatItem)) // a boxed constant: no allocation
}

// ruleArgs holds the ARGV slots of one rule that depend on the rule alone
// (alg, L, C, P, id), formatted and boxed once, so that deciding the same
// rule again appends them without formatting or allocating. It is immutable
// and safe for concurrent use. Build it with prepareRule.
type ruleArgs struct {
	alg, limit, capacity, period, id any
	// calendar is set for a calendar-aligned fixed window, whose five
	// window slots depend on the clock and are computed on every appendTo.
	calendar bool
	// ownKey: the rule keeps its state in a key of its own (ownsKey).
	ownKey bool
	// idString is the rule's id, unboxed, for its key.
	idString string
	rule     limit.Rule
}

// prepareRule returns the ruleArgs of r. It fails for an algorithm or unit
// outside the known ones, and for a rule whose id (limit.Rule.ID, which
// names a time zone) holds a space or a '|', which separate the counter
// key's records.
func prepareRule(r limit.Rule) (*ruleArgs, error) {
	if r.Algorithm < limit.FixedWindow || r.Algorithm > limit.GCRA {
		return nil, fmt.Errorf("unknown algorithm %d", int(r.Algorithm))
	}
	if r.Unit < limit.UnitUnknown || r.Unit > limit.Year {
		return nil, fmt.Errorf("unknown unit %d", int(r.Unit))
	}
	id := r.ID()
	if strings.ContainsAny(id, " |") {
		return nil, fmt.Errorf("rule id %q holds a space or '|'", id)
	}
	p := r.PeriodMicros()
	alg := algCode(r.Algorithm)
	if p <= 0 {
		alg = algNone
	}
	calendar := alg == algFixed && r.Location != nil
	if calendar {
		alg = algCalendar
	}
	return &ruleArgs{
		alg:      alg,
		limit:    formatCount(r.Limit),
		capacity: formatCount(r.Capacity()),
		period:   strconv.FormatInt(p, 10),
		id:       id,
		calendar: calendar,
		ownKey:   alg == algLog,
		idString: id,
		rule:     r,
	}, nil
}

// appendTo appends the rule's ARGV slots to dst: five, and five more for a
// calendar-aligned fixed window, which alone allocates (its window slots,
// computed around clock.At).
func (a *ruleArgs) appendTo(dst []any, clock scriptClock) []any {
	dst = append(dst, a.alg, a.limit, a.capacity, a.period, a.id)
	if !a.calendar {
		return dst
	}
	w, s := calendarSegments(a.rule, clock.At)
	return append(dst, strconv.FormatInt(w, 10),
		strconv.FormatInt(s[0], 10), strconv.FormatInt(s[1], 10),
		strconv.FormatInt(s[2], 10), strconv.FormatInt(s[3], 10))
}

func algCode(a limit.Algorithm) string {
	switch a {
	case limit.SlidingLog:
		return algLog
	case limit.SlidingWindow:
		return algSliding
	case limit.TokenBucket, limit.LeakyBucket, limit.GCRA:
		return algMeter
	}
	return algFixed
}

// formatCount writes a limit or capacity clamped to maxExact-1.
func formatCount(n uint64) string {
	return strconv.FormatUint(min(n, maxExact-1), 10)
}

// dayMicros is one day of elapsed time in µs.
const dayMicros = 86400 * 1_000_000

// calendarSegments returns, for a calendar-aligned fixed-window rule, the
// three contiguous segments [s0,s1) [s1,s2) [s2,s3) around at, and the
// width w of the windows inside a segment (0: the segment is the window).
//
// Day, week, month and year rules: the segments are the previous, current
// and next windows of r.Window. Second, minute and hour rules: the segments
// are the local days (windows restart at local midnight), and w is the
// window width; limit.Rule.Window computes start = dayStart +
// floor((t - dayStart) / w) × w, capped at the next day's start, which is
// what decide.lua computes inside the segment.
func calendarSegments(r limit.Rule, at limit.Micros) (w int64, s [4]limit.Micros) {
	seg := r
	switch r.Unit {
	case limit.Second, limit.Minute, limit.Hour:
		seg = limit.Rule{Unit: limit.Day, Location: r.Location}
		w = min(r.PeriodMicros(), dayMicros)
	}
	cs, ce := seg.Window(at)
	ps, pe := seg.Window(cs - 1)
	ns, ne := seg.Window(ce)
	s = [4]limit.Micros{cs, cs, ce, ce}
	// A neighbour that does not join the current segment (a zone whose
	// calendar misbehaves) is left out: its segment stays empty.
	if pe == cs && ps < cs {
		s[0] = ps
	}
	if ns == ce && ne > ce {
		s[3] = ne
	}
	return w, s
}

// errReply reports a reply that does not have the decide script's shape, or whose
// binding disagrees with limit.Decision.Bind: a bug, never a Redis outage.
var errReply = errors.New("unexpected decide reply")

// parseBatchInts reads the reply of the next descriptor of a batch call
// from the start of ints (the call's whole reply, as integers, less the
// descriptors read before) into a Decision for len(outcomes) rules, and
// returns the rest of ints. A descriptor the script failed (its own call
// would have had an error reply) gives an error holding the script's
// message, and the rest.
func parseBatchInts(ints []int64, outcomes []limit.Outcome) (d limit.Decision, rest []int64, err error) {
	n, ok, failed := nextBatchItem(ints, len(outcomes))
	switch {
	case !ok:
		return d, nil, fmt.Errorf("%w: %d values left for a descriptor of %d rules", errReply, len(ints), len(outcomes))
	case failed != nil:
		return d, ints[n:], failed
	}
	d, err = parseDecideInts(ints[:n], outcomes)
	return d, ints[n:], err
}

// itemFailed is the first integer of the reply of a descriptor of a batch
// that the script failed, followed by the length of the error message and
// its bytes: -(2^53 + 2), which no decided descriptor's reply starts with
// (CONTRACT.md, "Batches").
const itemFailed = -(1<<53 + 2)

// nextBatchItem returns the length n of the reply of the next descriptor
// of a batch call, of rules rules, at the start of ints, and failed, the
// script's error (holding its message), when it failed the descriptor; ok
// is false if ints cannot hold it.
func nextBatchItem(ints []int64, rules int) (n int, ok bool, failed error) {
	if len(ints) >= 2 && ints[0] == itemFailed {
		l := ints[1]
		if l < 0 || l > int64(len(ints)-2) {
			return 0, false, nil
		}
		msg := make([]byte, l)
		for i := range msg {
			msg[i] = byte(ints[2+i])
		}
		return 2 + int(l), true, errors.New(string(msg))
	}
	n = replyLen(rules)
	return n, len(ints) >= n, nil
}

// replyLen returns how many integers the decide script replies for a
// descriptor of n rules that it decided: two for one rule (its remaining,
// or -1 minus it when denied, then its reset), else allowed, binding and
// three per rule.
func replyLen(n int) int {
	if n == 1 {
		return 2
	}
	return 2 + 3*n
}

// parseDecideInts reads the decide script's reply, already read as integers (as
// go-redis's IntSliceCmd reads it, without boxing each one), into a
// Decision for len(outcomes) rules. The Decision's Outcomes are outcomes,
// filled in: a caller deciding several checks can hand each a part of one
// slice.
func parseDecideInts(ints []int64, outcomes []limit.Outcome) (limit.Decision, error) {
	n := len(outcomes)
	if len(ints) != replyLen(n) {
		return limit.Decision{}, fmt.Errorf("%w: %d values for %d rules", errReply, len(ints), n)
	}
	d := limit.Decision{Outcomes: outcomes}
	if n == 1 {
		return parseOneRule(ints[0], ints[1], d)
	}
	for i := range d.Outcomes {
		a, rem, reset := ints[2+3*i], ints[3+3*i], ints[4+3*i]
		if rem < 0 || reset < 0 {
			return limit.Decision{}, fmt.Errorf("%w: rule %d has remaining %d, reset %d", errReply, i, rem, reset)
		}
		d.Outcomes[i] = limit.Outcome{
			Allowed:   a == 1,
			Remaining: uint64(rem),
			Reset:     time.Duration(reset) * time.Microsecond,
		}
	}
	d.Bind()
	if d.Allowed != (ints[0] == 1) || int64(d.Binding) != ints[1] {
		return limit.Decision{}, fmt.Errorf("%w: script says allowed=%d binding=%d, Bind says %v %d",
			errReply, ints[0], ints[1], d.Allowed, d.Binding)
	}
	return d, nil
}

// parseOneRule reads the reply of a descriptor of one rule (x: its
// remaining, or -1 minus it when it was denied; reset in µs) into d.
func parseOneRule(x, reset int64, d limit.Decision) (limit.Decision, error) {
	allowed, rem := x >= 0, x
	if !allowed {
		rem = -1 - x
	}
	if rem < 0 || rem >= 1<<53 || reset < 0 { // a remaining is below 2^53
		return limit.Decision{}, fmt.Errorf("%w: one rule replies %d, reset %d", errReply, x, reset)
	}
	d.Outcomes[0] = limit.Outcome{Allowed: allowed, Remaining: uint64(rem), Reset: time.Duration(reset) * time.Microsecond}
	d.Bind()
	return d, nil
}
