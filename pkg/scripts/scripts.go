// Package scripts holds sluice's Lua scripts for Redis, embedded with
// go:embed, and the one place that builds their arguments and reads their
// replies.
//
// The decide script decides all rules of one descriptor atomically, reproducing
// pkg/limit's arithmetic exactly. Its source is the .lua files of this
// directory, joined in a fixed order (decideParts); CONTRACT.md is its contract
// (keys, KEYS, every ARGV slot and unit, the reply). AppendKeys, AppendHead
// and a PrepareRule'd RuleArgs per rule (which formats each rule's slots
// once), and ParseDecideInts are the Go half of that contract and use the
// same names.
//
// Two questions this package answers in one hop. How a descriptor becomes
// a Redis key: pkg/identity encodes it, AppendKeys (keys.go) wraps the
// identity as <prefix>{<identity>}, and CONTRACT.md ("Keys") specifies it.
// Where the token bucket's refill is computed for Redis: drain in
// meter.lua, the twin of drain in pkg/limit/meter.go (token bucket: tokens
// = capacity − level; refill = drain).
//
// The package knows pkg/limit (the semantics it mirrors) and nothing of
// connections, key prefixes or clusters: pkg/backend/redis owns those.
package scripts

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// lua holds the decide script's parts.
//
//go:embed *.lua
var lua embed.FS

// decideParts are the files of the decide script, in the order they are
// joined: each file's locals are visible to the files after it, so a file
// comes after those it uses (decide.lua opens with why). The order is
// fixed, so the joined source, and its SHA-1, change only when a file does.
var decideParts = []string{
	"decide.lua",         // shared locals
	"lean.lua",           // the window path: fixed windows, window keys
	"general.lua",        // opens define_general: the general way
	"arith.lua",          // ~ limit/arith.go
	"window.lua",         // ~ limit/window.go
	"state.lua",          // ~ limit/state.go: loading states
	"fixed.lua",          // ~ limit/fixed.go
	"sliding_window.lua", // ~ limit/sliding_window.go
	"meter.lua",          // ~ limit/meter.go
	"sliding_log.lua",    // ~ limit/sliding_log.go
	"rule.lua",           // ~ limit/rule.go: the rules from ARGV
	"decision.lua",       // ~ limit/decision.go: check, bind, apply, reply
	"batch.lua",          // closes define_general; one descriptor, or a batch
}

// resetParts are the files of the reset script (ResetScript).
var resetParts = []string{"reset.lua"}

