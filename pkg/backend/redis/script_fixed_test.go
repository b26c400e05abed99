package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// TestFixedWindowsMatchLimit holds descriptors of epoch-aligned fixed
// windows -- the incumbent's configuration -- to pkg/limit: random sets of
// them (now and then two rules of one id, or a rule of an unknown unit),
// random costs in every mode, random instants. At every step the decide
// script's reply, and every record of the counter key, its e and the key's
// TTL, are compared with limit.Decide (the harness), and the descriptor
// touches no key but its counter key.
func TestFixedWindowsMatchLimit(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
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
			if ks := c.Keys(ctx, "*{"+name+"}*").Val(); len(ks) > 1 || len(ks) == 1 && ks[0] != h.counter {
				t.Fatalf("%s: keys %q, want none but the counter key %s", label, ks, h.counter)
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

// TestFixedSharedID: rules of one id share one record; each checks its
// own limit on the count before the call, and each applies the cost, as
// rules sharing a State do in pkg/limit.
func TestFixedSharedID(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	rules := []limit.Rule{{Unit: limit.Minute, Limit: 10}, {Unit: limit.Minute, Limit: 3}}
	key := "s:{shared}"
	count := func() string {
		t.Helper()
		f := counterRecords(t, c, key)[rules[0].ID()]
		if len(f) != 3 {
			t.Fatalf("record %q", f)
		}
		return f[2]
	}
	d := windowCall(t, c, key, rules, now, limit.Cost{N: 1})
	if !d.Allowed || d.Outcomes[0].Remaining != 9 || d.Outcomes[1].Remaining != 2 {
		t.Fatalf("first call: %+v", d)
	}
	if got := count(); got != "2" {
		t.Fatalf("the shared record counts %q, want 2 (each rule applies the cost)", got)
	}
	if n := c.Keys(ctx, "s:{shared}*").Val(); len(n) != 1 || len(counterRecords(t, c, key)) != 1 {
		t.Fatalf("keys %q, records %q, want the one shared record", n, counterRecords(t, c, key))
	}
	// Count 2: the limit of 3 admits one more, which makes the count 4.
	if d := windowCall(t, c, key, rules, now+1, limit.Cost{N: 1}); !d.Allowed {
		t.Fatalf("second call: %+v", d)
	}
	if d := windowCall(t, c, key, rules, now+2, limit.Cost{N: 1}); d.Allowed || d.Binding != 1 {
		t.Fatalf("third call: %+v, want denied by the limit of 3", d)
	}
	if got := count(); got != "4" {
		t.Fatalf("the shared record counts %q after a denial, want 4", got)
	}
}

// TestFixedDenialLeavesNothing: a denied cost writes nothing: no key is
// created, and one that existed keeps its value and its expiry, also when
// another rule of the descriptor admitted.
func TestFixedDenialLeavesNothing(t *testing.T) {
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
			// 2 of 2 admitted, then 1 more denied.
			if d := windowCall(t, c, key, tc.rules, now, limit.Cost{N: 2}); !d.Allowed {
				t.Fatalf("cost 2 of 2: %+v", d)
			}
			v, ttl := c.Get(ctx, key).Val(), c.PTTL(ctx, key).Val()
			if d := windowCall(t, c, key, tc.rules, now+1, limit.Cost{N: 1}); d.Allowed || d.Outcomes[len(tc.rules)-1].Remaining != 0 {
				t.Fatalf("cost 1 over the limit: %+v", d)
			}
			if got := c.Get(ctx, key).Val(); got != v {
				t.Fatalf("%s holds %q after a denial, want %q", key, got, v)
			}
			if after := c.PTTL(ctx, key).Val(); after <= 0 || ttl-after > 2*time.Second {
				t.Fatalf("%s PTTL %v after a denial, %v before", key, after, ttl)
			}
			if len(tc.rules) == 2 {
				// One second later the second's rule admits, the hour's
				// denies: nothing is written.
				if d := windowCall(t, c, key, tc.rules, now+1_000_000, limit.Cost{N: 1}); d.Allowed || !d.Outcomes[0].Allowed {
					t.Fatalf("next second: %+v, want the second's rule admitting, the hour's denying", d)
				}
				if got := c.Get(ctx, key).Val(); got != v {
					t.Fatalf("%s holds %q after a denial, want %q", key, got, v)
				}
			}
		})
	}
}

