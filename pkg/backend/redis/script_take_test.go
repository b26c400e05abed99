package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// loopOnly is the decide script without the written-out take of the
// general way (decision.lua's TAKES): every descriptor of the general way
// through read_rules, load_states and decide_rules.
func loopOnly(t *testing.T) scripts.Script {
	return variant(t, "local TAKES = true\n", "local TAKES = false\n")
}

// takeOnly fails, with an error reply "loop" and after take returned nil,
// every descriptor of the general way that take does not decide.
func takesOnly(t *testing.T) scripts.Script {
	return variant(t, "    if t then return t end\n",
		"    if t then return t end\n    do return redis.error_reply('loop') end\n")
}

// takeRule is a random rule of the shapes take decides (a sliding window, a
// meter, an epoch-aligned fixed window), now and then one it does not (a
// calendar window, an unknown unit), with limits up to 2^53 - 1.
func takeRule(rng *rand.Rand, zones []*time.Location) limit.Rule {
	algs := []limit.Algorithm{limit.SlidingWindow, limit.SlidingWindow, limit.TokenBucket, limit.LeakyBucket, limit.GCRA, limit.FixedWindow}
	r := limit.Rule{
		Algorithm:  algs[rng.IntN(len(algs))],
		Unit:       []limit.Unit{limit.Second, limit.Second, limit.Minute, limit.Hour, limit.Day}[rng.IntN(5)],
		Multiplier: uint32(rng.IntN(3)),
		Limit:      []uint64{0, 1, 2, 3, 5, 8, 1000, 1 << 40, maxExact - 1}[rng.IntN(9)],
	}
	if r.Algorithm.IsMeter() && rng.IntN(2) == 0 {
		r.Burst = []uint64{1, 3, 12, 1 << 40, maxExact - 1}[rng.IntN(5)]
	}
	switch rng.IntN(25) {
	case 0:
		r.Algorithm, r.Location = limit.FixedWindow, zones[rng.IntN(len(zones))]
	case 1:
		r.Unit = limit.UnitUnknown
	}
	return r
}

// takeSeed returns what a test writes to a descriptor's counter key before
// deciding on it (false: nothing): records of ids no rule of rules has,
// fewer or more than MaxOtherStates, live or expired; an expired record of
// a rule's own id, or one live longer than the rule computes; records that
// do not parse; a key of another type.
func takeSeed(rng *rand.Rand, rules []limit.Rule, now limit.Micros) (v string, list, ok bool) {
	ms := now / 1000
	rec := func(id string, e int64) string { return fmt.Sprintf("%s %d 1 2", id, e) }
	var recs []string
	switch rng.IntN(9) {
	case 0, 1, 2:
		return "", false, false
	case 8: // a rule's own record, live far longer than its rule computes
		f := " 0 0"
		if rules[0].Algorithm == limit.SlidingWindow {
			f = " 0 0 0"
		}
		recs = append(recs, fmt.Sprintf("%s %d%s", rules[0].ID(), ms+864_000_000, f))
	case 3: // more than MaxOtherStates others, some soon expired
		for k := range 17 + rng.IntN(4) {
			recs = append(recs, rec(fmt.Sprintf("x%d.1mi", k), ms+int64(rng.IntN(400))))
		}
	case 4: // one other record
		recs = append(recs, rec("x.1ho", ms+100+int64(rng.IntN(3_600_000))))
	case 5: // a rule's own id, expired, then another
		recs = append(recs, rec(rules[0].ID(), ms-1), rec("x.1se", ms+500))
	case 6: // records that do not parse, empty runs
		recs = append(recs, rules[0].ID()+" 99999999999999 nan 2", "", "garbage")
	case 7:
		return "", true, true
	}
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	return strings.Join(recs, "|"), false, true
}

