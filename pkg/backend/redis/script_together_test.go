package redis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// TestTogetherDenialWritesNothing: a batch decided together whose last
// descriptor is denied leaves every key as it was -- one that held a count
// keeps it and its expiry, none is created, for one rule, two, three, a
// mixed descriptor and a sliding log of 100 entries -- sends no write
// command at all (commandstats), and the admitted descriptors reply as
// peeks.
func TestTogetherDenialWritesNothing(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	minute := limit.Rule{Unit: limit.Minute, Limit: 5}
	bucket := limit.Rule{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 10}
	second, hour := limit.Rule{Unit: limit.Second, Limit: 5}, limit.Rule{Unit: limit.Hour, Limit: 5}
	log := limit.Rule{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 1000}
	items := []struct {
		key   string
		rules []limit.Rule
	}{
		{"t:{held}", []limit.Rule{minute}},                // a record holding 2
		{"t:{fresh}", []limit.Rule{minute}},               // no key yet
		{"t:{mixed}", []limit.Rule{minute, bucket}},       // two records
		{"t:{three}", []limit.Rule{minute, second, hour}}, // the minute's record holding 2, two new
		{"t:{two}", []limit.Rule{second, hour}},           // two new records
		{"t:{log}", []limit.Rule{log}},                    // a sliding log of 100 entries
		{"t:{denied}", []limit.Rule{{Unit: limit.Hour, Limit: 0}}},
	}
	for _, i := range []int{0, 3} {
		if d := windowCall(t, c, items[i].key, []limit.Rule{minute}, now, limit.Cost{N: 2}); !d.Allowed {
			t.Fatal(d)
		}
	}
	logKeys := []string{"t:{log}", "t:{log}:" + log.ID()}
	for i := range 100 {
		if _, err := decideOnce(t, c, logKeys, []limit.Rule{log}, now-100+limit.Micros(i), limit.Cost{N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	dump := func() map[string]string {
		keys, err := c.Keys(ctx, "t:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, k := range keys {
			m[k] = c.Dump(ctx, k).Val() + " ttl " + c.PTTL(ctx, k).Val().Round(time.Minute).String()
		}
		return m
	}
	before := dump()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	clock := scriptClock{Fixed: true, At: now + 1}
	args := appendTogetherHead(nil, clock)
	var keys []string
	for _, it := range items {
		var prepared []*ruleArgs
		for _, r := range it.rules {
			a := mustPrepareRule(t, r)
			prepared = append(prepared, a)
		}
		nk, err := appendKeys(nil, "", strings.Trim(strings.TrimPrefix(it.key, "t:"), "{}"), prepared)
		if err != nil {
			t.Fatal(err)
		}
		for j := range nk {
			nk[j] = "t:" + nk[j]
		}
		keys = append(keys, nk...)
		args = appendBatchItem(args, len(nk), limit.Cost{N: 1}, prepared, clock)
	}
	ints, err := c.Eval(ctx, scripts.DecideScript().Source, keys, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	for cmd, n := range redistest.CommandCalls(t, c) {
		switch cmd {
		case "eval", "time", "get", "zcard", "zrange", "zremrangebyscore", "config|resetstat":
		default:
			t.Errorf("the denied call sent %s %d times: a denial writes nothing", cmd, n)
		}
	}
	wantLeft := []uint64{3, 5, 5, 3, 5, 900, 0}
	for i, it := range items {
		var d limit.Decision
		d, ints, err = parseBatchInts(ints, make([]limit.Outcome, len(it.rules)))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < len(items)-1) || d.Outcomes[0].Remaining != wantLeft[i] {
			t.Errorf("descriptor %d: %+v, want remaining %d (a peek when admitted)", i, d, wantLeft[i])
		}
	}
	after := dump()
	if len(after) != 3 {
		t.Errorf("keys %q, want the three the calls before made", after)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("keys after a denied batch decided together:\n %q\nbefore:\n %q", after, before)
	}
}

// TestTogetherItemFails: in a batch decided together, a descriptor whose
// call fails (here a sliding log key holding a hash: WRONGTYPE) replies
// failed and the others are decided all the same, as in a batch, instead of
// the whole call failing. Through the script (EVAL) and the function
// library (FCALL).
func TestTogetherItemFails(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	lib := loadDecideLibrary(t, c)
	now := limit.Micros(1_800_000_000_000_000)
	minute, second := limit.Rule{Unit: limit.Minute, Limit: 5}, limit.Rule{Unit: limit.Second, Limit: 5}
	log := limit.Rule{Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 5}
	denying := limit.Rule{Unit: limit.Hour, Limit: 0}
	type item struct {
		id    string
		rules []limit.Rule
		bad   bool // its sliding log's key holds a hash
	}
	type want struct {
		failed  bool
		allowed bool
		left    uint64
		count   string // the first rule's record's count after the call ("": none)
	}
	for _, tc := range []struct {
		name  string
		items []item
		want  []want
	}{
		{"a key of another type, nothing denied",
			[]item{{"good", []limit.Rule{minute}, false}, {"bad", []limit.Rule{minute, log}, true}, {"also", []limit.Rule{minute}, false}},
			[]want{{allowed: true, left: 4, count: "1"}, {failed: true}, {allowed: true, left: 4, count: "1"}}},
		{"a key of another type and a denial: nothing written",
			[]item{{"good", []limit.Rule{minute}, false}, {"bad", []limit.Rule{second, log}, true}, {"no", []limit.Rule{denying}, false}},
			[]want{{allowed: true, left: 5}, {failed: true}, {left: 0}}},
	} {
		for _, fcall := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fcall=%v", tc.name, fcall), func(t *testing.T) {
				if err := c.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				clock := scriptClock{Fixed: true, At: now}
				args := appendTogetherHead(nil, clock)
				var keys []string
				for _, it := range tc.items {
					var prepared []*ruleArgs
					for _, r := range it.rules {
						a := mustPrepareRule(t, r)
						prepared = append(prepared, a)
					}
					ks, err := appendKeys(nil, "tf:", it.id, prepared)
					if err != nil {
						t.Fatal(err)
					}
					if it.bad {
						if err := c.HSet(ctx, ks[1], "f", "v").Err(); err != nil {
							t.Fatal(err)
						}
					}
					keys = append(keys, ks...)
					args = appendBatchItem(args, len(ks), limit.Cost{N: 1}, prepared, clock)
				}
				cmd := decideCall(ctx, c, lib, fcall, keys, args)
				ints, err := cmd.Int64Slice()
				if err != nil {
					t.Fatalf("the call failed: %v", err)
				}
				for i, it := range tc.items {
					w := tc.want[i]
					var d limit.Decision
					d, ints, err = parseBatchInts(ints, make([]limit.Outcome, len(it.rules)))
					if w.failed {
						if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
							t.Errorf("descriptor %d: %+v, %v; want it failed with WRONGTYPE", i, d, err)
						}
					} else if err != nil || d.Allowed != w.allowed || d.Outcomes[0].Remaining != w.left {
						t.Errorf("descriptor %d: %+v, %v; want allowed %v, remaining %d", i, d, err, w.allowed, w.left)
					}
					ck := CounterKey("tf:", it.id)
					if it.bad {
						if typ := c.Type(ctx, ck+":"+log.ID()).Val(); typ != "hash" {
							t.Errorf("descriptor %d: its log key is a %s, want the hash left as it was", i, typ)
						}
					}
					got := ""
					if f := counterRecords(t, c, ck)[it.rules[0].ID()]; len(f) == 3 {
						got = f[2]
					}
					if got != w.count {
						t.Errorf("descriptor %d: %s counts %q, want %q", i, ck, got, w.count)
					}
				}
				if len(ints) != 0 {
					t.Errorf("%d integers left in the reply", len(ints))
				}
			})
		}
	}
}

