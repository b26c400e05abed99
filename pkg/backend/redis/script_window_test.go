package redis

import (
	"context"
	"fmt"
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

// TestClusterAllowsUndeclaredKeyOfDeclaredSlot proves what the window
// counters rely on (CONTRACT.md, "Keys"): on a real 3-master Redis Cluster
// a script, and a function, may write a key it did not declare in KEYS when
// that key is in the slot of a declared one (same hash tag); and Redis does
// refuse an undeclared key of another node, and a function one of another
// slot, so the check is there. (A script without a shebang, run by EVAL, is
// let touch other slots of its node: Redis 7 keeps that for old scripts.)
// Then the decide script, as a function and as a script, decides fixed
// windows there, on window keys in the slot of KEYS[1].
func TestClusterAllowsUndeclaredKeyOfDeclaredSlot(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{})
	cc := c.Client()
	ctx := context.Background()
	const body = "return redis.call('INCRBY', ARGV[1], 1)"
	const lib = "#!lua name=slotproof\nredis.register_function('slotproof', function(KEYS, ARGV) " + body + " end)\n"
	for _, m := range c.Masters() {
		if err := c.NodeClient(m).FunctionLoadReplace(ctx, lib).Err(); err != nil {
			t.Fatal(err)
		}
	}
	declared := "sluice_{a|b}"
	home, err := c.KeySlot(declared)
	if err != nil {
		t.Fatal(err)
	}
	homeNode, err := c.MasterOf(home)
	if err != nil {
		t.Fatal(err)
	}
	// A key of another slot on the same node, and one on another node.
	var sameNode, otherNode string
	for i := 0; sameNode == "" || otherNode == ""; i++ {
		k := "sluice_{" + string(rune('c'+i%20)) + string(rune('a'+i/20)) + "}:fw.1se:1"
		s, err := c.KeySlot(k)
		if err != nil {
			t.Fatal(err)
		}
		n, err := c.MasterOf(s)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case s != home && n == homeNode && sameNode == "":
			sameNode = k
		case n != homeNode && otherNode == "":
			otherNode = k
		}
	}
	for _, tc := range []struct {
		name, key       string
		evalOK, fcallOK bool
	}{
		{"window key of the declared slot", declared + ":fw.1se:1763900000", true, true},
		{"another slot of the same node", sameNode, true, false},
		{"a slot of another node", otherNode, false, false},
	} {
		for _, fcall := range []bool{false, true} {
			var err error
			if fcall {
				err = cc.FCall(ctx, "slotproof", []string{declared}, tc.key).Err()
			} else {
				err = cc.Eval(ctx, body, []string{declared}, tc.key).Err()
			}
			want := tc.evalOK
			if fcall {
				want = tc.fcallOK
			}
			if (err == nil) != want {
				t.Errorf("%s (%s, FCALL %v): error %v", tc.name, tc.key, fcall, err)
			} else {
				t.Logf("%s (FCALL %v): %v", tc.name, fcall, err)
			}
		}
	}

	// The decide script itself, as a function and as a script, on a
	// descriptor of fixed windows (the window path) and a mixed one (the
	// general way): it decides, and its window keys are in the slot of
	// KEYS[1].
	dlib := scripts.DecideLibrary()
	for _, m := range c.Masters() {
		if err := c.NodeClient(m).FunctionLoadReplace(ctx, dlib.Source).Err(); err != nil {
			t.Fatal(err)
		}
	}
	now := limit.Micros(1_800_000_000_000_000)
	minute := limit.Rule{Unit: limit.Minute, Limit: 5}
	for i, rules := range [][]limit.Rule{
		{minute, {Unit: limit.Hour, Limit: 50}},
		{minute, {Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 50}},
	} {
		for _, fcall := range []bool{false, true} {
			id := fmt.Sprintf("cluster|case=%d|fcall=%v", i, fcall)
			counter := CounterKey("sluice_", id)
			args, err := appendDecideArgs(nil, rules, limit.Cost{N: 1}, scriptClock{Fixed: true, At: now})
			if err != nil {
				t.Fatal(err)
			}
			var cmd *goredis.Cmd
			if fcall {
				cmd = cc.FCall(ctx, dlib.Function, []string{counter}, args...)
			} else {
				cmd = cc.Eval(ctx, scripts.DecideScript().Source, []string{counter}, args...)
			}
			d, err := parseDecideReply(cmd.Val(), len(rules))
			if cmd.Err() != nil || err != nil || !d.Allowed || d.Outcomes[0].Remaining != 4 {
				t.Fatalf("%s: %+v, %v, %v", id, d, cmd.Err(), err)
			}
			wk, _ := windowKeyName("sluice_", id, minute, now)
			if got := cc.Get(ctx, wk).Val(); got != "1" {
				t.Errorf("%s: %s holds %q, want 1", id, wk, got)
			}
			ws, err := c.KeySlot(wk)
			if err != nil {
				t.Fatal(err)
			}
			if cs, err := c.KeySlot(counter); err != nil || cs != ws {
				t.Errorf("%s: window key in slot %d, counter key in %d (%v)", id, ws, cs, err)
			}
		}
	}
}

