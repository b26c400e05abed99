package scripts

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// variant returns the decide script with old replaced by new (which must
// occur exactly once): a test's way to switch a path off.
func variant(t *testing.T, old, new string) Script {
	t.Helper()
	src := DecideScript().Source
	if n := strings.Count(src, old); n != 1 {
		t.Fatalf("the decide script holds %q %d times, want once", old, n)
	}
	return newScript(strings.Replace(src, old, new, 1))
}

// generalOnly is the decide script without the window path: every
// descriptor on the records of its counter key. windowsOnly fails every
// descriptor the window path does not decide, with an error reply
// "general".
func generalOnly(t *testing.T) Script {
	return variant(t, "local WINDOWS = true\n", "local WINDOWS = false\n")
}

func windowsOnly(t *testing.T) Script {
	return variant(t, "  function decide_general(KEYS, ARGV)\n",
		"  function decide_general(KEYS, ARGV)\n    do return redis.error_reply('general') end\n")
}

// side runs one decide call of a script variant on its own copy of a
// descriptor's counter key.
type side struct {
	c      *redis.Client
	script Script
	key    string
}

func (s side) eval(ctx context.Context, args []any) ([]int64, error) {
	return s.c.Eval(ctx, s.script.Source, []string{s.key}, args...).Int64Slice()
}

// sameWindows fails unless the window keys of rules at now under the
// counter keys a and b hold the same count (or are both absent) and expire
// within 2 s of each other (both TTLs come from the same test clock, but
// Redis counts them from its own, which runs on between the two writes).
func sameWindows(t *testing.T, c *redis.Client, step string, rules []limit.Rule, now limit.Micros, a, b string) {
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
				Limit:      []uint64{0, 1, 2, 3, 5, 8, 1000, MaxExact - 1}[rng.IntN(8)],
			}
		}
		switch rng.IntN(8) {
		case 0: // two rules sharing one state (one key)
			rules = append(rules, rules[0])
			rules[len(rules)-1].Limit = min(rules[0].Limit+1, MaxExact-1)
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
				cost.N = MaxExact + 1
			case 3:
				cost.N = MaxExact - 1
			}
			label := fmt.Sprintf("scenario %d step %d", sc, step)
			got := h.run(label, now, cost)
			args, err := AppendDecideArgs(nil, rules, cost, Time{Fixed: true, At: now})
			if err != nil {
				t.Fatal(err)
			}
			g, err := gen.eval(ctx, args)
			if err != nil {
				t.Fatalf("%s: general way: %v", label, err)
			}
			want, err := ParseDecideInts(g, make([]limit.Outcome, len(rules)))
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
func windowCall(t *testing.T, c *redis.Client, key string, rules []limit.Rule, now limit.Micros, cost limit.Cost) limit.Decision {
	t.Helper()
	args, err := AppendDecideArgs(nil, rules, cost, Time{Fixed: true, At: now})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := c.Eval(context.Background(), DecideScript().Source, []string{key}, args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDecideReply(reply, len(rules))
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
	args, err := AppendDecideArgs(nil, rules, limit.Cost{N: 1}, Time{Fixed: true, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Eval(ctx, DecideScript().Source, []string{bad}, args...).Err(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("single call on a hash window key: %v, want WRONGTYPE", err)
	}
	prepared, err := PrepareRule(rules[0])
	if err != nil {
		t.Fatal(err)
	}
	clock := Time{Fixed: true, At: now}
	bargs := AppendBatchHead(nil, clock)
	for range 2 {
		bargs = AppendBatchItem(bargs, 1, limit.Cost{N: 1}, []*RuleArgs{prepared}, clock)
	}
	ints, err := c.Eval(ctx, DecideScript().Source, []string{bad, good}, bargs...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, err := ParseBatchInts(ints, make([]limit.Outcome, 1))
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("the bad descriptor: %v, want its WRONGTYPE error", err)
	}
	d, _, err := ParseBatchInts(rest, make([]limit.Outcome, 1))
	if err != nil || !d.Allowed || d.Outcomes[0].Remaining != 4 {
		t.Fatalf("the good descriptor: %+v, %v", d, err)
	}
	if got := c.Get(ctx, windowKey(good, rules[0], now)).Val(); got != "1" {
		t.Fatalf("the good descriptor's key holds %q", got)
	}
}

// TestWindowKeysExpireAtWindowEnd: on Redis's clock (production), a window
// key is named after the window holding Redis's now and expires exactly at
// its end (PEXPIRETIME, Redis 7+), with no TTL-less moment.
func TestWindowKeysExpireAtWindowEnd(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	rules := []limit.Rule{{Unit: limit.Minute, Limit: 5}, {Unit: limit.Second, Multiplier: 10, Limit: 5}}
	args, err := AppendDecideArgs(nil, rules, limit.Cost{N: 1}, Time{})
	if err != nil {
		t.Fatal(err)
	}
	key := "e:{expiry}"
	before, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	reply, err := c.Eval(ctx, DecideScript().Source, []string{key}, args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDecideReply(reply, len(rules))
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