// TestDecideTouchesOnlyDeclaredKeys: whatever a descriptor's rules, the
// decide script writes no key but its KEYS (the counter key and the
// sliding logs' keys), as a single call, in a batch and decided together.
func TestDecideTouchesOnlyDeclaredKeys(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_012_345_678)
	rules := []limit.Rule{{Unit: limit.Second, Multiplier: 7, Limit: 5}, {Unit: limit.Day, Limit: 5},
		{Unit: limit.Day, Limit: 5, Location: time.UTC}, {Algorithm: limit.SlidingWindow, Unit: limit.Second, Limit: 5},
		{Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 5}, {Algorithm: limit.GCRA, Unit: limit.Minute, Limit: 5}}
	var prepared []*ruleArgs
	for _, r := range rules {
		a := mustPrepareRule(t, r)
		prepared = append(prepared, a)
	}
	keys, err := appendKeys(nil, "wk:", "api|k=v", prepared)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"single", "batch", "together"} {
		clock := scriptClock{Fixed: true, At: now}
		var args []any
		switch kind {
		case "single":
			args = appendHead(nil, limit.Cost{N: 1}, clock)
			for _, a := range prepared {
				args = a.appendTo(args, clock)
			}
		case "batch":
			args = appendBatchItem(appendBatchHead(nil, clock), len(keys), limit.Cost{N: 1}, prepared, clock)
		default:
			args = appendBatchItem(appendTogetherHead(nil, clock), len(keys), limit.Cost{N: 1}, prepared, clock)
		}
		if err := c.Eval(ctx, scripts.DecideScript().Source, keys, args...).Err(); err != nil {
			t.Fatal(kind, err)
		}
		got := c.Keys(ctx, "wk:*").Val()
		slices.Sort(got)
		want := slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the script wrote %q, its KEYS are %q", kind, got, want)
		}
	}
}