// windowRule reports whether the decide script keeps r's state in window
// keys (CONTRACT.md, "Window keys"): an epoch-aligned fixed window.
func windowRule(r limit.Rule) bool {
	return r.PeriodMicros() > 0 && r.Algorithm == limit.FixedWindow && r.Location == nil
}

// windowPath reports whether the decide script decides rules on the window
// path, which never reads the counter key: every rule an epoch-aligned
// fixed window or of an unknown unit.
func windowPath(rules []limit.Rule) bool {
	for _, r := range rules {
		if r.PeriodMicros() > 0 && !windowRule(r) {
			return false
		}
	}
	return true
}

// windowKey is the key holding rule r's count in the window holding now,
// for the descriptor whose counter key is counter.
func windowKey(counter string, r limit.Rule, now limit.Micros) string {
	p := r.PeriodMicros()
	start := now - (now%p+p)%p
	return counter + ":" + r.ID() + ":" + strconv.FormatInt(start/1_000_000, 10)
}

// compareWindows is compareState for a descriptor on the window path: each
// fixed window's key is compared (compareWindow), and the counter key is
// not read. It reports whether the descriptor is on the window path.
func (h *harness) compareWindows(step string, now limit.Micros) bool {
	h.t.Helper()
	if !windowPath(h.rules) {
		return false
	}
	for i, r := range h.rules {
		if r.PeriodMicros() > 0 {
			h.compareWindow(step, now, i)
		}
	}
	return true
}

// compareWindow checks the window key of rule i (an epoch-aligned fixed
// window) for the window holding now: it holds pkg/limit's count, exists
// only when that count is not 0, and expires at the window's end (plus
// the test slack).
func (h *harness) compareWindow(step string, now limit.Micros, i int) {
	h.t.Helper()
	r := h.rules[i]
	s, key := h.states[i], windowKey(h.counter, r, now)
	start := now - (now%r.PeriodMicros()+r.PeriodMicros())%r.PeriodMicros()
	var want uint64
	if s.Expires > now && s.Window == start {
		want = s.Count
	}
	got, err := h.c.Get(h.ctx, key).Uint64()
	if err == goredis.Nil {
		if want != 0 {
			h.t.Fatalf("%s: %s absent, go counts %d", step, key, want)
		}
		return
	}
	if err != nil || got != want || want == 0 {
		h.t.Fatalf("%s: %s holds %d (%v), go counts %d", step, key, got, err, want)
	}
	// Set when the key was created, at an earlier (test) now of the
	// same window: it lives until the window's end, and at most a
	// whole window, plus the slack.
	pttl, err := h.c.PTTL(h.ctx, key).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	slack := 600 * time.Second
	least := time.Duration((start+r.PeriodMicros()-now+999)/1000)*time.Millisecond + slack - 30*time.Second
	most := time.Duration(r.PeriodMicros())*time.Microsecond + slack
	if pttl < least || pttl > most {
		h.t.Fatalf("%s: %s PTTL %v, want within [%v, %v]", step, key, pttl, least, most)
	}
}

