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

// generalOnly is the decide script without the lean path; leanOnly fails
// every descriptor the lean path does not decide, with an error reply
// "general".
func generalOnly(t *testing.T) Script {
	return variant(t, "local LEANRULES = 8\n", "local LEANRULES = 0\n")
}

func leanOnly(t *testing.T) Script {
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

// sameStore fails unless the two keys hold the same value and expire
// within 2 s of each other: both TTLs come from the same test clock, but
// Redis counts them from its own, which runs on between the two writes (on
// a loaded machine, for hundreds of ms). The records' e is compared
// exactly, in the value.
func sameStore(t *testing.T, c *redis.Client, step, a, b string) {
	t.Helper()
	ctx := context.Background()
	p := c.Pipeline()
	va, vb := p.Get(ctx, a), p.Get(ctx, b)
	ta, tb := p.PTTL(ctx, a), p.PTTL(ctx, b)
	_, _ = p.Exec(ctx)
	if va.Val() != vb.Val() || (va.Err() == nil) != (vb.Err() == nil) {
		t.Fatalf("%s: %s holds %q (%v), %s holds %q (%v)", step, a, va.Val(), va.Err(), b, vb.Val(), vb.Err())
	}
	if d := ta.Val() - tb.Val(); d > 2*time.Second || d < -2*time.Second {
		t.Fatalf("%s: %s expires in %v, %s in %v", step, a, ta.Val(), b, tb.Val())
	}
}

// TestLeanMatchesLimitAndGeneral holds the lean path to pkg/limit and to
// the general path: random sets of epoch-aligned fixed windows (the lean
// path's configurations, and now and then two rules of one id, which it
// leaves to the general path), random costs, random instants. At every
// step the decide script's reply and stored state are compared with
// limit.Decide (the harness), and the same call on a copy of the key run
// by the script without the lean path must reply and store the same. A
// third copy, run by a script whose general path fails, proves which
// steps the lean path decided: all with distinct ids and a cost taken
// (mode 0), and no other.
func TestLeanMatchesLimitAndGeneral(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	general, leanonly := generalOnly(t), leanOnly(t)
	scenarios, steps := 200, 40
	if testing.Short() {
		scenarios = 40
	}
	var lean, fallback, admitted, denied int
	for sc := range scenarios {
		rng := rand.New(rand.NewPCG(uint64(sc), 0x1ea4))
		rules := make([]limit.Rule, 1+rng.IntN(4))
		ids := map[string]bool{}
		shared := false
		for i := range rules {
			for {
				rules[i] = limit.Rule{
					Unit:       []limit.Unit{limit.Second, limit.Minute, limit.Hour, limit.Day}[rng.IntN(4)],
					Multiplier: uint32(rng.IntN(3)),
					Limit:      []uint64{0, 1, 2, 3, 5, 8, 1000, MaxExact - 1}[rng.IntN(8)],
				}
				if !ids[rules[i].ID()] {
					break
				}
			}
			ids[rules[i].ID()] = true
		}
		if rng.IntN(8) == 0 { // two rules sharing one state: the general path
			rules = append(rules, rules[0])
			rules[len(rules)-1].Limit = min(rules[0].Limit+1, MaxExact-1)
			shared = true
		}
		name := fmt.Sprintf("lean%d", sc)
		h := newHarness(t, c, name, rules)
		gen := side{c, general, "g:{" + name + "}"}
		only := side{c, leanonly, "l:{" + name + "}"}
		now := bases[rng.IntN(len(bases))] + rng.Int64N(1_000_000)
		for step := range steps {
			switch rng.IntN(4) {
			case 0: // the next edge of a rule's window, or 1µs before it
				p := rules[rng.IntN(len(rules))].PeriodMicros()
				now += p - now%p - rng.Int64N(2)
			case 1:
				now += rng.Int64N(3 * rules[rng.IntN(len(rules))].PeriodMicros())
			default:
				now += rng.Int64N(300_000)
			}
			cost := limit.Cost{N: uint64(rng.IntN(4))}
			switch rng.IntN(12) {
			case 0:
				cost.Refund = true
			case 1:
				cost.Charge = true
			case 2:
				cost.N = MaxExact + 1
			}
			label := fmt.Sprintf("scenario %d step %d", sc, step)
			got := h.run(label, now, cost)
			args, err := AppendDecideArgs(nil, rules, cost, Time{Fixed: true, At: now})
			if err != nil {
				t.Fatal(err)
			}
			g, err := gen.eval(ctx, args)
			if err != nil {
				t.Fatalf("%s: general path: %v", label, err)
			}
			want, err := ParseDecideInts(g, make([]limit.Outcome, len(rules)))
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: the decide script says %+v, its general path %+v", label, got, want)
			}
			sameStore(t, c, label, h.counter, gen.key)
			// The lean-only copy is kept equal to the others: a step it
			// does not decide is copied over.
			l, err := only.eval(ctx, args)
			eligible := !shared && !cost.Refund && !cost.Charge
			switch {
			case eligible && err != nil:
				t.Fatalf("%s: rules %v, cost %+v: the lean path did not decide: %v", label, rules, cost, err)
			case !eligible && (err == nil || !strings.Contains(err.Error(), "general")):
				t.Fatalf("%s: rules %v, cost %+v: the lean path decided (%v, %v), want the general path", label, rules, cost, l, err)
			case eligible:
				lean++
				if fmt.Sprint(l) != fmt.Sprint(g) {
					t.Fatalf("%s: lean path replies %v, general path %v", label, l, g)
				}
				sameStore(t, c, label, only.key, gen.key)
			default:
				fallback++
				if err := c.Del(ctx, only.key).Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.Copy(ctx, gen.key, only.key, 0, true).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if got.Allowed {
				admitted++
			} else {
				denied++
			}
		}
	}
	if lean < 1000 || fallback < 100 || admitted < 500 || denied < 500 {
		t.Errorf("%d steps on the lean path, %d on the general one, %d admitted, %d denied: the scenarios do not exercise both paths and both answers", lean, fallback, admitted, denied)
	}
	t.Logf("%d steps on the lean path, %d on the general one; %d admitted, %d denied", lean, fallback, admitted, denied)
}

// TestLeanFallsBackOnUnusualRecords: a counter key holding anything the
// lean path does not read itself -- a record of another id, one that does
// not parse, a repeated one, a key of another type -- is decided the
// general way in the same call, with the same reply and store as the
// script without the lean path; the usual records (current, of an earlier
// window, expired) are read by the lean path.
func TestLeanFallsBackOnUnusualRecords(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	general, leanonly := generalOnly(t), leanOnly(t)
	now := limit.Micros(1_800_000_000_123_456)
	rules := []limit.Rule{{Unit: limit.Second, Limit: 5}, {Unit: limit.Minute, Limit: 50}}
	sec, min := rules[0].ID(), rules[1].ID()
	msNow := now / 1000
	secWin, minWin := now-now%1_000_000, now-now%60_000_000
	live := func(id string, w limit.Micros, c int) string {
		return fmt.Sprintf("%s %d %d %d", id, msNow+5000, w, c)
	}
	cases := []struct {
		name  string
		put   func(key string) error
		lean  bool // the lean path decides it
		count uint64
	}{
		{"absent", func(string) error { return nil }, true, 0},
		{"current", func(k string) error { return c.Set(ctx, k, live(sec, secWin, 3)+"|"+live(min, minWin, 7), 0).Err() }, true, 3},
		{"other order", func(k string) error { return c.Set(ctx, k, live(min, minWin, 7)+"|"+live(sec, secWin, 3), 0).Err() }, true, 3},
		{"earlier window", func(k string) error { return c.Set(ctx, k, live(sec, secWin-1_000_000, 3), 0).Err() }, true, 0},
		{"expired", func(k string) error { return c.Set(ctx, k, fmt.Sprintf("%s %d %d 3", sec, msNow, secWin), 0).Err() }, true, 0},
		{"another id", func(k string) error {
			return c.Set(ctx, k, live(sec, secWin, 3)+"|"+live("fw.1ho", now-now%3_600_000_000, 9), 0).Err()
		}, false, 3},
		{"repeated", func(k string) error { return c.Set(ctx, k, live(sec, secWin, 3)+"|"+live(sec, secWin, 4), 0).Err() }, false, 4},
		{"nan", func(k string) error { return c.Set(ctx, k, fmt.Sprintf("%s %d nan nan", sec, msNow+5000), 0).Err() }, false, 0},
		{"float fields", func(k string) error {
			return c.Set(ctx, k, fmt.Sprintf("%s %d %d 3.0", sec, msNow+5000, secWin), 0).Err()
		}, false, 3},
		{"trailing field", func(k string) error { return c.Set(ctx, k, live(sec, secWin, 3)+" 1", 0).Err() }, false, 3},
		{"empty string", func(k string) error { return c.Set(ctx, k, "", 0).Err() }, false, 0},
		{"trailing bar", func(k string) error { return c.Set(ctx, k, live(sec, secWin, 3)+"|", 0).Err() }, false, 3},
		{"hash", func(k string) error { return c.HSet(ctx, k, "c", 4).Err() }, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			prod := side{c, DecideScript(), "p:{" + name + "}"}
			gen := side{c, general, "g:{" + name + "}"}
			only := side{c, leanonly, "l:{" + name + "}"}
			for _, s := range []side{prod, gen, only} {
				if err := tc.put(s.key); err != nil {
					t.Fatal(err)
				}
			}
			args, err := AppendDecideArgs(nil, rules, limit.Cost{N: 1}, Time{Fixed: true, At: now})
			if err != nil {
				t.Fatal(err)
			}
			p, err := prod.eval(ctx, args)
			if err != nil {
				t.Fatal(err)
			}
			g, err := gen.eval(ctx, args)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(p) != fmt.Sprint(g) {
				t.Fatalf("the decide script replies %v, its general path %v", p, g)
			}
			if want := 5 - tc.count - 1; p[3] != int64(want) {
				t.Errorf("reply %v: %d left for the per-second rule, want %d", p, p[3], want)
			}
			sameStore(t, c, tc.name, prod.key, gen.key)
			l, err := only.eval(ctx, args)
			if tc.lean && (err != nil || fmt.Sprint(l) != fmt.Sprint(g)) {
				t.Errorf("the lean path replies %v, %v; want %v", l, err, g)
			}
			if !tc.lean && (err == nil || !strings.Contains(err.Error(), "general")) {
				t.Errorf("the lean path decided (%v, %v); want the general path", l, err)
			}
		})
	}
}
