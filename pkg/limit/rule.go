package limit

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Micros is an instant in microseconds since the Unix epoch (UTC). It is
// int64 so the Lua scripts, whose only number is a float64, hold it exactly
// (until the year 2255). The zero Micros is the epoch itself.
type Micros = int64

// MicrosOf converts t to Micros.
func MicrosOf(t time.Time) Micros { return t.UnixMicro() }

// Unit is the time unit of a rule, as in envoyproxy/ratelimit's config.
// The zero Unit is UnitUnknown: a rule with it has no period, admits only
// peeks and refunds, and keeps no state.
type Unit int

// The units. Their numeric values are sluice's own, not the Envoy enum's.
const (
	UnitUnknown Unit = iota
	Second
	Minute
	Hour
	Day
	Week
	Month
	Year
)

var unitNames = [...]string{"unknown", "second", "minute", "hour", "day", "week", "month", "year"}

// String returns the lower-case config name of u ("second", "minute", ...).
func (u Unit) String() string {
	if u < 0 || int(u) >= len(unitNames) {
		return "unit(" + strconv.Itoa(int(u)) + ")"
	}
	return unitNames[u]
}

// ParseUnit parses a unit name case-insensitively ("second", "SECOND", ...).
// It rejects "unknown" and anything else not listed.
func ParseUnit(s string) (Unit, error) {
	l := strings.ToLower(s)
	for i := Second; i <= Year; i++ {
		if unitNames[i] == l {
			return i, nil
		}
	}
	return UnitUnknown, fmt.Errorf("invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", s)
}

// Seconds is the fixed length of one u, as envoyproxy/ratelimit counts it:
// a month is 30 days and a year 365 days. Calendar-aligned rules (those with
// a time zone) use real calendar lengths instead; see Rule.Window.
func (u Unit) Seconds() int64 {
	switch u {
	case Second:
		return 1
	case Minute:
		return 60
	case Hour:
		return 3600
	case Day:
		return 86400
	case Week:
		return 7 * 86400
	case Month:
		return 30 * 86400
	case Year:
		return 365 * 86400
	}
	return 0
}

// Algorithm selects how a rule counts. The zero Algorithm is FixedWindow.
type Algorithm int

// The algorithms. FixedWindow is the zero value: a rule without an
// algorithm behaves like envoyproxy/ratelimit.
const (
	// FixedWindow counts cost in windows of one period. Without a time zone
	// windows are aligned to the Unix epoch (as the reference does); with a
	// time zone they follow the local calendar (midnight, Monday, the 1st).
	FixedWindow Algorithm = iota
	// SlidingLog keeps the time of every admitted unit of cost and admits
	// when fewer than the limit fall in the last period. Exact; memory grows
	// with the limit.
	SlidingLog
	// SlidingWindow approximates a sliding log with two fixed-window
	// counters, weighting the previous window by how much of it still
	// overlaps the last period. O(1) memory; see docs/algorithms.md for its
	// worst-case error.
	SlidingWindow
	// TokenBucket holds up to Burst tokens, refilled continuously at Limit
	// per period; a request takes cost tokens.
	TokenBucket
	// LeakyBucket is a bucket of capacity Burst that drains continuously at
	// Limit per period; a request pours in cost. As a meter it admits
	// exactly what TokenBucket admits (it is its mirror image).
	LeakyBucket
	// GCRA is the generic cell rate algorithm: requests are spaced by
	// period/Limit with a tolerance of Burst requests. It admits exactly
	// what TokenBucket admits.
	GCRA
)

var algorithmNames = [...]string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "leaky_bucket", "gcra"}
var algorithmCodes = [...]string{"fw", "sl", "sw", "tb", "lb", "gc"}

