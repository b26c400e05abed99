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

// takeItem is one descriptor of a batch in TestBatchWindowsTaken: its
// identity, rules and cost, and whether the batch's loop decides it as
// descriptors of two or three fixed windows (else the single-window loop
// or decide_item).
type takeItem struct {
	id     string
	rules  []*ruleArgs
	cost   limit.Cost
	inline bool
}

// takeRound is one batch of TestBatchWindowsTaken, at an instant after the
// case's start.
type takeRound struct {
	at    limit.Micros
	items []takeItem
}

// takeBatch returns the KEYS and ARGV of one batch of items under the key
// prefix ns at now, an item whose slots are the item before's written as
// a repeatItem (as the Redis backend sends it).
func takeBatch(t *testing.T, ns string, now limit.Micros, items []takeItem) ([]string, []any) {
	t.Helper()
	clock := scriptClock{Fixed: true, At: now}
	args := appendBatchHead(nil, clock)
	var keys []string
	var prev []any
	for _, it := range items {
		k := len(keys)
		var err error
		if keys, err = appendKeys(keys, ns, it.id, it.rules); err != nil {
			t.Fatal(err)
		}
		item := appendBatchItem(nil, len(keys)-k, it.cost, it.rules, clock)
		if slices.Equal(item, prev) {
			args = appendRepeatItem(args)
			continue
		}
		args, prev = append(args, item...), item
	}
	return keys, args
}