// TestResetForgetsRules: the reset script drops the chosen records of the
// counter key and the chosen sliding logs, keeps the rest, and counts what
// it removed.
func TestResetForgetsRules(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	minute, hour := limit.Rule{Unit: limit.Minute, Limit: 5}, limit.Rule{Unit: limit.Hour, Limit: 5}
	bucket := limit.Rule{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 10}
	rules := []limit.Rule{minute, hour, bucket}
	key := CounterKey("r:", "id")
	if d := windowCall(t, c, key, rules, now, limit.Cost{N: 2}); !d.Allowed {
		t.Fatal(d)
	}
	keys, argv, err := resetArgs("r:", "id", []limit.Rule{minute, bucket})
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Eval(ctx, scripts.ResetScript().Source, keys, argv...).Int64()
	if err != nil || n != 2 {
		t.Fatalf("reset removed %d (%v), want 2: the minute's record, the bucket's", n, err)
	}
	if recs := counterRecords(t, c, key); len(recs) != 1 || recs[hour.ID()] == nil {
		t.Errorf("records after the reset: %q, want the hour's alone", recs)
	}
	d := windowCall(t, c, key, rules, now+10, limit.Cost{})
	for i, want := range []uint64{5, 3, 10} {
		if got := d.Outcomes[i].Remaining; got != want {
			t.Errorf("after the reset, rule %d has %d left, want %d", i, got, want)
		}
	}
}

// decideOnce runs one decide call of rules at now (the test clock) on keys
// (appendKeys's) and returns its reply.
func decideOnce(t *testing.T, c *goredis.Client, keys []string, rules []limit.Rule, now limit.Micros, cost limit.Cost) (limit.Decision, error) {
	t.Helper()
	args, err := appendDecideArgs(nil, rules, cost, scriptClock{Fixed: true, At: now})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := c.Eval(context.Background(), scripts.DecideScript().Source, keys, args...).Result()
	if err != nil {
		return limit.Decision{}, err
	}
	return parseDecideReply(reply, len(rules))
}

// TestTogetherDenialCostIsItsOwn: a batch decided together and denied,
// beside a sliding log of 100,000 entries, costs Redis what its own reads
// cost, never what is stored: its script's longest run (SLOWLOG) is under
// 20 ms, as is the same batch not decided together, and the log is left
// as it was.
func TestTogetherDenialCostIsItsOwn(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	log := limit.Rule{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 1_000_000}
	denying := limit.Rule{Unit: limit.Hour, Limit: 0}
	pl := mustPrepareRule(t, log)
	pd := mustPrepareRule(t, denying)
	lk, err := appendKeys(nil, "big:", "log", []*ruleArgs{pl})
	if err != nil {
		t.Fatal(err)
	}
	const entries = 100_000
	for start := 0; start < entries; start += 5000 {
		var zs []goredis.Z
		for i := start; i < start+5000; i++ {
			zs = append(zs, goredis.Z{Score: float64(now - entries + limit.Micros(i)), Member: fmt.Sprintf("%020d:1", i+1)})
		}
		if err := c.ZAdd(ctx, lk[1], zs...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Dump(ctx, lk[1]).Val()
	if err := c.ScriptLoad(ctx, scripts.DecideScript().Source).Err(); err != nil { // compiled before it is timed
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		t.Fatal(err)
	}
	longest := func(together bool) time.Duration {
		t.Helper()
		if err := c.SlowLogReset(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clock := scriptClock{Fixed: true, At: now}
		args := appendBatchHead(nil, clock)
		if together {
			args = appendTogetherHead(nil, clock)
		}
		args = appendBatchItem(args, 2, limit.Cost{N: 1}, []*ruleArgs{pl}, clock)
		args = appendBatchItem(args, 1, limit.Cost{N: 1}, []*ruleArgs{pd}, clock)
		keys := []string{lk[0], lk[1], CounterKey("big:", "denied")}
		ints, err := c.Eval(ctx, scripts.DecideScript().Source, keys, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		d, rest, err := parseBatchInts(ints, make([]limit.Outcome, 1))
		if err != nil || !d.Allowed {
			t.Fatalf("together %v: the log's descriptor %+v, %v", together, d, err)
		}
		if d, _, err := parseBatchInts(rest, make([]limit.Outcome, 1)); err != nil || d.Allowed {
			t.Fatalf("together %v: the denying descriptor %+v, %v", together, d, err)
		}
		logs, err := c.SlowLogGet(ctx, 128).Result()
		if err != nil {
			t.Fatal(err)
		}
		var most time.Duration
		for _, l := range logs {
			if len(l.Args) > 0 && strings.EqualFold(l.Args[0], "eval") {
				most = max(most, l.Duration)
			}
		}
		return most
	}
	tog := longest(true)
	if after := c.Dump(ctx, lk[1]).Val(); after != before {
		t.Fatalf("a denied batch decided together changed the log")
	}
	alone := longest(false)
	t.Logf("longest script run: %v decided together (denied), %v as a batch", tog, alone)
	if tog <= 0 || tog >= 20*time.Millisecond || alone >= 20*time.Millisecond {
		t.Errorf("longest script run %v decided together, %v as a batch: want both under 20 ms", tog, alone)
	}
}