// TestTakeMatchesLimitAndLoop holds the general way's written-out take
// (decision.lua) to pkg/limit and to the general way's loop, on random
// descriptors of one to three rules of sliding windows, meters and fixed
// windows (the mixed descriptor), ids shared now and then, with random
// costs and modes (take, refund, charge, peek; costs above the limits;
// limits up to 2^53 - 1), over counter keys seeded with records of other
// ids (more than MaxOtherStates of them too), expired or unparsable
// records, or a key of another type. Three copies of each descriptor are
// decided: by the decide script, by the script without take (the loop),
// and by a script in which the loop fails, whose failed steps the loop's
// script then decides on the same copy -- that copy proves take decided
// the steps it counts, and that a take that gave up wrote nothing (a fixed
// window's count it took and put back included). Every step's replies,
// counter keys (byte for byte, with their TTL) and window keys must be
// the same; on a descriptor with no seeded record the decide script is
// held to limit.Decide by the harness too.
func TestTakeMatchesLimitAndLoop(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	loop, only := loopOnly(t), takesOnly(t)
	// Even scenarios run the decide script and the take-only variant as
	// function libraries (FCALL), where took and the fixed windows' values
	// are kept from one call to the next (and from one scenario's rules to
	// the next's); odd ones as scripts, which keep nothing between calls.
	lib, onlyLib := scripts.DecideLibrary(), libraryOf(t, only)
	for _, l := range []scripts.Library{lib, onlyLib} {
		if err := c.FunctionLoadReplace(ctx, l.Source).Err(); err != nil {
			t.Fatal(err)
		}
	}
	zones := []*time.Location{time.UTC, mustZone(t, "Asia/Shanghai")}
	scenarios, steps := 300, 40
	if testing.Short() {
		scenarios = 60
	}
	var taken, gaveUp, admitted, denied, seeded, mixed, siblings int
	for sc := range scenarios {
		rng := rand.New(rand.NewPCG(uint64(sc), 0x7a4e))
		rules := scenarioRules(rng, zones, takeRule)
		if len(rules) == 3 {
			mixed++
		}
		// Now and then the steps alternate between the rules and their
		// siblings of other limits and capacities (same ids, so the same
		// state): two configurations sharing a descriptor, whose slots
		// differ at the same positions from one call to the next.
		set := [][]limit.Rule{rules}
		if rng.IntN(4) == 0 {
			sib := slices.Clone(rules)
			for i := range sib {
				if sib[i].Algorithm.IsMeter() && rng.IntN(2) == 0 {
					sib[i].Burst = min(sib[i].Capacity()+1+uint64(rng.IntN(3)), maxExact-1)
				} else {
					sib[i].Limit = min(sib[i].Limit+1+uint64(rng.IntN(3)), maxExact-1)
				}
			}
			set = append(set, sib)
			siblings++
		}
		name := fmt.Sprintf("take%d", sc)
		h := newHarness(t, c, name, rules)
		gen := fside{side{c, loop, "g:{" + name + "}"}, ""}
		tk := fside{side{c, only, "t:{" + name + "}"}, ""}
		main := fside{side{c, scripts.DecideScript(), h.counter}, ""}
		if sc%2 == 0 {
			h.fcall, main.fn, tk.fn = lib.Function, lib.Function, onlyLib.Function
		}
		now := bases[0] + rng.Int64N(1_000_000)
		seed, list, withSeed := takeSeed(rng, rules, now)
		if withSeed {
			seeded++
			for _, k := range []string{h.counter, gen.key, tk.key} {
				var err error
				if list {
					err = c.RPush(ctx, k, "x").Err()
				} else {
					err = c.Set(ctx, k, seed, time.Hour).Err()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		var last limit.Decision
		for step := range steps {
			rules := set[rng.IntN(len(set))]
			h.rules = rules
			switch rng.IntN(6) {
			case 0: // the next edge of a rule's window, or 1µs before it
				if p := rules[rng.IntN(len(rules))].PeriodMicros(); p > 0 {
					now += p - now%p - rng.Int64N(2)
				}
			case 1: // when the last answer said to come back, or 1µs early
				if b := last.BindingOutcome(); b.Reset > 0 && now+b.Reset.Microseconds() < 1<<52 {
					now += b.Reset.Microseconds() - rng.Int64N(2)
				}
			case 2:
				now += rng.Int64N(3 * max(rules[0].PeriodMicros(), 1))
			default:
				now += rng.Int64N(300_000)
			}
			cost := limit.Cost{N: 1}
			switch rng.IntN(14) {
			case 0:
				cost.Refund = true
			case 1:
				cost.Charge = true
			case 2:
				cost.N = 0
			case 3:
				cost.N = maxExact + 1
			case 4:
				cost.N = uint64(rng.IntN(12))
			case 5:
				cost.N = min(rules[rng.IntN(len(rules))].Capacity(), maxExact) + uint64(rng.IntN(2)) - uint64(rng.IntN(2))
			}
			label := fmt.Sprintf("scenario %d step %d (rules %v, cost %+v)", sc, step, rules, cost)
			args, err := appendDecideArgs(nil, rules, cost, scriptClock{Fixed: true, At: now})
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			if withSeed {
				got, err = main.eval(ctx, args)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				if last, err = parseDecideInts(got, make([]limit.Outcome, len(rules))); err != nil {
					t.Fatalf("%s: %v", label, err)
				}
			} else {
				last = h.run(label, now, cost)
			}
			g, err := gen.eval(ctx, args)
			if err != nil {
				t.Fatalf("%s: the loop: %v", label, err)
			}
			want, err := parseDecideInts(g, make([]limit.Outcome, len(rules)))
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			if fmt.Sprint(last) != fmt.Sprint(want) {
				t.Fatalf("%s: the decide script says %+v, the loop %+v", label, last, want)
			}
			o, err := tk.eval(ctx, args)
			if err != nil && strings.Contains(err.Error(), "loop") {
				gaveUp++
				o, err = fside{side{c, loop, tk.key}, ""}.eval(ctx, args)
			} else if err == nil {
				taken++
			}
			if err != nil {
				t.Fatalf("%s: take's copy: %v", label, err)
			}
			if fmt.Sprint(o) != fmt.Sprint(g) {
				t.Fatalf("%s: take's copy replies %v, the loop %v", label, o, g)
			}
			sameCounter(t, c, label, h.counter, gen.key)
			sameCounter(t, c, label, tk.key, gen.key)
			sameWindowCounts(t, c, label, rules, now, h.counter, gen.key)
			sameWindowCounts(t, c, label, rules, now, tk.key, gen.key)
			if last.Allowed {
				admitted++
			} else {
				denied++
			}
		}
	}
	least := scenarios / 3 // the least count of each case: a third of a step per scenario
	if taken < 6*least || gaveUp < 6*least || admitted < 6*least || denied < 3*least || seeded < least/2 || mixed < least/2 || siblings < least/2 {
		t.Errorf("take decided %d steps and gave up %d; %d admitted, %d denied; %d scenarios seeded, %d of three rules, %d alternating with siblings: the scenarios do not exercise every case",
			taken, gaveUp, admitted, denied, seeded, mixed, siblings)
	}
	t.Logf("take decided %d steps and gave up %d; %d admitted, %d denied; %d scenarios seeded, %d of three rules, %d alternating with siblings", taken, gaveUp, admitted, denied, seeded, mixed, siblings)
}

// sameCounter fails unless the counter keys a and b hold the same value,
// byte for byte, of the same type, and expire within 2 s of each other
// (both TTLs come from the same test clock; Redis counts them from its
// own, which runs on between the two writes).
func sameCounter(t *testing.T, c *goredis.Client, step, a, b string) {
	t.Helper()
	ctx := context.Background()
	ta, tb := c.Type(ctx, a).Val(), c.Type(ctx, b).Val()
	if ta != tb {
		t.Fatalf("%s: %s is a %s, %s a %s", step, a, ta, b, tb)
	}
	if ta != "string" {
		return
	}
	va, vb := c.Get(ctx, a).Val(), c.Get(ctx, b).Val()
	if va != vb {
		t.Fatalf("%s: %s holds %q, %s %q", step, a, va, b, vb)
	}
	pa, pb := c.PTTL(ctx, a).Val(), c.PTTL(ctx, b).Val()
	if d := pa - pb; d > 2*time.Second || d < -2*time.Second {
		t.Fatalf("%s: %s PTTL %v, %s %v", step, a, pa, b, pb)
	}
}

// sameWindowCounts fails unless the window keys of rules at now under the
// counter keys a and b hold the same count (or are both absent), and each
// expires with its window. Not within 2 s of each other, as sameWindows
// requires: the loop writes a window key's count with SET ... PX, take with
// INCRBY, which keeps the expiry of the call that created the key -- on
// the test clock computed from that call's now, an earlier instant of the
// same window (on Redis's clock, the same window's end).
func sameWindowCounts(t *testing.T, c *goredis.Client, step string, rules []limit.Rule, now limit.Micros, a, b string) {
	t.Helper()
	ctx := context.Background()
	for _, r := range rules {
		if !windowRule(r) {
			continue
		}
		p := r.PeriodMicros()
		start := now - (now%p+p)%p
		slack := 600 * time.Second
		least := time.Duration((start+p-now+999)/1000)*time.Millisecond + slack - 30*time.Second
		most := time.Duration(p)*time.Microsecond + slack
		ka, kb := windowKey(a, r, now), windowKey(b, r, now)
		va, ea := c.Get(ctx, ka).Result()
		vb, eb := c.Get(ctx, kb).Result()
		if va != vb || (ea == nil) != (eb == nil) {
			t.Fatalf("%s: %s holds %q (%v), %s holds %q (%v)", step, ka, va, ea, kb, vb, eb)
		}
		if ea != nil {
			continue
		}
		for _, k := range []string{ka, kb} {
			if ttl := c.PTTL(ctx, k).Val(); ttl < least || ttl > most {
				t.Fatalf("%s: %s PTTL %v, want within [%v, %v]", step, k, ttl, least, most)
			}
		}
	}
}

// TestTakeDenialReadsOnce: when take leaves a call to the loop (here a
// denial), the loop decides on the value of the counter key take read: one
// GET of it per call, not two; and a denial writes nothing. For one
// sliding window, one token bucket, and the mixed descriptor denied by its
// sliding window (before take touched the fixed window: a GET of its key
// by the loop) and by its fixed window (take's INCRBY put back, then the
// loop's GET of the window key).
func TestTakeDenialReadsOnce(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	sw := limit.Rule{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 1}
	tb := limit.Rule{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 1}
	fw := limit.Rule{Unit: limit.Hour, Limit: 1}
	open := func(r limit.Rule) limit.Rule { r.Limit = 1000; return r }
	for _, tc := range []struct {
		name  string
		rules []limit.Rule
		want  map[string]int // commands of the denied call
	}{
		{"sliding window", []limit.Rule{sw}, map[string]int{"get": 1, "fcall": 1}},
		{"token bucket", []limit.Rule{tb}, map[string]int{"get": 1, "fcall": 1}},
		{"mixed, the sliding window denies", []limit.Rule{open(fw), sw, open(tb)}, map[string]int{"get": 2, "fcall": 1}},
		{"mixed, the fixed window denies", []limit.Rule{fw, open(sw), open(tb)}, map[string]int{"get": 2, "incrby": 1, "decrby": 1, "fcall": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib := scripts.DecideLibrary()
			if err := c.FunctionLoadReplace(ctx, lib.Source).Err(); err != nil {
				t.Fatal(err)
			}
			key := "d:{" + strings.ReplaceAll(tc.name, " ", "_") + "}"
			call := func() limit.Decision {
				args, err := appendDecideArgs(nil, tc.rules, limit.Cost{N: 1}, scriptClock{Fixed: true, At: now})
				if err != nil {
					t.Fatal(err)
				}
				reply, err := c.FCall(ctx, lib.Function, []string{key}, args...).Result()
				if err != nil {
					t.Fatal(err)
				}
				d, err := parseDecideReply(reply, len(tc.rules))
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			if d := call(); !d.Allowed {
				t.Fatalf("first call: %+v, want admitted", d)
			}
			before := c.Get(ctx, key).Val()
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if d := call(); d.Allowed {
				t.Fatalf("second call: %+v, want denied", d)
			}
			stats := redistest.CommandCalls(t, c)
			delete(stats, "config|resetstat")
			for name, n := range tc.want {
				if stats[name] != n {
					t.Errorf("commandstats %v: want %s=%d (all: %v)", stats, name, n, tc.want)
				}
				delete(stats, name)
			}
			if len(stats) != 0 {
				t.Errorf("commands beside %v: %v", tc.want, stats)
			}
			if after := c.Get(ctx, key).Val(); after != before {
				t.Errorf("the denial rewrote %s: %q, was %q", key, after, before)
			}
		})
	}
}

// fside is a side that runs its script as the function fn of a loaded
// library when fn is set.
type fside struct {
	side
	fn string
}

func (s fside) eval(ctx context.Context, args []any) ([]int64, error) {
	if s.fn == "" {
		return s.side.eval(ctx, args)
	}
	return s.c.FCall(ctx, s.fn, []string{s.key}, args...).Int64Slice()
}

// libraryOf returns the decide script variant s as a function library (as
// scripts.DecideLibrary is the decide script's).
func libraryOf(t *testing.T, s scripts.Script) scripts.Library {
	t.Helper()
	parts, ok := strings.CutSuffix(s.Source, evalTail)
	if !ok {
		t.Fatal("a decide script variant that does not end as the decide script does")
	}
	return newLibrary(parts, s.SHA1)
}