// TestTogetherRestoresWindowKeys: a batch decided together whose last
// descriptor is denied leaves every key as it was -- the window keys too,
// which are not in KEYS: one that held a count keeps it and its expiry,
// one the batch created is gone, for one rule, for two and three decided
// written out, and for the general way -- and the admitted descriptors
// reply as peeks.
func TestTogetherRestoresWindowKeys(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	minute := limit.Rule{Unit: limit.Minute, Limit: 5}
	bucket := limit.Rule{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 10}
	second, hour := limit.Rule{Unit: limit.Second, Limit: 5}, limit.Rule{Unit: limit.Hour, Limit: 5}
	items := []struct {
		key   string
		rules []limit.Rule
	}{
		{"t:{held}", []limit.Rule{minute}},                // a window key holding 2
		{"t:{fresh}", []limit.Rule{minute}},               // no key yet
		{"t:{mixed}", []limit.Rule{minute, bucket}},       // the general way: window key and record
		{"t:{three}", []limit.Rule{minute, second, hour}}, // written out: the minute's key holding 2, two new
		{"t:{two}", []limit.Rule{second, hour}},           // written out: two new keys
		{"t:{denied}", []limit.Rule{{Unit: limit.Hour, Limit: 0}}},
	}
	for _, i := range []int{0, 3} {
		if d := windowCall(t, c, items[i].key, []limit.Rule{minute}, now, limit.Cost{N: 2}); !d.Allowed {
			t.Fatal(d)
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
	clock := scriptClock{Fixed: true, At: now + 1}
	args := appendTogetherHead(nil, clock)
	var keys []string
	for _, it := range items {
		var prepared []*ruleArgs
		for _, r := range it.rules {
			a, err := prepareRule(r)
			if err != nil {
				t.Fatal(err)
			}
			prepared = append(prepared, a)
		}
		keys = append(keys, it.key)
		args = appendBatchItem(args, 1, limit.Cost{N: 1}, prepared, clock)
	}
	ints, err := c.Eval(ctx, scripts.DecideScript().Source, keys, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	wantLeft := []uint64{3, 5, 5, 3, 5, 0}
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
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("keys after a denied batch decided together:\n %q\nbefore:\n %q", after, before)
	}
}

// TestTogetherItemFails: in a batch decided together, a descriptor whose
// call fails (here a window key holding a hash: WRONGTYPE) replies failed
// and the others are decided all the same, as in a batch, instead of the
// whole call failing with the counts of the descriptors before it taken.
// A denial still puts every key back (the failed descriptor's writes too).
// Through the script (EVAL) and the function library (FCALL).
func TestTogetherItemFails(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	lib := loadDecideLibrary(t, c)
	now := limit.Micros(1_800_000_000_000_000)
	minute, second := limit.Rule{Unit: limit.Minute, Limit: 5}, limit.Rule{Unit: limit.Second, Limit: 5}
	denying := limit.Rule{Unit: limit.Hour, Limit: 0}
	type item struct {
		id    string
		rules []limit.Rule
		bad   int // the rule (from 1) whose window key holds a hash; 0: none
	}
	type want struct {
		failed  bool
		allowed bool
		left    uint64
		count   int64 // the first rule's window key after the call (0: absent)
	}
	for _, tc := range []struct {
		name  string
		items []item
		want  []want
	}{
		{"a key of another type, nothing denied",
			[]item{{"good", []limit.Rule{minute}, 0}, {"bad", []limit.Rule{minute}, 1}, {"also", []limit.Rule{minute}, 0}},
			[]want{{allowed: true, left: 4, count: 1}, {failed: true}, {allowed: true, left: 4, count: 1}}},
		{"the second of three windows of another type, nothing denied",
			[]item{{"good", []limit.Rule{minute}, 0}, {"bad", []limit.Rule{minute, second, limit.Rule{Unit: limit.Hour, Limit: 5}}, 2}, {"also", []limit.Rule{second}, 0}},
			// the failed descriptor's first count stays, as in a batch
			[]want{{allowed: true, left: 4, count: 1}, {failed: true, count: 1}, {allowed: true, left: 4, count: 1}}},
		{"a key of another type and a denial: every key put back",
			[]item{{"good", []limit.Rule{minute}, 0}, {"bad", []limit.Rule{minute, second}, 2}, {"no", []limit.Rule{denying}, 0}},
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
					for i, r := range it.rules {
						a, err := prepareRule(r)
						if err != nil {
							t.Fatal(err)
						}
						prepared = append(prepared, a)
						if i+1 == it.bad {
							wk, _ := windowKeyName("tf:", it.id, r, now)
							if err := c.HSet(ctx, wk, "f", "v").Err(); err != nil {
								t.Fatal(err)
							}
						}
					}
					keys = append(keys, CounterKey("tf:", it.id))
					args = appendBatchItem(args, 1, limit.Cost{N: 1}, prepared, clock)
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
					wk, _ := windowKeyName("tf:", it.id, it.rules[0], now)
					if it.bad == 1 {
						if typ := c.Type(ctx, wk).Val(); typ != "hash" {
							t.Errorf("descriptor %d: %s is a %s, want the hash left as it was", i, wk, typ)
						}
						continue
					}
					got, err := c.Get(ctx, wk).Int64()
					if err == goredis.Nil {
						got, err = 0, nil
					}
					if err != nil || got != w.count {
						t.Errorf("descriptor %d: %s holds %d (%v), want %d", i, wk, got, err, w.count)
					}
				}
				if len(ints) != 0 {
					t.Errorf("%d integers left in the reply", len(ints))
				}
			})
		}
	}
}

