package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// variant returns the decide script with old replaced by new (which must
// occur exactly once): a test's way to switch a path off.
func variant(t *testing.T, old, new string) scripts.Script {
	t.Helper()
	return edit(t, scripts.DecideScript(), old, new)
}

// edit returns s with old replaced by new (which must occur exactly once).
func edit(t *testing.T, s scripts.Script, old, new string) scripts.Script {
	t.Helper()
	if n := strings.Count(s.Source, old); n != 1 {
		t.Fatalf("the decide script holds %q %d times, want once", old, n)
	}
	return newScript(strings.Replace(s.Source, old, new, 1))
}

// generalOnly is the decide script without the window path: every
// descriptor on the records of its counter key. windowsOnly fails every
// descriptor the window path does not decide, with an error reply
// "general".
func generalOnly(t *testing.T) scripts.Script {
	return variant(t, "local WINDOWS = true\n", "local WINDOWS = false\n")
}

func windowsOnly(t *testing.T) scripts.Script {
	return variant(t, "  function decide_general(KEYS, ARGV)\n",
		"  function decide_general(KEYS, ARGV)\n    do return redis.error_reply('general') end\n")
}

// takeOnly fails, with an error reply "loop", every descriptor of the
// window path that win_take (two or three fixed windows of distinct ids
// taking a cost) does not decide, before anything is written; and every
// descriptor of the general way, as windowsOnly does.
func takeOnly(t *testing.T) scripts.Script {
	return edit(t, windowsOnly(t), "  local nr = (na - 2) / 5\n",
		"  do return redis.error_reply('loop') end\n  local nr = (na - 2) / 5\n")
}

// side runs one decide call of a script variant on its own copy of a
// descriptor's counter key.
type side struct {
	c      *goredis.Client
	script scripts.Script
	key    string
}

func (s side) eval(ctx context.Context, args []any) ([]int64, error) {
	return s.c.Eval(ctx, s.script.Source, []string{s.key}, args...).Int64Slice()
}

// sameWindows fails unless the window keys of rules at now under the
// counter keys a and b hold the same count (or are both absent) and expire
// within 2 s of each other (both TTLs come from the same test clock, but
// Redis counts them from its own, which runs on between the two writes).
func sameWindows(t *testing.T, c *goredis.Client, step string, rules []limit.Rule, now limit.Micros, a, b string) {
	t.Helper()
	ctx := context.Background()
	for _, r := range rules {
		if r.PeriodMicros() <= 0 {
			continue
		}
		ka, kb := windowKey(a, r, now), windowKey(b, r, now)
		p := c.Pipeline()
		va, vb := p.Get(ctx, ka), p.Get(ctx, kb)
		ta, tb := p.PTTL(ctx, ka), p.PTTL(ctx, kb)
		_, _ = p.Exec(ctx)
		if va.Val() != vb.Val() || (va.Err() == nil) != (vb.Err() == nil) {
			t.Fatalf("%s: %s holds %q (%v), %s holds %q (%v)", step, ka, va.Val(), va.Err(), kb, vb.Val(), vb.Err())
		}
		if d := ta.Val() - tb.Val(); d > 2*time.Second || d < -2*time.Second {
			t.Fatalf("%s: %s expires in %v, %s in %v", step, ka, ta.Val(), kb, tb.Val())
		}
	}
}

