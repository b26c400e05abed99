package redis

import (
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

// batchItem is one descriptor of a batch: its harness and its cost.
type batchItem struct {
	h    *harness
	cost limit.Cost
}

// runBatch decides items in one batch call at now and compares every
// descriptor's Decision with limit.Decide run on the items in order, as
// separate calls would be, then each written descriptor's stored state.
// An item whose slots are the item before's goes as a repeatItem, as the
// Redis backend sends it; repeats counts them.
func runBatch(t *testing.T, step string, now limit.Micros, items []batchItem, repeats *int) []limit.Decision {
	t.Helper()
	clock := scriptClock{Fixed: true, At: now}
	args := appendBatchHead(nil, clock)
	var keys []string
	var prev []any
	for _, it := range items {
		prepared := make([]*ruleArgs, len(it.h.rules))
		for i, r := range it.h.rules {
			a, err := prepareRule(r)
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			prepared[i] = a
		}
		keys = append(keys, it.h.keys...)
		item := appendBatchItem(nil, len(it.h.keys), it.cost, prepared, clock)
		if slices.Equal(item, prev) {
			args = appendRepeatItem(args)
			*repeats++
			continue
		}
		args, prev = append(args, item...), item
	}
	h0 := items[0].h
	ints, err := h0.c.Eval(h0.ctx, scripts.DecideScript().Source, keys, args...).Int64Slice()
	if err != nil {
		t.Fatalf("%s: eval: %v", step, err)
	}
	var got []limit.Decision
	written := map[*harness]bool{}
	for i, it := range items {
		d, rest, err := parseBatchInts(ints, make([]limit.Outcome, len(it.h.rules)))
		if err != nil {
			t.Fatalf("%s: descriptor %d: %v", step, i, err)
		}
		ints = rest
		want := limit.Decide(it.h.rules, it.h.states, now, it.cost)
		if d.Allowed != want.Allowed || d.Binding != want.Binding || !slices.Equal(d.Outcomes, want.Outcomes) {
			t.Fatalf("%s: descriptor %d (of %d): now=%d cost=%+v rules=%v\n lua: %+v\n go:  %+v", step, i, len(items), now, it.cost, it.h.rules, d, want)
		}
		written[it.h] = written[it.h] || ((want.Allowed || it.cost.Charge) && it.cost.N > 0)
		got = append(got, d)
	}
	if len(ints) != 0 {
		t.Fatalf("%s: %d values left after the last descriptor", step, len(ints))
	}
	for h, w := range written {
		h.compareState(step, now, w)
	}
	return got
}

// TestBatchMatchesSeparateCalls: one batch call decides each of its
// descriptors exactly as its own call would, in order: random rule sets,
// random costs, several descriptors per batch and the same descriptor more
// than once in one batch (the second sees the first's writes), items
// repeating the item before (the same descriptor again, or another of the
// same limits), compared with limit.Decide at every step and in the stored
// state.
func TestBatchMatchesSeparateCalls(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	zones := []*time.Location{time.UTC, mustZone(t, "America/New_York"), mustZone(t, "Asia/Shanghai")}
	scenarios, steps := 150, 40
	if testing.Short() {
		scenarios = 30
	}
	repeated, oneWindow, repeatItems := 0, 0, 0
	for sc := range scenarios {
		rng := rand.New(rand.NewPCG(uint64(sc), 0xba7c4))
		hs := make([]*harness, 1+rng.IntN(5))
		for i := range hs {
			rules := make([]limit.Rule, 1+rng.IntN(3))
			for k := range rules {
				rules[k] = randomRule(rng, zones)
			}
			if i > 0 && rng.IntN(2) == 0 {
				rules = hs[0].rules // another descriptor of the same limits
			}
			hs[i] = newHarness(t, c, fmt.Sprintf("batch%d.%d", sc, i), rules)
		}
		now := bases[rng.IntN(len(bases))] + rng.Int64N(1_000_000)
		for step := range steps {
			now += rng.Int64N(300_000)
			items := make([]batchItem, 1+rng.IntN(8))
			seen := map[*harness]bool{}
			for i := range items {
				h := hs[rng.IntN(len(hs))]
				if seen[h] {
					repeated++
				}
				seen[h] = true
				items[i] = batchItem{h, randomCost(rng, h.rules)}
				if r, cost := h.rules[0], items[i].cost; len(h.rules) == 1 && r.Algorithm == limit.FixedWindow &&
					r.Location == nil && r.Unit != limit.UnitUnknown && cost.N > 0 && !cost.Refund && !cost.Charge {
					oneWindow++ // decided by the batch's own loop
				}
			}
			runBatch(t, fmt.Sprintf("scenario %d step %d", sc, step), now, items, &repeatItems)
		}
	}
	t.Logf("%d repeated descriptors, %d one-window, %d repeat items", repeated, oneWindow, repeatItems)
	if repeatItems < 100 {
		t.Errorf("only %d items repeating the item before; the scenarios do not exercise them", repeatItems)
	}
	if repeated < 100 {
		t.Errorf("only %d repeated descriptors in a batch; the scenarios do not exercise them", repeated)
	}
	if oneWindow < 100 {
		t.Errorf("only %d descriptors of one fixed window taking a cost; the scenarios do not exercise them", oneWindow)
	}
}

// TestBatchErrorIsPerDescriptor: a descriptor the script must refuse (its
// calendar windows do not hold Redis's now: an instance clock off by more
// than a window) gets its own error, with the script's message, and the
// other descriptors of the batch are decided and written all the same.
func TestBatchErrorIsPerDescriptor(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	now := bases[0]
	good := newHarness(t, c, "batch-good", []limit.Rule{{Unit: limit.Minute, Limit: 5}})
	cal := limit.Rule{Unit: limit.Day, Limit: 5, Location: mustZone(t, "Asia/Shanghai")}
	a := mustPrepareRule(t, cal)
	ga := mustPrepareRule(t, good.rules[0])
	skewed := scriptClock{Fixed: true, At: now + 3*24*3600*1_000_000} // windows computed three days ahead
	clock := scriptClock{Fixed: true, At: now}
	args := appendBatchHead(nil, clock)
	args = appendBatchItem(args, 1, limit.Cost{N: 1}, []*ruleArgs{ga}, clock)
	args = appendBatchItem(args, 1, limit.Cost{N: 1}, []*ruleArgs{a}, skewed)
	args = appendBatchItem(args, 1, limit.Cost{N: 1}, []*ruleArgs{ga}, clock)
	keys := []string{good.counter, "d:{batch-skewed}", good.counter}
	ints, err := c.Eval(good.ctx, scripts.DecideScript().Source, keys, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{4, 0, 3} {
		d, rest, err := parseBatchInts(ints, make([]limit.Outcome, 1))
		ints = rest
		if i == 1 {
			if err == nil || !strings.Contains(err.Error(), "outside the calendar windows") {
				t.Fatalf("skewed descriptor: %+v, err %v; want the calendar error", d, err)
			}
			continue
		}
		if err != nil || !d.Allowed || d.Outcomes[0].Remaining != want {
			t.Fatalf("descriptor %d: %+v, err %v; want admitted with %d remaining", i, d, err, want)
		}
	}
	if n, _ := c.Exists(good.ctx, "d:{batch-skewed}").Result(); n != 0 {
		t.Error("the refused descriptor wrote its key")
	}
}

// itemCalls decides descriptors on one Redis at one instant, in one batch
// call or in separate calls, for tests that compare the two.
type itemCalls struct {
	t     *testing.T
	c     *goredis.Client
	clock scriptClock
}

// callItem is one descriptor of an itemCalls test: its identity, rules and
// cost (0 means 1).
type callItem struct {
	id    string
	rules []*ruleArgs
	n     uint64
}

func (it callItem) cost() limit.Cost {
	if it.n == 0 {
		return limit.Cost{N: 1}
	}
	return limit.Cost{N: it.n}
}

// prepare returns the ruleArgs of rules.
func (ic itemCalls) prepare(rules ...limit.Rule) []*ruleArgs {
	var out []*ruleArgs
	for _, r := range rules {
		a, err := prepareRule(r)
		if err != nil {
			ic.t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// stored renders every key under ns (without ns): its value and TTL.
func (ic itemCalls) stored(ns string) string {
	ctx := ic.t.Context()
	found, err := ic.c.Keys(ctx, ns+"*").Result()
	if err != nil {
		ic.t.Fatal(err)
	}
	m := map[string]string{}
	for _, k := range found {
		v := ic.c.Dump(ctx, k).Val()
		if ic.c.Type(ctx, k).Val() == "zset" {
			v = fmt.Sprint(ic.c.ZRangeWithScores(ctx, k, 0, -1).Val())
		}
		m[strings.TrimPrefix(k, ns)] = v + " ttl " + ic.c.PTTL(ctx, k).Val().Round(time.Minute).String()
	}
	return fmt.Sprint(m)
}

// batch decides items under ns in one call, each repeating the item
// before written as repeatItem when fold is set.
func (ic itemCalls) batch(ns string, items []callItem, together, fold bool) []int64 {
	args := appendBatchHead(nil, ic.clock)
	if together {
		args = appendTogetherHead(nil, ic.clock)
	}
	var keys []string
	var err error
	for i, it := range items {
		k := len(keys)
		if keys, err = appendKeys(keys, ns, it.id, it.rules); err != nil {
			ic.t.Fatal(err)
		}
		if fold && i > 0 && slices.Equal(it.rules, items[i-1].rules) && it.n == items[i-1].n {
			args = appendRepeatItem(args)
			continue
		}
		args = appendBatchItem(args, len(keys)-k, it.cost(), it.rules, ic.clock)
	}
	ints, err := ic.c.Eval(ic.t.Context(), scripts.DecideScript().Source, keys, args...).Int64Slice()
	if err != nil {
		ic.t.Fatal(err)
	}
	return ints
}

// separate decides items under ns, each in its own call.
func (ic itemCalls) separate(ns string, items []callItem) []int64 {
	var all []int64
	for _, it := range items {
		keys, err := appendKeys(nil, ns, it.id, it.rules)
		if err != nil {
			ic.t.Fatal(err)
		}
		args := appendHead(nil, it.cost(), ic.clock)
		for _, r := range it.rules {
			args = r.appendTo(args, ic.clock)
		}
		ints, err := ic.c.Eval(ic.t.Context(), scripts.DecideScript().Source, keys, args...).Int64Slice()
		if err != nil {
			ic.t.Fatal(err)
		}
		all = append(all, ints...)
	}
	return all
}

// TestBatchRepeatItems: a batch whose items repeating the item before are
// written as repeatItem decides, replies and writes exactly as the same
// descriptors decided by separate calls, in order, and as the same batch
// written in full: for each shape of descriptor (the batch's own loop,
// several fixed windows, the general way, a sliding log's key of its own),
// repeats of one descriptor and of others of the same limits, after items
// of other limits; decided one by one ("b") or together ("t"). A second
// batch decided together, whose last descriptor is denied, puts every key
// back, written in full or not.
func TestBatchRepeatItems(t *testing.T) {
	ic := itemCalls{t, redistest.Standalone(t).Client(), scriptClock{Fixed: true, At: 1_800_000_000_000_000}}
	other, deny := ic.prepare(limit.Rule{Unit: limit.Hour, Limit: 5}), ic.prepare(limit.Rule{Unit: limit.Hour, Limit: 0})
	shapes := []struct {
		name  string
		rules []*ruleArgs
	}{
		{"one fixed window", ic.prepare(limit.Rule{Unit: limit.Minute, Limit: 3})},
		{"several fixed windows", ic.prepare(limit.Rule{Unit: limit.Minute, Limit: 3}, limit.Rule{Unit: limit.Hour, Limit: 4})},
		{"the general way", ic.prepare(limit.Rule{Unit: limit.Minute, Limit: 3}, limit.Rule{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 4})},
		{"a sliding log", ic.prepare(limit.Rule{Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 3})},
	}
	for _, together := range []bool{false, true} {
		for _, sh := range shapes {
			t.Run(fmt.Sprintf("%s together=%v", sh.name, together), func(t *testing.T) {
				ic := ic
				ic.t = t
				p := sh.rules
				// a, b three times (its limit), two of other limits, c, a
				// twice: nothing is denied the first time.
				items := []callItem{{"a", p, 0}, {"b", p, 0}, {"b", p, 0}, {"b", p, 0}, {"x", other, 0}, {"y", other, 0}, {"c", p, 0}, {"a", p, 0}, {"a", p, 0}}
				ns := fmt.Sprintf("%s %v ", sh.name, together)
				one, full, fold := ns+"one:", ns+"full:", ns+"fold:"
				want := ic.separate(one, items)
				for _, f := range []bool{false, true} {
					got := ic.batch(map[bool]string{false: full, true: fold}[f], items, together, f)
					if !slices.Equal(got, want) {
						t.Fatalf("batch (repeat items %v) replies\n %v\nseparate calls\n %v", f, got, want)
					}
				}
				if a, b, w := ic.stored(full), ic.stored(fold), ic.stored(one); a != w || b != w {
					t.Fatalf("keys: written in full\n %s\nwith repeat items\n %s\nseparate calls\n %s", a, b, w)
				}
				if !together {
					return
				}
				before := ic.stored(one)
				items = append(items, callItem{"denied", deny, 0})
				a, b := ic.batch(full, items, true, false), ic.batch(fold, items, true, true)
				if !slices.Equal(a, b) {
					t.Fatalf("denied together: repeat items reply\n %v\nwritten in full\n %v", b, a)
				}
				if f, g := ic.stored(full), ic.stored(fold); f != before || g != before {
					t.Fatalf("denied together: keys written in full\n %s\nwith repeat items\n %s\nwant as before\n %s", f, g, before)
				}
			})
		}
	}
}

// TestBatchAlternatingShapes: descriptors of one fixed window whose limits
// alternate within a batch (a request's descriptors per second, minute and
// hour; the same period with another limit, another id or another cost),
// which the batch's loop finds again among the shapes the call met, are
// decided, replied and written exactly as separate calls decide them, over
// rounds that reach each limit.
func TestBatchAlternatingShapes(t *testing.T) {
	ic := itemCalls{t, redistest.Standalone(t).Client(), scriptClock{Fixed: true, At: 1_800_000_000_000_000}}
	sec, min, hour := ic.prepare(limit.Rule{Unit: limit.Second, Limit: 4}), ic.prepare(limit.Rule{Unit: limit.Minute, Limit: 5}), ic.prepare(limit.Rule{Unit: limit.Hour, Limit: 6})
	sec2 := ic.prepare(limit.Rule{Unit: limit.Second, Limit: 2})                // same period, another limit
	sec7 := ic.prepare(limit.Rule{Unit: limit.Second, Multiplier: 7, Limit: 3}) // another period and id
	items := []callItem{
		{"a", sec, 0}, {"a", min, 0}, {"a", hour, 0},
		{"b", sec, 0}, {"b", min, 0}, {"b", hour, 0},
		{"a", sec2, 0}, {"a", sec, 0}, {"c", sec, 2}, {"c", sec, 0}, {"a", sec7, 0},
		{"b", min, 0}, {"a", sec, 0}, {"d", hour, 3},
	}
	for round := range 3 { // the third is mostly denials
		want := ic.separate("one:", items)
		got := ic.batch("batch:", items, false, true)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: batch replies\n %v\nseparate calls\n %v", round, got, want)
		}
		if a, w := ic.stored("batch:"), ic.stored("one:"); a != w {
			t.Fatalf("round %d: keys of the batch\n %s\nof separate calls\n %s", round, a, w)
		}
	}
}

// TestBatchMalformedWritesNothing: a batch whose shape does not add up is
// refused whole before any descriptor is decided.
func TestBatchMalformedWritesNothing(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	h := newHarness(t, c, "batch-bad", []limit.Rule{{Unit: limit.Minute, Limit: 5}})
	a := mustPrepareRule(t, h.rules[0])
	clock := scriptClock{Fixed: true, At: bases[0]}
	args := appendBatchHead(nil, clock)
	args = appendBatchItem(args, 1, limit.Cost{N: 1}, []*ruleArgs{a}, clock)
	args = appendBatchItem(args, 1, limit.Cost{N: 1}, []*ruleArgs{a}, clock)
	for _, tt := range []struct {
		name string
		keys []string
		args []any
	}{
		{"a key short", []string{h.counter}, args},
		{"a slot short", []string{h.counter, h.counter}, args[:len(args)-1]},
		{"a key too many", []string{h.counter, h.counter, h.counter}, args},
		{"a repeat item first", []string{h.counter}, append(appendBatchHead(nil, clock), repeatItem)},
		{"a repeat item without its key", []string{h.counter, h.counter}, appendRepeatItem(appendRepeatItem(args))},
	} {
		err := c.Eval(h.ctx, scripts.DecideScript().Source, tt.keys, tt.args...).Err()
		if err == nil || !strings.Contains(err.Error(), "sluice decide: ") {
			t.Errorf("%s: err %v, want the script's refusal", tt.name, err)
		}
		if n, _ := c.Exists(h.ctx, h.counter).Result(); n != 0 {
			t.Fatalf("%s: the refused batch wrote", tt.name)
		}
	}
}

// TestBatchWrongTypeKeyFailsItsDescriptor: a sliding log key of another
// type fails its descriptor with Redis's error bytes, whatever the
// descriptor's shape (one rule taking a cost, two rules, a peek), the other
// descriptors decided and written; and the same batch sent as a function
// library replies the same.
func TestBatchWrongTypeKeyFailsItsDescriptor(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := t.Context()
	now := limit.Micros(1_800_000_000_000_000)
	minute, hour := limit.Rule{Unit: limit.Minute, Limit: 5}, limit.Rule{Unit: limit.Hour, Limit: 5}
	log := limit.Rule{Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 5}
	pm := mustPrepareRule(t, minute)
	ph := mustPrepareRule(t, hour)
	pl := mustPrepareRule(t, log)
	bad, err := appendKeys(nil, "w:", "bad", []*ruleArgs{pl})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, bad[1], "c", 1).Err(); err != nil {
		t.Fatal(err)
	}
	good := CounterKey("w:", "good")
	clock := scriptClock{Fixed: true, At: now}
	args := appendBatchHead(nil, clock)
	args = appendBatchItem(args, 2, limit.Cost{N: 1}, []*ruleArgs{pl}, clock)
	args = appendBatchItem(args, 2, limit.Cost{N: 1}, []*ruleArgs{ph, pl}, clock)
	args = appendBatchItem(args, 2, limit.Cost{N: 0}, []*ruleArgs{pl}, clock) // a peek
	args = appendBatchItem(args, 1, limit.Cost{N: 1}, []*ruleArgs{pm}, clock)
	keys := []string{bad[0], bad[1], bad[0], bad[1], bad[0], bad[1], good}
	lib := loadDecideLibrary(t, c)
	var replies [][]int64
	for _, fcall := range []bool{false, true} {
		cmd := decideCall(ctx, c, lib, fcall, keys, args)
		ints, err := cmd.Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		replies = append(replies, ints)
		rest := ints
		for i, rules := range []int{1, 2, 1} {
			var err error
			_, rest, err = parseBatchInts(rest, make([]limit.Outcome, rules))
			if err == nil || err.Error() != "WRONGTYPE Operation against a key holding the wrong kind of value" {
				t.Fatalf("fcall %v, descriptor %d: error %v, want Redis's WRONGTYPE message", fcall, i, err)
			}
		}
		d, rest, err := parseBatchInts(rest, make([]limit.Outcome, 1))
		if err != nil || !d.Allowed || len(rest) != 0 {
			t.Fatalf("fcall %v, the good descriptor: %+v, rest %v, err %v", fcall, d, rest, err)
		}
	}
	if f := counterRecords(t, c, good)[minute.ID()]; len(f) != 3 || f[2] != "2" {
		t.Fatalf("the good descriptor's record is %q, want a count of 2 (one per call)", f)
	}
	if n := c.Exists(ctx, bad[0]).Val(); n != 0 {
		t.Fatalf("the failed descriptors wrote their counter key")
	}
	if len(replies[0]) != len(replies[1]) {
		t.Fatalf("script and function replies differ in length: %d, %d", len(replies[0]), len(replies[1]))
	}
}