// String returns the config name of a ("fixed_window", ...).
func (a Algorithm) String() string {
	if a < 0 || int(a) >= len(algorithmNames) {
		return "algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return algorithmNames[a]
}

// ParseAlgorithm parses a config algorithm name. The empty string means
// FixedWindow.
func ParseAlgorithm(s string) (Algorithm, error) {
	if s == "" {
		return FixedWindow, nil
	}
	if i := slices.Index(algorithmNames[:], strings.ToLower(s)); i >= 0 {
		return Algorithm(i), nil
	}
	return 0, fmt.Errorf("unknown algorithm %q (want one of %s)", s, strings.Join(algorithmNames[:], ", "))
}

// IsMeter reports whether a is one of the three equivalent continuous
// meters (token bucket, leaky bucket, GCRA): the algorithms whose state is
// a level draining at the rate, and the only ones that take a Burst.
func (a Algorithm) IsMeter() bool { return a == TokenBucket || a == LeakyBucket || a == GCRA }

// Rule is one limit: at most Limit units of cost per Multiplier×Unit,
// counted by Algorithm. The zero Multiplier means 1. Limit and Burst are in
// units of cost (Cost.N), per period; instants are Micros.
//
// The zero Rule (FixedWindow, UnitUnknown) has no period: it admits only
// peeks and refunds. A Rule is a value: it is safe to copy and compare, and
// its methods are safe for concurrent use (none of them changes the Rule;
// Check, Apply and Expiry change only the State they are given).
type Rule struct {
	// Name identifies the rule in responses, metrics and `replaces`. Optional.
	Name string
	// Algorithm counts the cost. The zero value is FixedWindow.
	Algorithm Algorithm
	// Unit and Multiplier give the period: Multiplier×Unit.
	Unit       Unit
	Multiplier uint32
	// Limit is requests_per_unit: the cost admitted per period. 0 denies
	// every request that has a cost.
	Limit uint64
	// Burst is the bucket capacity of the meters (TokenBucket, LeakyBucket,
	// GCRA). 0 means Limit. Ignored by the window algorithms.
	Burst uint64
	// Location, when not nil, aligns FixedWindow windows to the calendar in
	// that time zone. Nil means windows aligned to the Unix epoch.
	Location *time.Location
	// Slot tells apart the unnamed meters (TokenBucket, LeakyBucket, GCRA)
	// of one descriptor: the config compiler numbers them 0, 1, ... in
	// file order. It names their state (ID) and nothing else; other rules
	// ignore it.
	Slot uint8
}

// multiplier returns Multiplier, treating 0 as 1.
func (r Rule) multiplier() int64 {
	if r.Multiplier == 0 {
		return 1
	}
	return int64(r.Multiplier)
}

// Period is the nominal length of the rule's period: Multiplier×Unit, with a
// month of 30 days and a year of 365, capped at MaxPeriodMicros. Calendar
// windows may be shorter or longer (DST days, 31-day months); Window gives
// their exact bounds. It is 0 for an unknown unit.
func (r Rule) Period() time.Duration {
	return time.Duration(r.PeriodMicros()) * time.Microsecond
}

// PeriodMicros is Period in microseconds: Multiplier×Unit, saturating at
// MaxPeriodMicros (100 years) so that huge multipliers cannot overflow.
func (r Rule) PeriodMicros() int64 {
	unit := r.Unit.Seconds() * 1e6
	if unit <= 0 {
		return 0
	}
	if m := r.multiplier(); m <= MaxPeriodMicros/unit {
		return m * unit
	}
	return MaxPeriodMicros
}

// Capacity is the most cost the rule can hold at once: Burst for the meters
// (Limit when Burst is 0), Limit for the window algorithms.
func (r Rule) Capacity() uint64 {
	if r.Algorithm.IsMeter() && r.Burst != 0 {
		return r.Burst
	}
	return r.Limit
}

// ID names the rule's stored state. For the window algorithms it changes
// when the algorithm, the period or the time zone changes, and not when
// Limit, Burst or Name change, so raising a limit keeps the usage already
// counted. A meter's state (TokenBucket, LeakyBucket, GCRA: a level of
// cost and an instant, the same for all three) means the same whatever its
// limit, period, burst or which of the three counts it, so a meter's ID
// names only the meter: "me.n" and a hash of its Name, or "me." and its
// Slot when it has no name (a meter without a period, of an unknown unit,
// keeps no state and keeps the window rules' form of id). A token bucket going from 10 per second to 600
// per minute, or to a leaky bucket, keeps its level; a renamed meter
// starts empty. It holds only [A-Za-z0-9._/+-].
func (r Rule) ID() string {
	if r.Algorithm.IsMeter() && r.PeriodMicros() > 0 {
		return meterID(r.Name, r.Slot)
	}
	var b strings.Builder
	if r.Algorithm >= 0 && int(r.Algorithm) < len(algorithmCodes) {
		b.WriteString(algorithmCodes[r.Algorithm])
	} else { // invalid rules still get a distinct ID instead of a panic
		b.WriteString("a" + strconv.Itoa(int(r.Algorithm)))
	}
	b.WriteByte('.')
	b.WriteString(strconv.FormatInt(r.multiplier(), 10))
	if r.Unit >= 0 && int(r.Unit) < len(unitNames) {
		b.WriteString(unitNames[r.Unit][:2]) // "mi"nute and "mo"nth differ
	} else {
		b.WriteString("u" + strconv.Itoa(int(r.Unit)))
	}
	if r.Location != nil {
		b.WriteByte('.')
		b.WriteString(r.Location.String())
	}
	return b.String()
}

// meterID is the ID of a meter called name (unnamed: the slot-th unnamed
// meter of its descriptor): "me.n" and the 64-bit FNV-1a hash of the name
// in hex, or "me." and the slot.
func meterID(name string, slot uint8) string {
	if name == "" {
		return "me." + strconv.Itoa(int(slot))
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return "me.n" + strconv.FormatUint(h.Sum64(), 16)
}

// String describes the rule for logs and /rlconfig, e.g.
// "burst: token_bucket 10/1s burst 30".
func (r Rule) String() string {
	var b strings.Builder
	if r.Name != "" {
		b.WriteString(r.Name)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "%s %d/%d %s", r.Algorithm, r.Limit, r.multiplier(), r.Unit)
	if r.Algorithm.IsMeter() && r.Burst != 0 {
		fmt.Fprintf(&b, " burst %d", r.Burst)
	}
	if r.Location != nil {
		fmt.Fprintf(&b, " in %s", r.Location)
	}
	return b.String()
}