// TestWindowsMatchLimitAndGeneral holds the window path to pkg/limit and to
// the general way: random sets of epoch-aligned fixed windows (now and
// then two rules of one id, or a rule of an unknown unit), random costs in
// every mode, random instants. At every step the decide script's reply and
// window keys are compared with limit.Decide (the harness), and the same
// call run by the script without the window path (on the records of a
// counter key of its own) must reply the same. A third copy, run by a
// script whose general way fails, proves that the window path decided
// every step, and stores what the first copy stores.
func TestWindowsMatchLimitAndGeneral(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	general, windowsonly := generalOnly(t), windowsOnly(t)
	scenarios, steps := 200, 40
	if testing.Short() {
		scenarios = 40
	}
	var shared, admitted, denied, refunds, charges int
	for sc := range scenarios {
		rng := rand.New(rand.NewPCG(uint64(sc), 0x1ea4))
		rules := make([]limit.Rule, 1+rng.IntN(4))
		for i := range rules {
			rules[i] = limit.Rule{
				Unit:       []limit.Unit{limit.Second, limit.Minute, limit.Hour, limit.Day}[rng.IntN(4)],
				Multiplier: uint32(rng.IntN(3)),
				Limit:      []uint64{0, 1, 2, 3, 5, 8, 1000, maxExact - 1}[rng.IntN(8)],
			}
		}
		switch rng.IntN(8) {
		case 0: // two rules sharing one state (one key)
			rules = shareFirstState(rules)
			shared++
		case 1: // a rule of an unknown unit: admits only peeks and refunds
			rules = append(rules, limit.Rule{Unit: limit.UnitUnknown, Limit: 5})
		}
		name := fmt.Sprintf("win%d", sc)
		h := newHarness(t, c, name, rules)
		gen := side{c, general, "g:{" + name + "}"}
		only := side{c, windowsonly, "l:{" + name + "}"}
		now := bases[rng.IntN(len(bases))] + rng.Int64N(1_000_000)
		for step := range steps {
			switch rng.IntN(4) {
			case 0: // the next edge of a rule's window, or 1µs before it
				if p := rules[rng.IntN(len(rules))].PeriodMicros(); p > 0 {
					now += p - now%p - rng.Int64N(2)
				}
			case 1:
				now += rng.Int64N(3 * max(rules[0].PeriodMicros(), 1))
			default:
				now += rng.Int64N(300_000)
			}
			cost := limit.Cost{N: uint64(rng.IntN(4))}
			switch rng.IntN(12) {
			case 0:
				cost.Refund = true
				refunds++
			case 1:
				cost.Charge = true
				charges++
			case 2:
				cost.N = maxExact + 1
			case 3:
				cost.N = maxExact - 1
			}
			label := fmt.Sprintf("scenario %d step %d", sc, step)
			got := h.run(label, now, cost)
			args, err := appendDecideArgs(nil, rules, cost, scriptClock{Fixed: true, At: now})
			if err != nil {
				t.Fatal(err)
			}
			g, err := gen.eval(ctx, args)
			if err != nil {
				t.Fatalf("%s: general way: %v", label, err)
			}
			want, err := parseDecideInts(g, make([]limit.Outcome, len(rules)))
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: the decide script says %+v, its general way %+v", label, got, want)
			}
			l, err := only.eval(ctx, args)
			if err != nil {
				t.Fatalf("%s: rules %v, cost %+v: the window path did not decide: %v", label, rules, cost, err)
			}
			if fmt.Sprint(l) != fmt.Sprint(g) {
				t.Fatalf("%s: window path replies %v, general way %v", label, l, g)
			}
			sameWindows(t, c, label, rules, now, h.counter, only.key)
			if n := h.exists(h.counter); n != 0 {
				t.Fatalf("%s: the window path wrote the counter key %s", label, h.counter)
			}
			if got.Allowed {
				admitted++
			} else {
				denied++
			}
		}
	}
	if shared < 10 || admitted < 500 || denied < 500 || refunds < 100 || charges < 100 {
		t.Errorf("%d scenarios sharing an id, %d admitted, %d denied, %d refunds, %d charges: the scenarios do not exercise every case", shared, admitted, denied, refunds, charges)
	}
	t.Logf("%d scenarios sharing an id; %d admitted, %d denied, %d refunds, %d charges", shared, admitted, denied, refunds, charges)
}