// join returns the files of fsys named by parts, concatenated in order,
// each ending with a newline.
func join(fsys embed.FS, parts []string) string {
	var b strings.Builder
	for _, name := range parts {
		src, err := fsys.ReadFile(name)
		if err != nil {
			panic("scripts: " + err.Error()) // a name above without its file: a build mistake
		}
		b.Write(src)
		if len(src) > 0 && src[len(src)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Script is one embedded Lua script. It is a value, safe to copy and to
// share between goroutines; the zero Script names no script.
type Script struct {
	// Source is the Lua text, for SCRIPT LOAD and EVAL.
	Source string
	// SHA1 is the hex SHA-1 of Source, the name EVALSHA runs it by.
	SHA1 string
}

func newScript(src string) Script {
	sum := sha1.Sum([]byte(src))
	return Script{Source: src, SHA1: hex.EncodeToString(sum[:])}
}

// DecideScript returns the decide script: one call decides every rule of one
// descriptor. CONTRACT.md is its contract.
func DecideScript() Script { return decide }

// Library is the decide script as a Redis function library (FUNCTION LOAD,
// Redis 7+): the same parts, whose functions Redis creates once, when the
// library loads, instead of on every call. FCALL Function runs what
// EVALSHA DecideScript().SHA1 runs, with the same KEYS, ARGV and reply.
type Library struct {
	// Source is the library's code, for FUNCTION LOAD.
	Source string
	// Name is the library's name and Function the name of its one
	// function. Both hold the SHA-1 of the decide script, so that
	// instances running different versions of sluice on one Redis load
	// libraries side by side instead of replacing each other's.
	Name, Function string
}

// DecideLibrary returns the decide script as a function library.
func DecideLibrary() Library { return library }

// ResetScript returns the reset script: one call forgets chosen rules'
// state for one descriptor, atomically with respect to the decide script.
// Its KEYS and ARGV come from ResetArgs; CONTRACT.md describes it.
func ResetScript() Script { return reset }

// The scripts are computed once; they are never modified.
var (
	decide  = newScript(join(lua, decideParts) + evalTail)
	library = newLibrary(join(lua, decideParts), decide.SHA1)
	reset   = newScript(join(lua, resetParts))
)

// evalTail ends the decide script run by EVAL and EVALSHA: batch.lua's
// decide_call decides the call.
const evalTail = "return decide_call(KEYS, ARGV)\n"

// newLibrary wraps the decide script's parts as a function library named
// after the script's SHA-1 (sha), whose one function is decide_call.
func newLibrary(parts, sha string) Library {
	l := Library{Name: "sluice_" + sha[:16], Function: "sluice_decide_" + sha[:16]}
	l.Source = "#!lua name=" + l.Name + "\n" + parts +
		"redis.register_function('" + l.Function + "', decide_call)\n"
	return l
}

// MaxExact is 2^53: a Lua number (a float64) holds every integer up to it
// exactly. AppendHead and PrepareRule clamp costs to MaxExact and limits and
// capacities to MaxExact-1, so every clamped cost is still larger than every
// clamped limit: for limits and bursts below 2^53 the script decides exactly
// as pkg/limit for every cost (a cost above the limit is denied either way,
// and a refund that large empties the rule either way). Limits of 2^53 per
// period and more are not represented exactly; no deployment configures
// them.
const MaxExact uint64 = 1 << 53

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

// Time says which clock a decide call runs on. The zero Time runs on
// Redis's clock (TIME) with At 0, the epoch; set At to the instance's
// clock whenever a rule may be calendar-aligned.
type Time struct {
	// Fixed makes the script use At as now instead of Redis's TIME. For
	// tests only: production instances must share Redis's clock.
	Fixed bool
	// At is the test instant when Fixed. Otherwise it is the calling
	// instance's own clock, used only to compute the calendar windows
	// around the present (decide.lua picks the one that holds Redis's now).
	At limit.Micros
}

// ArgCount returns at most how many ARGV slots a decide call for n rules
// takes (exactly, when every rule is a calendar-aligned fixed window), for
// sizing a buffer. In a batch, each descriptor takes at most ArgCount of
// its rules, and the call two slots more.
func ArgCount(n int) int { return decideHead + (ruleSlots+calendarSlots)*n }

// AppendHead appends the first three ARGV slots of a single-descriptor
// decide call: now, N and the mode ("0" take, "1" refund, "2" charge). The cost goes as an integer, which
// go-redis writes as the decimal string the script reads; integers below
// 256 box without allocating, so the common costs cost nothing here.
func AppendHead(dst []any, cost limit.Cost, clock Time) []any {
	return appendCost(append(dst, nowArg(clock)), cost)
}

// nowArg is ARGV[1]: the test instant, or "" for Redis's clock.
func nowArg(clock Time) any {
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
	return append(dst, min(cost.N, MaxExact), mode)
}

// AppendBatchHead appends the first two ARGV slots of a batch call (one
// call deciding several descriptors, each as its own call would; see
// CONTRACT.md, "Batches"): now, and "b". AppendBatchItem follows, once
// per descriptor.
func AppendBatchHead(dst []any, clock Time) []any {
	return append(dst, nowArg(clock), any("b"))
}

// AppendTogetherHead is AppendBatchHead for a batch decided together: if
// any descriptor is denied, none consumes (CONTRACT.md, "Batches decided
// together"). The items are the same.
func AppendTogetherHead(dst []any, clock Time) []any {
	return append(dst, nowArg(clock), any("t"))
}

// AppendBatchItem appends one descriptor's slots of a batch call: its
// number of KEYS (nkeys: those AppendKeys gave it, which the call's KEYS
// hold in the same order as its items), its number of slots after that
// count, N, refund and its rules' slots.
func AppendBatchItem(dst []any, nkeys int, cost limit.Cost, rules []*RuleArgs, clock Time) []any {
	na := 2
	for _, a := range rules {
		na += ruleSlots
		if a.calendar {
			na += calendarSlots
		}
	}
	dst = appendCost(append(dst, nkeys, na), cost)
	for _, a := range rules {
		dst = a.Append(dst, clock)
	}
	return dst
}

// RepeatItem is the one slot of a batch item that decides the next
// descriptor with the previous item's slots: its number of KEYS, of slots,
// its cost and its rules' slots, the same values (CONTRACT.md, "Batches").
// Its KEYS are its own. The batch's first item cannot be one.
const RepeatItem = "="

// AppendRepeatItem appends a RepeatItem.
func AppendRepeatItem(dst []any) []any {
	return append(dst, any(RepeatItem)) // a boxed constant: no allocation
}

// RuleArgs holds the ARGV slots of one rule that depend on the rule alone
// (alg, L, C, P, id), formatted and boxed once, so that deciding the same
// rule again appends them without formatting or allocating. It is immutable
// and safe for concurrent use. Build it with PrepareRule.
type RuleArgs struct {
	alg, limit, capacity, period, id any
	// calendar is set for a calendar-aligned fixed window, whose five
	// window slots depend on the clock and are computed on every Append.
	calendar bool
	// ownKey: the rule keeps its state in a key of its own (OwnsKey).
	ownKey bool
	// idString is the rule's id, unboxed, for its key.
	idString string
	rule     limit.Rule
}

// PrepareRule returns the RuleArgs of r. It fails for an algorithm or unit
// outside the known ones, and for a rule whose id (limit.Rule.ID, which
// names a time zone) holds a space or a '|', which separate the counter
// key's records.
func PrepareRule(r limit.Rule) (*RuleArgs, error) {
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
	return &RuleArgs{
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

// Append appends the rule's ARGV slots to dst: five, and five more for a
// calendar-aligned fixed window, which alone allocates (its window slots,
// computed around clock.At).
func (a *RuleArgs) Append(dst []any, clock Time) []any {
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

// formatCount writes a limit or capacity clamped to MaxExact-1.
func formatCount(n uint64) string {
	return strconv.FormatUint(min(n, MaxExact-1), 10)
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

// ErrReply reports a reply that does not have the decide script's shape, or whose
// binding disagrees with limit.Decision.Bind: a bug, never a Redis outage.
var ErrReply = errors.New("unexpected decide reply")

// ParseBatchInts reads the reply of the next descriptor of a batch call
// from the start of ints (the call's whole reply, as integers, less the
// descriptors read before) into a Decision for len(outcomes) rules, and
// returns the rest of ints. A descriptor the script failed (its own call
// would have had an error reply) gives an error holding the script's
// message, and the rest.
func ParseBatchInts(ints []int64, outcomes []limit.Outcome) (d limit.Decision, rest []int64, err error) {
	n, ok, failed := NextBatchItem(ints, len(outcomes))
	switch {
	case !ok:
		return d, nil, fmt.Errorf("%w: %d values left for a descriptor of %d rules", ErrReply, len(ints), len(outcomes))
	case failed != nil:
		return d, ints[n:], failed
	}
	d, err = ParseDecideInts(ints[:n], outcomes)
	return d, ints[n:], err
}

// ItemFailed is the first integer of the reply of a descriptor of a batch
// that the script failed, followed by the length of the error message and
// its bytes: -(2^53 + 2), which no decided descriptor's reply starts with
// (CONTRACT.md, "Batches").
const ItemFailed = -(1<<53 + 2)

// NextBatchItem returns the length n of the reply of the next descriptor
// of a batch call, of rules rules, at the start of ints, and failed, the
// script's error (holding its message), when it failed the descriptor; ok
// is false if ints cannot hold it.
func NextBatchItem(ints []int64, rules int) (n int, ok bool, failed error) {
	if len(ints) >= 2 && ints[0] == ItemFailed {
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
	n = ReplyLen(rules)
	return n, len(ints) >= n, nil
}

// ReplyLen returns how many integers the decide script replies for a
// descriptor of n rules that it decided: two for one rule (its remaining,
// or -1 minus it when denied, then its reset), else allowed, binding and
// three per rule.
func ReplyLen(n int) int {
	if n == 1 {
		return 2
	}
	return 2 + 3*n
}

// ParseDecideInts reads the decide script's reply, already read as integers (as
// go-redis's IntSliceCmd reads it, without boxing each one), into a
// Decision for len(outcomes) rules. The Decision's Outcomes are outcomes,
// filled in: a caller deciding several checks can hand each a part of one
// slice.
func ParseDecideInts(ints []int64, outcomes []limit.Outcome) (limit.Decision, error) {
	n := len(outcomes)
	if len(ints) != ReplyLen(n) {
		return limit.Decision{}, fmt.Errorf("%w: %d values for %d rules", ErrReply, len(ints), n)
	}
	d := limit.Decision{Outcomes: outcomes}
	if n == 1 {
		return parseOneRule(ints[0], ints[1], d)
	}
	for i := range d.Outcomes {
		a, rem, reset := ints[2+3*i], ints[3+3*i], ints[4+3*i]
		if rem < 0 || reset < 0 {
			return limit.Decision{}, fmt.Errorf("%w: rule %d has remaining %d, reset %d", ErrReply, i, rem, reset)
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
			ErrReply, ints[0], ints[1], d.Allowed, d.Binding)
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
		return limit.Decision{}, fmt.Errorf("%w: one rule replies %d, reset %d", ErrReply, x, reset)
	}
	d.Outcomes[0] = limit.Outcome{Allowed: allowed, Remaining: uint64(rem), Reset: time.Duration(reset) * time.Microsecond}
	d.Bind()
	return d, nil
}