// TestFixedExpiresAtWindowEnd: on Redis's clock (production), each fixed
// window's record names the window holding Redis's now and counts until
// its end (its e), and the counter key expires with the latest of them,
// never before (PEXPIRETIME, Redis 7+; SET ... PX writes value and TTL at
// once, so the key is never without one): for one to four rules, as a
// script and as a function library, whose second descriptor of the same
// rules reads them from what the first call kept.
func TestFixedExpiresAtWindowEnd(t *testing.T) {
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
// key is key, and checks each rule's record, the key's expiry and the
// resets.
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
	recs := counterRecords(t, c, key)
	var latest int64
	for i, r := range rules {
		f := recs[r.ID()]
		if len(f) != 3 || f[2] != "1" {
			t.Fatalf("record of %s: %q, want a count of 1", r.ID(), f)
		}
		e, _ := strconv.ParseInt(f[0], 10, 64)
		w, _ := strconv.ParseInt(f[1], 10, 64)
		found := false
		for _, at := range []time.Time{before, after} { // a window edge may fall between
			now := at.UnixMicro()
			p := r.PeriodMicros()
			if start := now - now%p; w == start && e == (start+p)/1000 {
				found = true
				// The reset reported is the wait until that end.
				if wait := time.Duration(e*1000-now) * time.Microsecond; d.Outcomes[i].Reset > wait+time.Second || d.Outcomes[i].Reset <= 0 {
					t.Fatalf("rule %d resets in %v, its window ends in %v", i, d.Outcomes[i].Reset, wait)
				}
			}
		}
		if !found {
			t.Fatalf("record of %s: %q names no window holding Redis's now (%v .. %v)", r.ID(), f, before, after)
		}
		latest = max(latest, e)
	}
	exp, err := c.Do(ctx, "PEXPIRETIME", key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	// SET ... PX counts from when SET runs, 1 ms added: never before the
	// end; later only by how long Redis took from TIME to SET, a few ms on
	// a busy machine (a generous bound: the record names its window, so a
	// key that lives on counts nothing).
	if exp < latest || exp > latest+1000 {
		t.Fatalf("%s expires at %d ms, want its latest window's end %d (+1 s at most)", key, exp, latest)
	}
}

// TestRulesKeptAcrossCalls holds the decide script to pkg/limit over many
// calls of one function library (FCALL), which keeps the rules it read
// (rule.lua's rc) from one call to the next: descriptors of one, two or
// three fixed windows drawn from one small set of rules (so the same slots come
// back at every position, and the same ids in other orders), now and then
// a limit changed, a shared id, a refund, a charge or a peek, the clock
// moving on across the windows' edges.
func TestRulesKeptAcrossCalls(t *testing.T) {
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
		t.Errorf("%d costs taken by descriptors of distinct ids, %d admitted, %d denied, %d by descriptors of one rule: the steps do not exercise every shape", taken, admitted, denied, one)
	}
	t.Logf("%d costs taken by descriptors of distinct ids, %d admitted, %d denied, %d by descriptors of one rule", taken, admitted, denied, one)
}

// TestKeptRulesNameTheirIDs: two descriptors whose rules have the same
// limits and periods but other ids (slots no Go rule gives, as the ids are
// opaque to the script) write the records of their own ids, also from one
// call of a function library to the next, where rc keeps the rules the
// first read.
func TestKeptRulesNameTheirIDs(t *testing.T) {
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
	recs := counterRecords(t, c, key)
	for id, n := range want {
		if f := recs[id]; len(f) != 3 || f[2] != n {
			t.Errorf("record %s is %q, want count %s", id, f, n)
		}
	}
	if len(recs) != len(want) {
		t.Errorf("records %q, want %d", recs, len(want))
	}
	if ks := c.Keys(ctx, "*{ids}*").Val(); len(ks) != 1 {
		t.Errorf("keys %q, want the counter key alone", ks)
	}
}

// counterRecords reads the records of the counter key key: rule id -> its
// fields after the id (e, then the state's).
func counterRecords(t *testing.T, c *goredis.Client, key string) map[string][]string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err == goredis.Nil {
		return map[string][]string{}
	}
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]string{}
	for _, rec := range strings.Split(v, "|") {
		f := strings.Split(rec, " ")
		m[f[0]] = f[1:]
	}
	return m
}