// windowCall runs one decide call of rules at now (the test clock) on the
// descriptor whose counter key is key.
func windowCall(t *testing.T, c *goredis.Client, key string, rules []limit.Rule, now limit.Micros, cost limit.Cost) limit.Decision {
	t.Helper()
	args, err := appendDecideArgs(nil, rules, cost, scriptClock{Fixed: true, At: now})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := c.Eval(context.Background(), scripts.DecideScript().Source, []string{key}, args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseDecideReply(reply, len(rules))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestWindowSharedID: rules of one id share one window key; each checks
// its own limit on the count before the call, and each applies the cost,
// as rules sharing a State do in pkg/limit.
func TestWindowSharedID(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	rules := []limit.Rule{{Unit: limit.Minute, Limit: 10}, {Unit: limit.Minute, Limit: 3}}
	key := "s:{shared}"
	d := windowCall(t, c, key, rules, now, limit.Cost{N: 1})
	if !d.Allowed || d.Outcomes[0].Remaining != 9 || d.Outcomes[1].Remaining != 2 {
		t.Fatalf("first call: %+v", d)
	}
	if got := c.Get(ctx, windowKey(key, rules[0], now)).Val(); got != "2" {
		t.Fatalf("the shared key holds %q, want 2 (each rule applies the cost)", got)
	}
	if n := c.Keys(ctx, "s:{shared}*").Val(); len(n) != 1 {
		t.Fatalf("keys %q, want the one shared window key", n)
	}
	// Count 2: the limit of 3 admits one more, which makes the count 4.
	if d := windowCall(t, c, key, rules, now+1, limit.Cost{N: 1}); !d.Allowed {
		t.Fatalf("second call: %+v", d)
	}
	if d := windowCall(t, c, key, rules, now+2, limit.Cost{N: 1}); d.Allowed || d.Binding != 1 {
		t.Fatalf("third call: %+v, want denied by the limit of 3", d)
	}
	if got := c.Get(ctx, windowKey(key, rules[0], now)).Val(); got != "4" {
		t.Fatalf("the shared key holds %q after a denial, want 4", got)
	}
}

// TestWindowDenialLeavesNothing: a denied cost consumes nothing: a window
// key the call created is deleted (no key is left without its expiry),
// one that existed keeps its count and its expiry, also when another rule
// of the descriptor admitted.
func TestWindowDenialLeavesNothing(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	sec, hour := limit.Rule{Unit: limit.Second, Limit: 100}, limit.Rule{Unit: limit.Hour, Limit: 2}
	for _, tc := range []struct {
		name  string
		rules []limit.Rule
	}{
		{"one rule", []limit.Rule{hour}},
		{"two rules", []limit.Rule{sec, hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "n:{" + strings.ReplaceAll(tc.name, " ", "-") + "}"
			// A fresh window denied: nothing created.
			if d := windowCall(t, c, key, tc.rules, now, limit.Cost{N: 3}); d.Allowed {
				t.Fatalf("cost 3 of 2: %+v", d)
			}
			if ks := c.Keys(ctx, key+"*").Val(); len(ks) != 0 {
				t.Fatalf("a denial left %q", ks)
			}
			// 2 of 2 admitted, then 1 more denied (the INCRBY is undone).
			if d := windowCall(t, c, key, tc.rules, now, limit.Cost{N: 2}); !d.Allowed {
				t.Fatalf("cost 2 of 2: %+v", d)
			}
			hk := windowKey(key, hour, now)
			ttl := c.PTTL(ctx, hk).Val()
			if d := windowCall(t, c, key, tc.rules, now+1, limit.Cost{N: 1}); d.Allowed || d.Outcomes[len(tc.rules)-1].Remaining != 0 {
				t.Fatalf("cost 1 over the limit: %+v", d)
			}
			if got := c.Get(ctx, hk).Val(); got != "2" {
				t.Fatalf("%s holds %q after a denial, want 2", hk, got)
			}
			if after := c.PTTL(ctx, hk).Val(); after <= 0 || ttl-after > 2*time.Second {
				t.Fatalf("%s PTTL %v after a denial, %v before", hk, after, ttl)
			}
			if len(tc.rules) == 2 {
				// The second's key is one second later: new, admitted, undone.
				sk := windowKey(key, sec, now+1_000_000)
				if d := windowCall(t, c, key, tc.rules, now+1_000_000, limit.Cost{N: 1}); d.Allowed || !d.Outcomes[0].Allowed {
					t.Fatalf("next second: %+v, want the second's rule admitting, the hour's denying", d)
				}
				if n := c.Exists(ctx, sk).Val(); n != 0 {
					t.Fatalf("%s exists after a denial: %q, PTTL %v", sk, c.Get(ctx, sk).Val(), c.PTTL(ctx, sk).Val())
				}
			}
		})
	}
}

// TestWindowWrongTypeKeyFailsItsDescriptor: a window key of another type
// (not sluice's) fails the descriptor's call with Redis's error; in a batch
// that descriptor replies its error and the others are decided.
func TestWindowWrongTypeKeyFailsItsDescriptor(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	rules := []limit.Rule{{Unit: limit.Minute, Limit: 5}}
	bad, good := "w:{bad}", "w:{good}"
	if err := c.HSet(ctx, windowKey(bad, rules[0], now), "c", 1).Err(); err != nil {
		t.Fatal(err)
	}
	args, err := appendDecideArgs(nil, rules, limit.Cost{N: 1}, scriptClock{Fixed: true, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Eval(ctx, scripts.DecideScript().Source, []string{bad}, args...).Err(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("single call on a hash window key: %v, want WRONGTYPE", err)
	}
	prepared, err := prepareRule(rules[0])
	if err != nil {
		t.Fatal(err)
	}
	clock := scriptClock{Fixed: true, At: now}
	bargs := appendBatchHead(nil, clock)
	for range 2 {
		bargs = appendBatchItem(bargs, 1, limit.Cost{N: 1}, []*ruleArgs{prepared}, clock)
	}
	ints, err := c.Eval(ctx, scripts.DecideScript().Source, []string{bad, good}, bargs...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, err := parseBatchInts(ints, make([]limit.Outcome, 1))
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("the bad descriptor: %v, want its WRONGTYPE error", err)
	}
	d, _, err := parseBatchInts(rest, make([]limit.Outcome, 1))
	if err != nil || !d.Allowed || d.Outcomes[0].Remaining != 4 {
		t.Fatalf("the good descriptor: %+v, %v", d, err)
	}
	if got := c.Get(ctx, windowKey(good, rules[0], now)).Val(); got != "1" {
		t.Fatalf("the good descriptor's key holds %q", got)
	}
}

// TestWindowKeysExpireAtWindowEnd: on Redis's clock (production), a window
// key is named after the window holding Redis's now and expires exactly at
// its end (PEXPIRETIME, Redis 7+), with no TTL-less moment: for one rule, two
// and three (the written-out paths), and four (the general loop), as a
// script and as a function library, whose second descriptor of the same
// rules uses what the first call kept.
func TestWindowKeysExpireAtWindowEnd(t *testing.T) {
	c := redistest.Standalone(t).Client()
	loadDecideLibrary(t, c)
	all := []limit.Rule{{Unit: limit.Minute, Limit: 5}, {Unit: limit.Second, Multiplier: 10, Limit: 5},
		{Unit: limit.Hour, Limit: 5}, {Unit: limit.Second, Limit: 5}}
	for _, via := range []string{"EVAL", "FCALL"} {
		for n := 1; n <= len(all); n++ {
			for d := range 2 {
				rules := all[:n]
				key := fmt.Sprintf("e:{expiry-%s-%d-%d}", via, n, d)
				t.Run(key, func(t *testing.T) { expiresAtWindowEnd(t, c, via, key, rules) })
			}
		}
	}
}

// expiresAtWindowEnd runs one decide call of rules on Redis's clock, EVAL
// of the script or FCALL of the library, for the descriptor whose counter
// key is key, and checks each rule's window key and reset.
func expiresAtWindowEnd(t *testing.T, c *goredis.Client, via, key string, rules []limit.Rule) {
	ctx := context.Background()
	args, err := appendDecideArgs(nil, rules, limit.Cost{N: 1}, scriptClock{})
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	reply, err := decideCall(ctx, c, scripts.DecideLibrary(), via == "FCALL", []string{key}, args).Result()
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseDecideReply(reply, len(rules))
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	after, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rules {
		found := false
		for _, at := range []time.Time{before, after} { // a window edge may fall between
			now := at.UnixMicro()
			k := windowKey(key, r, now)
			exp, err := c.Do(ctx, "PEXPIRETIME", k).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if exp < 0 {
				continue
			}
			found = true
			p := r.PeriodMicros()
			if end := (now - now%p + p) / 1000; exp != end {
				t.Fatalf("%s expires at %d ms, want its window's end %d", k, exp, end)
			}
			// The reset reported is the wait until that end.
			if w := time.Duration(exp*1000-now) * time.Microsecond; d.Outcomes[i].Reset > w+time.Second || d.Outcomes[i].Reset <= 0 {
				t.Fatalf("rule %d resets in %v, its key expires in %v", i, d.Outcomes[i].Reset, w)
			}
		}
		if !found {
			t.Fatalf("no window key of %s: %q", r.ID(), c.Keys(ctx, key+"*").Val())
		}
	}
}

// takeStep is one call of a TestWindowTake case, at at µs after the case's
// start.
type takeStep struct {
	at     limit.Micros
	cost   limit.Cost
	limits []uint64 // when set, the rules' limits from this call on (the same ids)
	take   bool     // decided by win_take, the written-out path of two or three rules
}

// TestWindowTake holds the written-out path of two and three fixed windows
// of distinct ids taking a cost (win_take) to pkg/limit, call by call: the
// reply (each rule's outcome, the binding rule) and every window key (its
// count, its absence after a denial that created it, its expiry). Each
// case runs twice, with EVALSHA and as a function library (FCALL: what
// win_rule keeps between calls is used, the cases going back in time from
// one to the next, so a kept window must not serve a later call of an
// earlier window), and a third time on keys of its own by a script whose
// window path fails every descriptor win_take does not decide: the calls
// marked take must succeed there and reply the same, the others must fail
// (so they are left to the general part, which decides them the same).
func TestWindowTake(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	lib := loadDecideLibrary(t, c)
	only := takeOnly(t)
	sec := func(l uint64) limit.Rule { return limit.Rule{Unit: limit.Second, Limit: l} }
	tens := func(l uint64) limit.Rule { return limit.Rule{Unit: limit.Second, Multiplier: 10, Limit: l} }
	minute := func(l uint64) limit.Rule { return limit.Rule{Unit: limit.Minute, Limit: l} }
	hour := func(l uint64) limit.Rule { return limit.Rule{Unit: limit.Hour, Limit: l} }
	one := limit.Cost{N: 1}
	for i, tc := range []struct {
		name  string
		rules []limit.Rule
		steps []takeStep
	}{
		{"two rules, denied by the first", []limit.Rule{sec(2), minute(10)}, []takeStep{
			{0, one, nil, true}, {1, one, nil, true}, {2, one, nil, true}, {3, limit.Cost{N: 2}, nil, true},
		}},
		{"two rules, denied by the second, a key the denial created deleted", []limit.Rule{sec(10), minute(2)}, []takeStep{
			{0, limit.Cost{N: 2}, nil, true}, {1, one, nil, true}, {1_000_000, one, nil, true}, {1_000_001, one, nil, true},
		}},
		{"two rules, both deny, the later reset binds", []limit.Rule{sec(1), minute(1)}, []takeStep{
			{0, one, nil, true}, {5, one, nil, true},
		}},
		{"two rules, a tie on remaining binds the later reset", []limit.Rule{minute(4), tens(4)}, []takeStep{
			{0, one, nil, true}, {1, limit.Cost{N: 3}, nil, true},
		}},
		{"three rules, denied by the first", []limit.Rule{sec(1), minute(5), hour(9)}, []takeStep{
			{0, one, nil, true}, {1, one, nil, true}, {1_000_000, one, nil, true},
		}},
		{"three rules, denied by the second", []limit.Rule{sec(9), minute(2), hour(9)}, []takeStep{
			{0, limit.Cost{N: 2}, nil, true}, {1, one, nil, true}, {2_000_000, one, nil, true},
		}},
		{"three rules, denied by the third, keys the denial created deleted", []limit.Rule{sec(9), tens(9), hour(3)}, []takeStep{
			{0, limit.Cost{N: 3}, nil, true}, {1, one, nil, true}, {10_000_000, one, nil, true}, {10_000_001, limit.Cost{N: 2}, nil, true},
		}},
		{"three rules, two deny, the later reset binds", []limit.Rule{hour(2), sec(2), minute(2)}, []takeStep{
			{0, limit.Cost{N: 2}, nil, true}, {1, one, nil, true},
		}},
		{"three rules admitted, the least remaining binds, then the later reset", []limit.Rule{sec(6), minute(5), hour(6)}, []takeStep{
			{0, one, nil, true}, {1, one, nil, true}, {2, limit.Cost{N: 3}, nil, true}, {1_000_000, one, nil, true},
		}},
		{"three rules, new windows one after the other", []limit.Rule{sec(3), minute(4), tens(5)}, []takeStep{
			{0, one, nil, true}, {999_999, one, nil, true}, {1_000_000, one, nil, true}, {10_000_000, one, nil, true},
			{60_000_000, one, nil, true}, {60_000_001, limit.Cost{N: 3}, nil, true},
		}},
		{"a limit changed in the window, the same ids", []limit.Rule{sec(5), minute(3)}, []takeStep{
			{0, limit.Cost{N: 2}, nil, true}, {1, one, []uint64{5, 10}, true}, {2, limit.Cost{N: 2}, []uint64{5, 4}, true},
		}},
		{"two rules of one id share a key: the general loop", []limit.Rule{minute(10), minute(3)}, []takeStep{
			{0, one, nil, false}, {1, one, nil, false}, {2, one, nil, false},
		}},
		{"three rules, two of one id: the general loop", []limit.Rule{sec(9), hour(4), hour(9)}, []takeStep{
			{0, one, nil, false}, {1, limit.Cost{N: 2}, nil, false}, {2, one, nil, false},
		}},
		{"a refund: the general loop", []limit.Rule{sec(5), minute(5), hour(5)}, []takeStep{
			{0, limit.Cost{N: 3}, nil, true}, {1, limit.Cost{N: 2, Refund: true}, nil, false}, {2, limit.Cost{N: 6}, nil, false},
			{3, limit.Cost{N: 3}, nil, true},
		}},
		{"a charge past 2^53, then a cost taken on it", []limit.Rule{sec(5), hour(maxExact - 1)}, []takeStep{
			{0, limit.Cost{N: maxExact - 1, Charge: true}, nil, false}, {1, limit.Cost{N: maxExact - 1, Charge: true}, nil, false},
			{2, one, nil, true}, {3, limit.Cost{N: 5}, nil, true}, {1_000_000, limit.Cost{N: 3}, nil, true},
		}},
		{"a peek: the general loop", []limit.Rule{sec(2), minute(2), hour(2)}, []takeStep{
			{0, one, nil, true}, {1, limit.Cost{}, nil, false}, {2, one, nil, true}, {3, limit.Cost{}, nil, false},
		}},
		{"a cost above a limit: the general loop", []limit.Rule{sec(9), minute(2)}, []takeStep{
			{0, limit.Cost{N: 3}, nil, false}, {1, limit.Cost{N: 2}, nil, true},
		}},
		{"three rules, a cost above the third's limit: the general loop", []limit.Rule{sec(9), minute(9), hour(2)}, []takeStep{
			{0, limit.Cost{N: 3}, nil, false}, {1, limit.Cost{N: 2}, nil, true}, {2, limit.Cost{N: 3}, nil, false},
		}},
		{"four rules: the general loop", []limit.Rule{sec(3), tens(4), minute(5), hour(6)}, []takeStep{
			{0, one, nil, false}, {1, limit.Cost{N: 3}, nil, false},
		}},
		{"a rule of an unknown unit: the general loop", []limit.Rule{sec(3), {Unit: limit.UnitUnknown, Limit: 5}}, []takeStep{
			{0, one, nil, false},
		}},
		{"the rules of the first case in another order", []limit.Rule{minute(10), sec(2)}, []takeStep{
			{0, one, nil, true}, {1, limit.Cost{N: 2}, nil, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case an hour and a bit before the one above it, 0.3 s
			// into a second.
			start := limit.Micros(1_800_000_000_300_000) - limit.Micros(i)*3_661_000_000
			name := fmt.Sprintf("take%d", i)
			hs := []*harness{newHarness(t, c, name, slices.Clone(tc.rules)), newHarness(t, c, name+"f", slices.Clone(tc.rules))}
			hs[1].fcall = lib.Function
			path := side{c, only, "t:{" + name + "}"}
			for j, st := range tc.steps {
				now := start + st.at
				label := fmt.Sprintf("step %d", j)
				if st.limits != nil {
					for _, h := range hs {
						for k := range h.rules {
							h.rules[k].Limit = st.limits[k]
						}
					}
				}
				d := hs[0].run(label, now, st.cost)
				if d2 := hs[1].run(label+" (FCALL)", now, st.cost); fmt.Sprint(d2) != fmt.Sprint(d) {
					t.Fatalf("%s: FCALL decides %+v, EVALSHA %+v", label, d2, d)
				}
				args, err := appendDecideArgs(nil, hs[0].rules, st.cost, scriptClock{Fixed: true, At: now})
				if err != nil {
					t.Fatal(err)
				}
				got, err := path.eval(ctx, args)
				if !st.take {
					if err == nil || !strings.Contains(err.Error(), "loop") {
						t.Fatalf("%s: cost %+v: the written-out path decided (%v, %v), want the general loop", label, st.cost, got, err)
					}
					// Keep this copy's keys in step with the others'.
					_, err = side{c, scripts.DecideScript(), path.key}.eval(ctx, args)
				}
				if err != nil {
					t.Fatalf("%s: cost %+v: %v", label, st.cost, err)
				}
				if st.take {
					want, err := parseDecideInts(got, make([]limit.Outcome, len(tc.rules)))
					if err != nil || fmt.Sprint(want) != fmt.Sprint(d) {
						t.Fatalf("%s: the written-out path alone decides %+v (%v), the script %+v", label, want, err, d)
					}
				}
				sameWindows(t, c, label, hs[0].rules, now, hs[0].counter, path.key)
				sameWindows(t, c, label, hs[0].rules, now, hs[0].counter, hs[1].counter)
			}
		})
	}
}

// TestWindowTakeAcrossCalls holds the window path to pkg/limit over many
// calls of one function library (FCALL), which keeps what win_rule parsed
// and formatted from one call to the next: descriptors of one, two or
// three fixed windows drawn from one small set of rules (so the same slots come
// back at every position, and the same ids in other orders), now and then
// a limit changed, a shared id, a refund, a charge or a peek, the clock
// moving on across the windows' edges.
func TestWindowTakeAcrossCalls(t *testing.T) {
	c := redistest.Standalone(t).Client()
	lib := loadDecideLibrary(t, c)
	pool := []limit.Rule{
		{Unit: limit.Second, Limit: 3},
		{Unit: limit.Second, Multiplier: 10, Limit: 6},
		{Unit: limit.Minute, Limit: 12},
		{Unit: limit.Hour, Limit: 40},
	}
	rng := rand.New(rand.NewPCG(7, 0x7a4e))
	var hs []*harness
	for d := range 12 {
		rules := make([]limit.Rule, 2+rng.IntN(2))
		for i, p := range rng.Perm(len(pool))[:len(rules)] {
			rules[i] = pool[p]
		}
		if d%4 == 3 { // two rules of one id
			rules[len(rules)-1] = rules[0]
			rules[len(rules)-1].Limit++
		}
		h := newHarness(t, c, fmt.Sprintf("across%d", d), rules)
		h.fcall = lib.Function
		hs = append(hs, h)
	}
	for d, r := range pool { // one rule each: windows' own written-out path
		h := newHarness(t, c, fmt.Sprintf("across-one%d", d), []limit.Rule{r})
		h.fcall = lib.Function
		hs = append(hs, h)
	}
	now := bases[0]
	var taken, admitted, denied, one int
	for step := range 4000 {
		h := hs[rng.IntN(len(hs))]
		if rng.IntN(4) == 0 {
			now += 10_000_000 - now%10_000_000 - rng.Int64N(2) // a window's edge, or 1 µs before
		} else {
			now += rng.Int64N(150_000)
		}
		if rng.IntN(200) == 0 {
			r := rng.IntN(len(h.rules))
			h.rules[r].Limit = pool[rng.IntN(len(pool))].Limit
		}
		cost := limit.Cost{N: 1 + uint64(rng.IntN(3))}
		switch rng.IntN(20) {
		case 0:
			cost.Refund = true
		case 1:
			cost.Charge = true
		case 2:
			cost.N = 0
		}
		d := h.run(fmt.Sprintf("step %d, %s", step, h.counter), now, cost)
		if !cost.Refund && !cost.Charge && cost.N > 0 && len(h.rules) == 1 {
			one++
		}
		if !cost.Refund && !cost.Charge && cost.N > 0 && h.rules[0].ID() != h.rules[len(h.rules)-1].ID() {
			taken++
			if d.Allowed {
				admitted++
			} else {
				denied++
			}
		}
	}
	if taken < 1500 || admitted < 500 || denied < 500 || one < 500 {
		t.Errorf("%d costs taken by descriptors of distinct ids, %d admitted, %d denied, %d by descriptors of one rule: the steps do not exercise the written-out paths", taken, admitted, denied, one)
	}
	t.Logf("%d costs taken by descriptors of distinct ids, %d admitted, %d denied, %d by descriptors of one rule", taken, admitted, denied, one)
}

// TestWindowTakeKeysNameTheirIDs: two descriptors whose rules have the same
// limits and periods but other ids (slots no Go rule gives, as the ids are
// opaque to the script) write the keys of their own ids, also from one
// call of a function library to the next, where win_rule keeps what the
// first parsed.
func TestWindowTakeKeysNameTheirIDs(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	lib := loadDecideLibrary(t, c)
	now := limit.Micros(1_800_000_000_000_000)
	key := "i:{ids}"
	for _, ids := range [][]string{{"a", "b", "c"}, {"x", "y", "z"}, {"y", "x", "a"}} {
		args := []any{strconv.FormatInt(now, 10), "1", "0"}
		for _, id := range ids {
			args = append(args, "1", "5", "5", "60000000", id)
		}
		for _, via := range []string{"EVAL", "FCALL"} {
			var err error
			if via == "FCALL" {
				err = c.FCall(ctx, lib.Function, []string{key}, args...).Err()
			} else {
				err = c.Eval(ctx, scripts.DecideScript().Source, []string{key}, args...).Err()
			}
			if err != nil {
				t.Fatalf("%s ids %v: %v", via, ids, err)
			}
		}
	}
	want := map[string]string{"a": "4", "b": "2", "c": "2", "x": "4", "y": "4", "z": "2"}
	for id, n := range want {
		k := fmt.Sprintf("%s:%s:%d", key, id, now/1_000_000)
		if got := c.Get(ctx, k).Val(); got != n {
			t.Errorf("%s holds %q, want %s", k, got, n)
		}
	}
	if ks := c.Keys(ctx, key+":*").Val(); len(ks) != len(want) {
		t.Errorf("keys %q, want %d", ks, len(want))
	}
}