// prepareRules returns the ruleArgs of rules.
func prepareRules(t *testing.T, rules ...limit.Rule) []*ruleArgs {
	t.Helper()
	var out []*ruleArgs
	for _, r := range rules {
		a, err := prepareRule(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// renderKeys renders every key under ns (without ns): its type, its value
// when a string, and its time to live (to the minute; "none" when it has
// none, which a key the script left without its expiry shows).
func renderKeys(t *testing.T, c *goredis.Client, ns string) string {
	t.Helper()
	ctx := context.Background()
	found, err := c.Keys(ctx, ns+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(found)
	var b strings.Builder
	for _, k := range found {
		typ := c.Type(ctx, k).Val()
		v := typ
		if typ == "string" {
			v = c.Get(ctx, k).Val()
		}
		ttl := "none"
		if d := c.PTTL(ctx, k).Val(); d >= 0 {
			ttl = d.Round(time.Minute).String()
		}
		fmt.Fprintf(&b, "%s=%s ttl %s\n", strings.TrimPrefix(k, ns), v, ttl)
	}
	return b.String()
}

// TestBatchWindowsTaken holds the batch loop's own decision of descriptors
// of two or three fixed windows of distinct ids taking a cost every limit
// can hold (win_take's descriptor) to the decision decide_item makes of
// them (a script variant that leaves them to it, as before), byte for
// byte: batches mixing descriptors of one, two and three windows, the
// same descriptor and others of the same limits repeated (repeatItem),
// denials in the middle of a batch by each rule (keys the denial made
// deleted), costs the loop leaves to decide_item, counts near 2^53, and
// window keys of another type at each rule position (the descriptor's
// error; the counts its commands took before the failure stay, as they do
// under decide_item). Every batch is run by the decide script (EVAL and,
// on keys of its own, FCALL of its library), by the reference variant,
// and by a variant that lists the descriptors the loop decides (which
// must be the items marked inline); without keys of another type, also as
// separate calls. The replies and every key (value, expiry) must be the
// same.
func TestBatchWindowsTaken(t *testing.T) {
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	cur := scripts.DecideScript()
	ref := variant(t, "elseif WINDOWS and nks == '1' and (nas == '12' or nas == '17')",
		"elseif false and nks == '1' and (nas == '12' or nas == '17')")
	mark := variant(t, "    elseif mr > 0 then\n", "    elseif mr > 0 then\n      call('RPUSH', 'inline', KEYS[k + 1])\n")
	lib := loadDecideLibrary(t, c)
	prep := func(rules ...limit.Rule) []*ruleArgs { return prepareRules(t, rules...) }
	sec := func(l uint64) limit.Rule { return limit.Rule{Unit: limit.Second, Limit: l} }
	tens := func(l uint64) limit.Rule { return limit.Rule{Unit: limit.Second, Multiplier: 10, Limit: l} }
	minute := func(l uint64) limit.Rule { return limit.Rule{Unit: limit.Minute, Limit: l} }
	hour := func(l uint64) limit.Rule { return limit.Rule{Unit: limit.Hour, Limit: l} }
	w1 := prep(minute(4))
	w2 := prep(minute(3), hour(5))
	w2b := prep(sec(1), minute(1))
	w2x := prep(sec(5), hour(maxExact-1))
	w3 := prep(sec(6), minute(4), hour(5))
	w3b := prep(hour(2), sec(9), minute(9))
	w3c := prep(sec(9), tens(9), hour(2))
	w3t := prep(sec(4), minute(4), hour(4)) // admitted: equal remaining, the latest reset binds
	shared := prep(minute(3), minute(5))
	shared13, shared23 := prep(sec(6), minute(4), sec(9)), prep(sec(6), minute(4), minute(9))
	four := prep(sec(9), tens(9), minute(9), hour(9))
	mixed := prep(minute(3), limit.Rule{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 4})
	unknown := prep(sec(3), limit.Rule{Unit: limit.UnitUnknown, Limit: 5})
	one, two := limit.Cost{N: 1}, limit.Cost{N: 2}
	// wrong names a window key to write as a hash before the case: the
	// rule of rules at pos, for the descriptor id.
	type wrong struct {
		id    string
		rules []limit.Rule
		pos   int
	}
	w3rules := []limit.Rule{sec(6), minute(4), hour(5)}
	var admitted, denied, failed int // by the batch's loop, over every case
	for i, tc := range []struct {
		name   string
		wrong  []wrong
		rounds []takeRound
	}{
		{"one, two and three windows mixed, repeated, until denied", nil, []takeRound{
			{0, []takeItem{
				{"a", w3, one, true}, {"b", w3, one, true}, {"b", w3, one, true}, {"c", w1, one, false}, {"c", w1, one, false},
				{"d", w2, one, true}, {"e", w3b, one, true}, {"a", w3, one, true}, {"f", w2, one, true}, {"f", w2, one, true},
				{"a", w1, one, false}, {"a", w3, one, true}, {"e", w3b, one, true}, {"d", w2, one, true},
				{"t", w3t, one, true}, {"u", w3t, one, true}, {"t", w3t, two, true},
			}},
			{1_000, []takeItem{
				{"a", w3, one, true}, {"a", w3, one, true}, {"b", w3, two, true}, {"c", w1, one, false}, {"d", w2, two, true},
				{"e", w3b, one, true}, {"e", w3b, one, true}, {"f", w2, one, true}, {"a", w1, one, false}, {"b", w3, one, true},
			}},
			{1_000_000, []takeItem{ // a new second's window
				{"a", w3, one, true}, {"b", w3, one, true}, {"d", w2, one, true}, {"e", w3b, one, true}, {"f", w2, one, true},
				{"c", w1, one, false}, {"a", w3, one, true},
			}},
			{60_000_000, []takeItem{ // a new minute's
				{"a", w3, one, true}, {"b", w3, one, true}, {"b", w3, one, true}, {"d", w2, one, true}, {"a", w1, one, false},
			}},
		}},
		{"denied by each rule, keys the denial made deleted", nil, []takeRound{
			{0, []takeItem{
				{"g", w3, two, true}, {"g", w3, two, true}, {"g", w3, one, true}, // the third denied by the minute
				{"h", w3b, two, true}, {"h", w3b, one, true}, // denied by the hour, first
				{"i", w3c, two, true}, {"i", w3c, one, true}, // denied by the hour, third
				{"j", w2, limit.Cost{N: 3}, true}, {"j", w2, one, true}, // denied by the first of two
				{"l", w2b, one, true}, {"l", w2b, one, true}, // both deny: the later reset binds
				{"g", w3, one, true},
			}},
			{1_000_000, []takeItem{ // new seconds: each denial deletes the key it made
				{"g", w3, one, true}, {"i", w3c, one, true}, {"l", w2b, one, true}, {"h", w3b, one, true},
			}},
			{10_000_000, []takeItem{
				{"i", w3c, one, true}, {"g", w3, one, true}, {"l", w2b, one, true},
			}},
		}},
		{"costs left to decide_item between costs taken", nil, []takeRound{
			{0, []takeItem{
				{"m", w3, two, true},
				{"m", w3, limit.Cost{N: 1, Refund: true}, false},
				{"m", w3, limit.Cost{N: 3, Charge: true}, false},
				{"m", w3, limit.Cost{}, false},
				{"m", w3, limit.Cost{N: 5}, false}, // above the minute's limit
				{"m", w3, one, true},
				{"n", shared, one, false}, {"n", four, one, false}, {"n", mixed, one, false}, {"n", unknown, one, false},
				{"n", w2, one, true}, {"n", shared, one, false}, {"n", w2, one, true},
				{"n", shared13, one, false}, {"n", shared23, one, false}, {"n", w3, one, true},
			}},
			{2_000, []takeItem{
				{"m", w3, limit.Cost{N: 2, Refund: true}, false}, {"m", w3, one, true}, {"m", w3, one, true},
			}},
		}},
		{"counts at 2^53", nil, []takeRound{
			{0, []takeItem{
				{"q", w2x, limit.Cost{N: maxExact - 1, Charge: true}, false},
				{"q", w2x, limit.Cost{N: maxExact - 1, Charge: true}, false},
				{"q", w2x, one, true}, {"q", w2x, limit.Cost{N: 5}, true}, {"r", w2x, one, true},
			}},
			{1_000_000, []takeItem{{"q", w2x, limit.Cost{N: 3}, true}, {"q", w2x, one, true}}},
		}},
		{"a key of another type at each rule", []wrong{{"x1", w3rules, 0}, {"x2", w3rules, 1}, {"x3", w3rules, 2}, {"y", w3rules[1:], 1}}, []takeRound{
			{0, []takeItem{
				{"a", w3, one, true}, {"x1", w3, one, true}, {"b", w3, one, true}, {"x2", w3, one, true}, {"x3", w3, one, true},
				{"x3", w3, one, true}, {"y", prep(minute(4), hour(5)), one, true}, {"c", w1, one, false}, {"a", w3, one, true},
				{"x2", w3, limit.Cost{N: 2, Refund: true}, false}, {"x2", w3, one, true},
			}},
			{1_000, []takeItem{{"x2", w3, one, true}, {"x2", w3, one, true}, {"a", w3, one, true}}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case an hour before the one above it, 0.3 s into a second.
			start := limit.Micros(1_800_000_000_300_000) - limit.Micros(i)*3_600_000_000
			// The keys of each way of deciding, under a prefix of their own.
			var ns struct{ new, fn, ref, mark, one string }
			prefix := func(way string) string { return fmt.Sprintf("case%d %s:", i, way) }
			ns.new, ns.fn, ns.ref, ns.mark, ns.one = prefix("new"), prefix("fn"), prefix("ref"), prefix("mark"), prefix("one")
			for _, w := range tc.wrong {
				for _, p := range []string{ns.new, ns.fn, ns.ref, ns.mark} {
					k := windowKey(p+"{"+w.id+"}", w.rules[w.pos], start)
					if err := c.HSet(ctx, k, "f", 1).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			for r, round := range tc.rounds {
				now := start + round.at
				label := fmt.Sprintf("round %d", r)
				run := func(ns string, call func(keys []string, args []any) *goredis.Cmd) []int64 {
					keys, args := takeBatch(t, ns, now, round.items)
					ints, err := call(keys, args).Int64Slice()
					if err != nil {
						t.Fatalf("%s, %s: %v", label, ns, err)
					}
					return ints
				}
				eval := func(s scripts.Script) func([]string, []any) *goredis.Cmd {
					return func(keys []string, args []any) *goredis.Cmd { return c.Eval(ctx, s.Source, keys, args...) }
				}
				got := run(ns.new, eval(cur))
				fn := run(ns.fn, func(keys []string, args []any) *goredis.Cmd { return c.FCall(ctx, lib.Function, keys, args...) })
				want := run(ns.ref, eval(ref))
				if err := c.Del(ctx, "inline").Err(); err != nil {
					t.Fatal(err)
				}
				marked := run(ns.mark, eval(mark))
				if !slices.Equal(got, want) || !slices.Equal(fn, want) || !slices.Equal(marked, want) {
					t.Fatalf("%s: the batch replies\n %v\nas a function\n %v\nlisting\n %v\ndecide_item decides\n %v", label, got, fn, marked, want)
				}
				if g, f, w, m := renderKeys(t, c, ns.new), renderKeys(t, c, ns.fn), renderKeys(t, c, ns.ref), renderKeys(t, c, ns.mark); g != w || f != w || m != w {
					t.Fatalf("%s: keys of the batch\n%s\nas a function\n%s\nlisting\n%s\ndecide_item's\n%s", label, g, f, m, w)
				}
				var inline, wantInline []string
				for _, k := range c.LRange(ctx, "inline", 0, -1).Val() {
					inline = append(inline, strings.TrimSuffix(strings.TrimPrefix(k, ns.mark+"{"), "}"))
				}
				for _, it := range round.items {
					if it.inline {
						wantInline = append(wantInline, it.id)
					}
				}
				if !slices.Equal(inline, wantInline) {
					t.Fatalf("%s: the batch's loop decided %q, want %q", label, inline, wantInline)
				}
				rest := want
				for j, it := range round.items {
					d, next, err := parseBatchInts(rest, make([]limit.Outcome, len(it.rules)))
					rest = next
					switch {
					case !it.inline:
					case err != nil:
						failed++
					case d.Allowed:
						admitted++
					default:
						denied++
					}
					if err != nil && tc.wrong == nil {
						t.Fatalf("%s: descriptor %d: %v", label, j, err)
					}
				}
				if tc.wrong != nil {
					continue
				}
				var sep []int64
				for _, it := range round.items {
					keys, err := appendKeys(nil, ns.one, it.id, it.rules)
					if err != nil {
						t.Fatal(err)
					}
					args := appendHead(nil, it.cost, scriptClock{Fixed: true, At: now})
					for _, a := range it.rules {
						args = a.appendTo(args, scriptClock{Fixed: true, At: now})
					}
					ints, err := c.Eval(ctx, cur.Source, keys, args...).Int64Slice()
					if err != nil {
						t.Fatalf("%s: a separate call: %v", label, err)
					}
					sep = append(sep, ints...)
				}
				if !slices.Equal(sep, want) {
					t.Fatalf("%s: separate calls reply\n %v\nthe batch\n %v", label, sep, want)
				}
				if s, w := renderKeys(t, c, ns.one), renderKeys(t, c, ns.ref); s != w {
					t.Fatalf("%s: keys of separate calls\n%s\nof the batch\n%s", label, s, w)
				}
			}
		})
	}
	t.Logf("the batch's loop admitted %d, denied %d and failed %d descriptors", admitted, denied, failed)
	if admitted < 25 || denied < 25 || failed < 5 {
		t.Errorf("the batch's loop admitted %d, denied %d and failed %d descriptors: the cases do not exercise it", admitted, denied, failed)
	}
}

// TestBatchCommandFailsAfterCountsTaken: a command that fails after a
// descriptor's counts were taken (a Redis user that may not run the
// command that sets a new key's expiry, or the DEL or DECRBY that puts a
// denied count back) fails that descriptor alone, with Redis's error, as
// it does when decide_item decides it (under pcall): what its commands
// wrote before the failure stays, and the other descriptors of the batch
// are decided all the same. Held byte for byte, replies and keys, to a
// variant of the script whose batch loop leaves every descriptor to
// decide_item, for descriptors of one, two and three fixed windows.
func TestBatchCommandFailsAfterCountsTaken(t *testing.T) {
	srv := redistest.Standalone(t)
	admin := srv.Client()
	ctx := context.Background()
	cur := scripts.DecideScript()
	ref := edit(t, variant(t, "elseif WINDOWS and nks == '1' and (nas == '12' or nas == '17')",
		"elseif false and nks == '1' and (nas == '12' or nas == '17')"),
		"if WINDOWS and nks == '1' and nas == '7'", "if false and nks == '1' and nas == '7'")
	prep := func(rules ...limit.Rule) []*ruleArgs { return prepareRules(t, rules...) }
	w1 := prep(limit.Rule{Unit: limit.Minute, Limit: 2})
	w2 := prep(limit.Rule{Unit: limit.Second, Limit: 1}, limit.Rule{Unit: limit.Minute, Limit: 2})
	w3 := prep(limit.Rule{Unit: limit.Second, Limit: 1}, limit.Rule{Unit: limit.Minute, Limit: 2}, limit.Rule{Unit: limit.Hour, Limit: 9})
	one := limit.Cost{N: 1}
	// The same descriptors in each case: made by the first batch (b's
	// and c's minute filled by a descriptor of one rule of the same id),
	// sent by a user who may run every command; the second batch, a second
	// later (new seconds' windows, made by calls the minute denies), sent by
	// a user who may not run the case's command.
	first := []takeItem{{"a", w1, one, false}, {"b", w2, one, true}, {"b", w1, one, false}, {"c", w3, one, true}, {"c", w1, one, false}}
	second := []takeItem{
		{"a", w1, one, false}, {"a", w1, one, false}, {"b", w2, one, true}, {"b", w2, one, true},
		{"c", w3, one, true}, {"c", w3, one, true}, {"new1", w1, one, false}, {"new3", w3, one, true},
	}
	for i, cmd := range []string{"pexpire", "del", "decrby"} {
		t.Run(cmd, func(t *testing.T) {
			user := "no-" + cmd
			if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "-"+cmd).Err(); err != nil {
				t.Fatal(err)
			}
			limited := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: user, Password: "pw"})
			t.Cleanup(func() { _ = limited.Close() })
			now := limit.Micros(1_800_000_000_300_000) - limit.Micros(i)*3_600_000_000
			var replies [2][]int64
			for j, s := range []scripts.Script{cur, ref} {
				ns := fmt.Sprintf("%s %d:", cmd, j)
				for b, c := range []*goredis.Client{admin, limited} {
					at := now + limit.Micros(b)*1_000_000
					items := [][]takeItem{first, second}[b]
					keys, args := takeBatch(t, ns, at, items)
					ints, err := c.Eval(ctx, s.Source, keys, args...).Int64Slice()
					if err != nil {
						t.Fatalf("batch %d, %s: %v", b, ns, err)
					}
					replies[j] = ints
				}
			}
			if !slices.Equal(replies[0], replies[1]) {
				t.Fatalf("the batch replies\n %v\ndecide_item decides\n %v", replies[0], replies[1])
			}
			if a, b := renderKeys(t, admin, cmd+" 0:"), renderKeys(t, admin, cmd+" 1:"); a != b {
				t.Fatalf("keys of the batch\n%s\ndecide_item's\n%s", a, b)
			}
			// Some descriptors failed, naming the command; others did not.
			rest, failed := replies[0], 0
			for k, it := range second {
				_, next, err := parseBatchInts(rest, make([]limit.Outcome, len(it.rules)))
				rest = next
				if err != nil {
					if !strings.Contains(err.Error(), "can't run this command") {
						t.Fatalf("descriptor %d: %v, want Redis's refusal of %s", k, err, cmd)
					}
					failed++
				}
			}
			if failed == 0 || failed == len(second) {
				t.Fatalf("%d of %d descriptors failed, want some", failed, len(second))
			}
		})
	}
}