// TestWindowKeyNamesTheScriptsKey: windowKeyName names the key the decide
// script writes for an epoch-aligned fixed window, and no key for other
// rules.
func TestWindowKeyNamesTheScriptsKey(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_012_345_678)
	rules := []limit.Rule{{Unit: limit.Second, Multiplier: 7, Limit: 5}, {Unit: limit.Day, Limit: 5}}
	if d := windowCall(t, c, CounterKey("wk:", "api|k=v"), rules, now, limit.Cost{N: 1}); !d.Allowed {
		t.Fatal(d)
	}
	var want []string
	for _, r := range rules {
		k, ok := windowKeyName("wk:", "api|k=v", r, now)
		if !ok {
			t.Fatalf("no window key for %v", r)
		}
		want = append(want, k)
	}
	got := c.Keys(ctx, "wk:*").Val()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the script wrote %q, windowKeyName names %q", got, want)
	}
	for _, r := range []limit.Rule{
		{Algorithm: limit.SlidingWindow, Unit: limit.Second, Limit: 1},
		{Unit: limit.Day, Limit: 1, Location: time.UTC},
		{Unit: limit.UnitUnknown, Limit: 1},
	} {
		if k, ok := windowKeyName("wk:", "x", r, now); ok {
			t.Errorf("windowKeyName(%v) = %q, want none", r, k)
		}
	}
}

// TestResetForgetsWindowKeys: the reset script deletes the window key of
// each chosen fixed window for the window holding now, drops the chosen
// records of the counter key, keeps the rest, and counts what it removed.
func TestResetForgetsWindowKeys(t *testing.T) {
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
	keys, argv, err := resetArgs("r:", "id", []limit.Rule{minute, bucket}, scriptClock{Fixed: true, At: now + 5})
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Eval(ctx, scripts.ResetScript().Source, keys, argv...).Int64()
	if err != nil || n != 2 {
		t.Fatalf("reset removed %d (%v), want 2: the minute's window key, the bucket's record", n, err)
	}
	d := windowCall(t, c, key, rules, now+10, limit.Cost{})
	for i, want := range []uint64{5, 3, 10} {
		if got := d.Outcomes[i].Remaining; got != want {
			t.Errorf("after the reset, rule %d has %d left, want %d", i, got, want)
		}
	}
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("the counter key is left without records: %q", c.Get(ctx, key).Val())
	}
}
