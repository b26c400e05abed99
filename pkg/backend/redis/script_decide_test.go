package redis

import (
	"context"
	"fmt"
	"math"
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

// harness runs decide.lua on a real Redis with a fixed (test) clock and
// keeps, beside it, the states pkg/limit's Decide works on, so every step
// can be compared.
type harness struct {
	t       *testing.T
	ctx     context.Context
	c       *goredis.Client
	counter string // the descriptor's counter key, KEYS[1]
	rules   []limit.Rule
	keys    []string       // KEYS: the counter key, then one per sliding log
	logKey  []string       // each rule's sliding log key, "" for others
	states  []*limit.State // shared by rules with the same ID, as in a store
	fcall   string         // when set, run calls this function of the loaded library instead of EVALSHA
}

func newHarness(t *testing.T, c *goredis.Client, name string, rules []limit.Rule) *harness {
	h := &harness{t: t, ctx: context.Background(), c: c, counter: "d:{" + name + "}", rules: rules}
	h.keys = append(h.keys, h.counter)
	byID := map[string]*limit.State{}
	for _, r := range rules {
		id := r.ID()
		if byID[id] == nil {
			byID[id] = &limit.State{}
		}
		key := ""
		if ownsKey(r) {
			key = h.counter + ":" + id
			h.keys = append(h.keys, key)
		}
		h.logKey = append(h.logKey, key)
		h.states = append(h.states, byID[id])
	}
	return h
}

// run decides cost at now on both sides and fails on any difference.
func (h *harness) run(step string, now limit.Micros, cost limit.Cost) limit.Decision {
	h.t.Helper()
	args, err := appendDecideArgs(nil, h.rules, cost, scriptClock{Fixed: true, At: now})
	if err != nil {
		h.t.Fatalf("%s: args: %v", step, err)
	}
	var reply any
	if h.fcall != "" {
		reply, err = h.c.FCall(h.ctx, h.fcall, h.keys, args...).Result()
	} else {
		reply, err = h.c.EvalSha(h.ctx, scripts.DecideScript().SHA1, h.keys, args...).Result()
	}
	if err != nil && h.fcall == "" && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		reply, err = h.c.Eval(h.ctx, scripts.DecideScript().Source, h.keys, args...).Result()
	}
	if err != nil {
		h.t.Fatalf("%s: eval: %v", step, err)
	}
	got, err := parseDecideReply(reply, len(h.rules))
	if err != nil {
		h.t.Fatalf("%s: %v", step, err)
	}
	want := limit.Decide(h.rules, h.states, now, cost)
	if got.Allowed != want.Allowed || got.Binding != want.Binding || !slices.Equal(got.Outcomes, want.Outcomes) {
		var dump []string
		for _, k := range h.keys[1:] {
			z, _ := h.c.ZRangeWithScores(h.ctx, k, 0, -1).Result()
			dump = append(dump, fmt.Sprint(z))
		}
		h.t.Fatalf("%s: now=%d cost=%+v rules=%v\n lua: %+v\n go:  %+v\n go states %+v\n redis logs %v", step, now, cost, h.rules, got, want, h.states[len(h.states)-1].Log, dump)
	}
	h.compareState(step, now, (want.Allowed || cost.Charge) && cost.N > 0)
	return got
}

// compareState checks that what Redis stores is what pkg/limit holds: each
// sliding log's live entries, and each counter's record in the counter key,
// present exactly when the state's Expires has not passed, with e =
// Expires. After a write (wrote), it also checks that every key expires at
// the latest expiry it holds (plus the test slack).
func (h *harness) compareState(step string, now limit.Micros, wrote bool) {
	h.t.Helper()
	records := h.records(step)
	var latest limit.Micros // of the live counter records
	seen := map[string]bool{}
	for i, r := range h.rules {
		id, s := r.ID(), h.states[i]
		if seen[id] || r.PeriodMicros() <= 0 {
			continue
		}
		seen[id] = true
		if !ownsKey(r) {
			f, ok := records[id]
			delete(records, id)
			if s.Expires <= now {
				if ok && f[0] != "" {
					if e, _ := strconv.ParseInt(f[0], 10, 64); e*1000 > now {
						h.t.Fatalf("%s: record %s %q live, but its state expired (Expires %d)", step, id, f, s.Expires)
					}
				}
				continue
			}
			if !ok {
				h.t.Fatalf("%s: no record for %s, Expires %d", step, id, s.Expires)
			}
			latest = max(latest, s.Expires)
			if e := strconv.FormatInt(s.Expires/1000, 10); f[0] != e {
				h.t.Fatalf("%s: record %s %q has e %s, want %s (Expires %d)", step, id, f, f[0], e, s.Expires)
			}
			h.compareCounter(step, r, s, f[1:])
			continue
		}
		key := h.logKey[i]
		var live []limit.LogEntry
		for _, e := range s.Log {
			if e.At+r.PeriodMicros() > now {
				live = append(live, e)
			}
		}
		if len(live) == 0 {
			if n, err := h.c.ZCard(h.ctx, key).Result(); err != nil || n != 0 {
				h.t.Fatalf("%s: %s holds %d entries (%v), but its state is empty", step, key, n, err)
			}
			continue
		}
		if wrote {
			h.checkTTL(step, key, live[len(live)-1].At+r.PeriodMicros(), now)
		}
		scores, err := h.c.ZRangeWithScores(h.ctx, key, 0, -1).Result()
		if err != nil {
			h.t.Fatal(err)
		}
		var got []limit.LogEntry
		for _, z := range scores {
			m, _ := z.Member.(string)
			sum, n, _ := strings.Cut(m, ":")
			e := limit.LogEntry{At: limit.Micros(z.Score)}
			e.Sum, _ = strconv.ParseFloat(sum, 64)
			e.N, _ = strconv.ParseUint(n, 10, 64)
			got = append(got, e)
		}
		if !slices.Equal(got, live) {
			h.t.Fatalf("%s: %s log %v, go %v", step, key, got, live)
		}
	}
	if len(records) > 0 {
		h.t.Fatalf("%s: records of no rule stored: %q", step, records)
	}
	if !wrote {
		return
	}
	if latest == 0 {
		if n := h.exists(h.counter); n != 0 {
			h.t.Fatalf("%s: %s exists, but every counter is empty", step, h.counter)
		}
		return
	}
	h.checkTTL(step, h.counter, latest, now)
}

// compareCounter checks a counter record's fields against pkg/limit's state.
func (h *harness) compareCounter(step string, r limit.Rule, s *limit.State, f []string) {
	h.t.Helper()
	if r.Algorithm.IsMeter() {
		if len(f) != 2 {
			h.t.Fatalf("%s: %s stores %q, want 2 fields", step, r.ID(), f)
		}
		l, _ := strconv.ParseFloat(f[0], 64)
		at, _ := strconv.ParseInt(f[1], 10, 64)
		if math.Float64bits(l) != math.Float64bits(s.Level) || at != s.At {
			h.t.Fatalf("%s: %s stores %q, go Level %v At %d", step, r.ID(), f, s.Level, s.At)
		}
		return
	}
	want := []string{strconv.FormatInt(s.Window, 10), strconv.FormatUint(s.Count, 10)}
	if r.Algorithm == limit.SlidingWindow {
		want = append(want, strconv.FormatUint(s.Prev, 10))
	}
	if !slices.Equal(f, want) {
		h.t.Fatalf("%s: %s stores %q, go %q", step, r.ID(), f, want)
	}
}

// records reads the counter key: rule id -> the record's other fields (e,
// then the state's). An absent key has no records.
func (h *harness) records(step string) map[string][]string {
	h.t.Helper()
	v, err := h.c.Get(h.ctx, h.counter).Result()
	if err == goredis.Nil {
		return map[string][]string{}
	}
	if err != nil {
		h.t.Fatalf("%s: GET %s: %v", step, h.counter, err)
	}
	m := map[string][]string{}
	for _, rec := range strings.Split(v, "|") {
		f := strings.Split(rec, " ")
		if len(f) < 4 || m[f[0]] != nil {
			h.t.Fatalf("%s: %s stores %q: bad or repeated record %q", step, h.counter, v, rec)
		}
		m[f[0]] = f[1:]
	}
	return m
}

func (h *harness) exists(key string) int64 {
	h.t.Helper()
	n, err := h.c.Exists(h.ctx, key).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// checkTTL checks that key exists and expires at exp (us), rounded up to
// the ms, plus the test slack.
func (h *harness) checkTTL(step, key string, exp, now limit.Micros) {
	h.t.Helper()
	pttl, err := h.c.PTTL(h.ctx, key).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	maxTTL := time.Duration((exp-now+999)/1000)*time.Millisecond + 600*time.Second
	if pttl <= 0 || pttl > maxTTL || pttl < maxTTL-30*time.Second {
		h.t.Fatalf("%s: %s PTTL %v, want about %v (Expiry %d, now %d)", step, key, pttl, maxTTL, exp, now)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone %s: %v", name, err)
	}
	return loc
}

// base instants: an ordinary one, and the hour before New York and Lord
// Howe switch to summer time, so calendar windows cross DST.
var bases = []limit.Micros{
	time.Date(2026, 11, 22, 3, 4, 5, 678901000, time.UTC).UnixMicro(),
	time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC).UnixMicro(),   // New York: 07:00Z
	time.Date(2026, 10, 3, 15, 0, 0, 0, time.UTC).UnixMicro(), // Lord Howe: 15:30Z, +30 min
}

// scenarioRules draws one to three rules with rule and, one time in ten,
// a further one sharing the first one's state (shareFirstState).
func scenarioRules(rng *rand.Rand, zones []*time.Location, rule func(*rand.Rand, []*time.Location) limit.Rule) []limit.Rule {
	rules := make([]limit.Rule, 1+rng.IntN(3))
	for i := range rules {
		rules[i] = rule(rng, zones)
	}
	if rng.IntN(10) == 0 {
		rules = shareFirstState(rules)
	}
	return rules
}

// shareFirstState appends a rule sharing the first rule's state (its id)
// under another limit, as two rules of one id in a config do.
func shareFirstState(rules []limit.Rule) []limit.Rule {
	rules = append(rules, rules[0])
	rules[len(rules)-1].Limit = min(rules[0].Limit+1, maxExact-1)
	return rules
}

func randomRule(rng *rand.Rand, zones []*time.Location) limit.Rule {
	r := limit.Rule{
		Algorithm:  limit.Algorithm(rng.IntN(6)),
		Unit:       []limit.Unit{limit.Second, limit.Second, limit.Minute, limit.Hour, limit.Day}[rng.IntN(5)],
		Multiplier: uint32(rng.IntN(4)),
		Limit:      uint64(rng.IntN(8)),
	}
	switch rng.IntN(12) {
	case 0:
		r.Limit = 0
	case 1:
		r.Limit = 1000
	case 2:
		if r.Algorithm != limit.SlidingLog {
			r.Limit = 1 << 40
		}
	case 3:
		if r.Algorithm != limit.SlidingLog {
			r.Limit = maxExact - 1
		}
	}
	if r.Algorithm.IsMeter() && rng.IntN(2) == 0 {
		r.Burst = uint64(rng.IntN(12))
	}
	if r.Algorithm == limit.FixedWindow && rng.IntN(2) == 0 {
		r.Location = zones[rng.IntN(len(zones))]
		r.Unit = []limit.Unit{limit.Second, limit.Minute, limit.Hour, limit.Day, limit.Week, limit.Month, limit.Year}[rng.IntN(7)]
	}
	if rng.IntN(40) == 0 {
		r.Unit = limit.UnitUnknown
	}
	return r
}

func randomCost(rng *rand.Rand, rules []limit.Rule) limit.Cost {
	c := limit.Cost{}
	switch rng.IntN(20) {
	case 0:
		c.N = 0
	case 1:
		c.N = math.MaxUint64
	case 2:
		c.N = maxExact + 1
	case 3, 4:
		c.N = uint64(rng.IntN(12))
	case 5:
		// the limit of one rule, exactly, or one more
		r := rules[rng.IntN(len(rules))]
		c.N = min(r.Capacity(), 60) + uint64(rng.IntN(2))
	default:
		c.N = 1
	}
	c.Refund = rng.IntN(10) == 0
	c.Charge = !c.Refund && rng.IntN(4) == 0
	return c
}

// TestDecideMatchesLimit runs random rule sets through random sequences of
// requests, on decide.lua and on limit.Decide, and requires the same
// Decision at every step and the same stored state after every write.
// Time jumps often land exactly on a reported reset, one µs before it, and
// on window edges, where float rounding would show first.
func TestDecideMatchesLimit(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	zones := []*time.Location{time.UTC, mustZone(t, "America/New_York"), mustZone(t, "Asia/Shanghai"), mustZone(t, "Australia/Lord_Howe")}
	scenarios, steps := 400, 60
	if testing.Short() {
		scenarios = 60
	}
	// seen counts outcomes per algorithm (and calendar fixed windows as
	// "calendar"), to prove the scenarios reach both answers everywhere.
	seen := map[string][2]int{}
	for sc := range scenarios {
		rng := rand.New(rand.NewPCG(uint64(sc), 0x511ce))
		rules := scenarioRules(rng, zones, randomRule)
		h := newHarness(t, c, fmt.Sprintf("sc%d", sc), rules)
		now := bases[rng.IntN(len(bases))] + rng.Int64N(1_000_000)
		var last limit.Decision
		for step := range steps {
			switch rng.IntN(8) {
			case 0: // same instant
			case 1:
				now++
			case 2, 3: // when the last answer said to come back, or 1µs early
				// Instants stay below 2^52 (year 2112): a charged bucket
				// can report a wait until 2^53, where instants end.
				if b := last.BindingOutcome(); b.Reset > 0 && now+b.Reset.Microseconds() < 1<<52 {
					now += b.Reset.Microseconds() - rng.Int64N(2)
				} else {
					now += rng.Int64N(1000)
				}
			case 4: // the next edge of a rule's epoch window
				r := rules[rng.IntN(len(rules))]
				if p := r.PeriodMicros(); p > 0 {
					now += p - now%p - rng.Int64N(2)
				}
			case 5: // far ahead
				r := rules[rng.IntN(len(rules))]
				now += rng.Int64N(3*max(r.PeriodMicros(), 1) + 1)
			default:
				now += rng.Int64N(400_000)
			}
			last = h.run(fmt.Sprintf("scenario %d step %d", sc, step), now, randomCost(rng, rules))
			for i, o := range last.Outcomes {
				name := rules[i].Algorithm.String()
				if rules[i].Location != nil {
					name = "calendar"
				}
				n := seen[name]
				if o.Allowed {
					n[0]++
				} else {
					n[1]++
				}
				seen[name] = n
			}
		}
	}
	for _, name := range []string{"fixed_window", "calendar", "sliding_log", "sliding_window", "token_bucket", "leaky_bucket", "gcra"} {
		if n := seen[name]; n[0] < 20 || n[1] < 20 {
			t.Errorf("%s: %d admitted and %d denied outcomes; the scenarios do not exercise it", name, n[0], n[1])
		}
	}
	t.Logf("outcomes (admitted, denied) per algorithm: %v", seen)
}

// TestDecideEdges pins cases where a different order of float operations,
// or a different rounding, would change the answer, and checks them against
// both limit.Decide and hand-computed values.
func TestDecideEdges(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	sec := limit.Micros(1_000_000)
	t0 := 1_800_000_000 * sec // a window edge for every epoch-aligned unit up to an hour
	type step struct {
		at            limit.Micros
		cost          limit.Cost
		allowed       bool
		remaining     uint64
		resetMicros   int64
		checkOutcome0 bool
		setLimit      uint64 // when not 0, rule 0's limit from this step on
	}
	tests := []struct {
		name  string
		rules []limit.Rule
		steps []step
	}{
		{
			// prev=25, p-e = 280000: prev·(p-e)/p is exactly 7; computed as
			// prev·((p-e)/p) it would be 7.000000000000001 and floor(25-est)
			// would say 17.
			name:  "sliding window estimate is exact at 7",
			rules: []limit.Rule{{Algorithm: limit.SlidingWindow, Unit: limit.Second, Limit: 25}},
			steps: []step{
				{at: t0, cost: limit.Cost{N: 25}, allowed: true, remaining: 0, resetMicros: 2 * sec, checkOutcome0: true},
				{at: t0 + sec + 720_000, cost: limit.Cost{}, allowed: true, remaining: 18, resetMicros: 280_000, checkOutcome0: true},
			},
		},
		{
			// The same estimate of exactly 7 after the limit is lowered to 7
			// (usage is kept): a peek is admitted with 0 remaining; at
			// 7.000000000000001 it would be denied.
			name:  "sliding window peek at an estimate equal to a lowered limit",
			rules: []limit.Rule{{Algorithm: limit.SlidingWindow, Unit: limit.Second, Limit: 25}},
			steps: []step{
				{at: t0, cost: limit.Cost{N: 25}, allowed: true, remaining: 0, resetMicros: 2 * sec, checkOutcome0: true},
				{at: t0 + sec + 720_000, cost: limit.Cost{}, allowed: true, remaining: 0, resetMicros: 280_000, checkOutcome0: true, setLimit: 7},
				{at: t0 + sec + 720_000, cost: limit.Cost{N: 1}, allowed: false, checkOutcome0: false},
			},
		},
		{
			name:  "sliding window estimate is exact at 29",
			rules: []limit.Rule{{Algorithm: limit.SlidingWindow, Unit: limit.Second, Limit: 50}},
			steps: []step{
				{at: t0, cost: limit.Cost{N: 50}, allowed: true, remaining: 0, resetMicros: 2 * sec, checkOutcome0: true},
				{at: t0 + sec + 420_000, cost: limit.Cost{}, allowed: true, remaining: 21, resetMicros: 580_000, checkOutcome0: true},
			},
		},
		{
			// 3 per second drains 1 every 333333.33µs: the reset is ceiled,
			// and waiting exactly that long admits.
			name:  "meter reset is ceiled and exact",
			rules: []limit.Rule{{Algorithm: limit.GCRA, Unit: limit.Second, Limit: 3, Burst: 1}},
			steps: []step{
				{at: t0, cost: limit.Cost{N: 1}, allowed: true, remaining: 0, resetMicros: 333_334, checkOutcome0: true},
				{at: t0 + 1, cost: limit.Cost{N: 1}, allowed: false, remaining: 0, resetMicros: 333_333, checkOutcome0: true},
				{at: t0 + 333_333, cost: limit.Cost{N: 1}, allowed: false, checkOutcome0: false},
				{at: t0 + 333_334, cost: limit.Cost{N: 1}, allowed: true, checkOutcome0: false},
			},
		},
		{
			name:  "a cost above 2^53 is denied, and refunds everything",
			rules: []limit.Rule{{Unit: limit.Minute, Limit: 10}, {Algorithm: limit.TokenBucket, Unit: limit.Minute, Limit: 10}},
			steps: []step{
				{at: t0, cost: limit.Cost{N: 4}, allowed: true},
				{at: t0 + 1, cost: limit.Cost{N: math.MaxUint64}, allowed: false},
				{at: t0 + 2, cost: limit.Cost{N: math.MaxUint64, Refund: true}, allowed: true, remaining: 10, checkOutcome0: false},
			},
		},
		{
			name:  "all or nothing: the burst rule denies, the daily rule keeps its count",
			rules: []limit.Rule{{Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 1, Burst: 2}, {Unit: limit.Day, Limit: 100}},
			steps: []step{
				{at: t0, cost: limit.Cost{N: 2}, allowed: true},
				{at: t0 + 1, cost: limit.Cost{N: 1}, allowed: false},
				{at: t0 + 2, cost: limit.Cost{}, allowed: true},
			},
		},
		{
			name:  "a rule with an unknown unit admits only peeks and refunds",
			rules: []limit.Rule{{Unit: limit.UnitUnknown, Limit: 5}},
			steps: []step{
				{at: t0, cost: limit.Cost{N: 1}, allowed: false, checkOutcome0: true},
				{at: t0, cost: limit.Cost{}, allowed: true, checkOutcome0: true},
				{at: t0, cost: limit.Cost{N: 3, Refund: true}, allowed: true, checkOutcome0: true},
			},
		},
		{
			name:  "no rules",
			rules: nil,
			steps: []step{{at: t0, cost: limit.Cost{N: 1}, allowed: true}},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, c, fmt.Sprintf("edge%d", i), tt.rules)
			for j, s := range tt.steps {
				if s.setLimit != 0 {
					h.rules[0].Limit = s.setLimit
				}
				d := h.run(fmt.Sprintf("step %d", j), s.at, s.cost)
				if d.Allowed != s.allowed {
					t.Fatalf("step %d: allowed %v, want %v", j, d.Allowed, s.allowed)
				}
				if s.checkOutcome0 {
					o := d.Outcomes[0]
					if o.Remaining != s.remaining || o.Reset != time.Duration(s.resetMicros)*time.Microsecond {
						t.Fatalf("step %d: outcome %+v, want remaining %d reset %dµs", j, o, s.remaining, s.resetMicros)
					}
				}
			}
		})
	}
}

// TestDecideCalendarSkew checks that the script picks the calendar window
// holding Redis's now among the segments computed around a skewed
// instance clock, and refuses (writing nothing) when none holds it.
func TestDecideCalendarSkew(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	sh := mustZone(t, "Asia/Shanghai")
	rules := []limit.Rule{
		{Unit: limit.Day, Limit: 3, Location: sh},
		{Unit: limit.Minute, Multiplier: 5, Limit: 3, Location: sh},
	}
	// 23:59:50 in Shanghai: the instance clock is 30s ahead, in the next day.
	redisNow := time.Date(2026, 5, 1, 23, 59, 50, 0, sh).UnixMicro()
	tests := []struct {
		name    string
		skew    time.Duration
		wantErr bool
	}{
		{"instance ahead by 30s", 30 * time.Second, false},
		{"instance behind by 30s", -30 * time.Second, false},
		{"instance ahead by 2 days", 48 * time.Hour, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := []string{fmt.Sprintf("k:{cal%d}", i)} // the counter key: no sliding log
			local := redisNow + tt.skew.Microseconds()
			args, err := appendDecideArgs(nil, rules, limit.Cost{N: 1}, scriptClock{At: local})
			if err != nil {
				t.Fatal(err)
			}
			args[0] = strconv.FormatInt(redisNow, 10) // Redis's clock, as TIME would give it
			reply, err := c.Eval(ctx, scripts.DecideScript().Source, keys, args...).Result()
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "outside the calendar windows") {
					t.Fatalf("reply %v, err %v; want the calendar skew error", reply, err)
				}
				if n := c.Exists(ctx, keys...).Val(); n != 0 {
					t.Fatalf("%d keys written despite the error", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseDecideReply(reply, len(rules))
			if err != nil {
				t.Fatal(err)
			}
			want := limit.Decide(rules, []*limit.State{{}, {}}, redisNow, limit.Cost{N: 1})
			if !slices.Equal(got.Outcomes, want.Outcomes) {
				t.Fatalf("outcomes %+v, want %+v (Redis's window, not the instance's)", got.Outcomes, want.Outcomes)
			}
			if got.Outcomes[0].Reset != 10*time.Second {
				t.Fatalf("day rule resets in %v, want 10s (Shanghai midnight)", got.Outcomes[0].Reset)
			}
		})
	}
}

// TestDecideForeignCounterReadsEmpty: a counter key holding anything but
// counter records -- a hash written by sluice before decision 0012, a string
// that does not parse, a list, a record whose numbers are nan or inf (which
// Lua's tonumber would take, and which would deny until the key expires) --
// decides like an empty state and is overwritten by the first admitted
// call, instead of failing every call on that descriptor until the key
// expires.
func TestDecideForeignCounterReadsEmpty(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000)
	rules := map[string]limit.Rule{
		"fixed_window":   {Unit: limit.Minute, Limit: 5},
		"sliding_window": {Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 5},
		"token_bucket":   {Algorithm: limit.TokenBucket, Unit: limit.Minute, Limit: 5},
	}
	record := func(fields string) func(key, id string) error {
		return func(key, id string) error {
			e := now/1000 + 60_000 // a minute after now: the record still counts
			return c.Set(ctx, key, fmt.Sprintf("%s %d %s", id, e, fields), 0).Err()
		}
	}
	window := fmt.Sprint(now - now%60_000_000) // the minute holding now
	plant := map[string]func(key, id string) error{
		"old hash": func(key, _ string) error {
			return c.HSet(ctx, key, "w", int64(now), "c", 4, "l", 4, "t", int64(now)).Err()
		},
		"garbage string": func(key, _ string) error { return c.Set(ctx, key, "4 x", 0).Err() },
		"list":           func(key, _ string) error { return c.RPush(ctx, key, "4").Err() },
		"nan record":     record(window + " nan nan"),
		"inf record":     record("inf " + fmt.Sprint(now)),
		"-inf record":    record(window + " -inf 0"),
	}
	for alg, r := range rules {
		for what, put := range plant {
			t.Run(alg+"/"+what, func(t *testing.T) {
				h := newHarness(t, c, "foreign-"+alg+"-"+strings.ReplaceAll(what, " ", "-"), []limit.Rule{r})
				if err := put(h.keys[0], r.ID()); err != nil {
					t.Fatal(err)
				}
				// run compares with pkg/limit from an empty state, and the
				// stored counter afterwards.
				d := h.run("first call", now, limit.Cost{N: 1})
				if !d.Allowed || d.Outcomes[0].Remaining != 4 {
					t.Fatalf("first call on a foreign key: %+v, want admitted with 4 left", d)
				}
			})
		}
	}
}

// TestDecideKeepsOtherRecords: the counter key holds the records of rules
// a call does not name (a request overriding a limit with another unit, an
// older configuration's rules) until each record's e passes, and lives as
// long as its latest record.
func TestDecideKeepsOtherRecords(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	key := "o:{keep}"
	// A calendar-aligned minute: an epoch-aligned one keeps its count in
	// a window key (CONTRACT.md, "Window keys"), not in a record.
	minute := []limit.Rule{{Unit: limit.Minute, Limit: 5, Location: time.UTC}}
	hour := []limit.Rule{{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 100}}
	now := limit.Micros(1_800_000_000_000_000) // a minute boundary
	decide := func(rules []limit.Rule, at limit.Micros) limit.Decision {
		t.Helper()
		return windowCall(t, c, key, rules, at, limit.Cost{N: 1})
	}
	ids := func() []string {
		t.Helper()
		v, err := c.Get(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, rec := range strings.Split(v, "|") {
			out = append(out, strings.SplitN(rec, " ", 2)[0])
		}
		return out
	}
	pttl := func() time.Duration {
		t.Helper()
		return c.PTTL(ctx, key).Val() - 600*time.Second // the test slack
	}

	for i := range 3 {
		decide(minute, now+limit.Micros(i))
	}
	if d := decide(hour, now+10); !d.Allowed || d.Outcomes[0].Remaining != 99 {
		t.Fatalf("hour rule after minute calls: %+v", d)
	}
	if got := ids(); !slices.Equal(got, []string{hour[0].ID(), minute[0].ID()}) {
		t.Fatalf("records %q, want the hour's then the kept minute's", got)
	}
	if got := pttl(); got < 59*time.Second || got > 61*time.Second {
		t.Fatalf("PTTL %v over the slack, want the kept minute record's ~60 s (the latest record)", got)
	}
	// The minute rule still counts what it counted: 3 before, this is the 4th.
	if d := decide(minute, now+20); d.Outcomes[0].Remaining != 1 {
		t.Fatalf("minute rule after the hour's write: %+v, want 1 left (its record kept)", d)
	}
	// Past the minute window's end, the hour's write drops the minute's
	// record, and the key lives as long as the hour's: ~36 s to refill the
	// token it takes (the one taken a minute before has refilled).
	later := now + 61_000_000
	decide(hour, later)
	if got := ids(); !slices.Equal(got, []string{hour[0].ID()}) {
		t.Fatalf("records %q after the minute record's e passed, want only the hour's", got)
	}
	if got := pttl(); got < 35*time.Second || got > 37*time.Second {
		t.Fatalf("PTTL %v over the slack, want the meter's ~36 s", got)
	}
}

// TestPrepareRuleRejectsSeparators: a rule id names its record in the
// counter key, so an id holding a record or field separator is refused
// rather than corrupting the records next to it.
func TestPrepareRuleRejectsSeparators(t *testing.T) {
	for _, name := range []string{"Mars/Olympus Mons", "a|b"} {
		r := limit.Rule{Unit: limit.Day, Limit: 1, Location: time.FixedZone(name, 3600)}
		if _, err := prepareRule(r); err == nil || !strings.Contains(err.Error(), "space or '|'") {
			t.Errorf("zone %q: err %v, want the separator error", name, err)
		}
	}
}

// TestDecideRecordsSplitAtBars: the counter value's records are the runs
// between '|'s, each read whole or not at all, whatever junk surrounds
// them: a record of the call's rule counts, a parsable record of another
// id is kept verbatim and in order, anything else is dropped, and no record
// runs into its neighbour (the script matches each in place, which must
// read exactly what cutting the value at every '|' reads).
func TestDecideRecordsSplitAtBars(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	now := limit.Micros(1_800_000_000_000_000) // a minute boundary
	rules := []limit.Rule{{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 5}}
	e := fmt.Sprint(now/1000 + 120_000) // the record's e: the next minute's end, in ms
	w := fmt.Sprint(now)                // the minute's start
	mine := func(count string) string { return "sw.1mi " + e + " " + w + " " + count }
	other := "sw.1ho " + e + " 0 1 0" // another id's record, still counting
	meter := "tb.1ho " + e + " 1.5e3 " + w
	for _, tc := range []struct {
		name   string
		value  string
		count  int      // what the call's rule counted before the call
		others []string // kept records, in order
	}{
		{"one record", mine("3 0"), 3, nil},
		{"junk before", "junk|" + mine("3 0"), 3, nil},
		{"id glued to junk", "a|" + mine("3 0"), 3, nil},
		{"trailing and empty runs", "||" + mine("3 0") + "||" + other + "|", 3, []string{other}},
		{"others around", meter + "|" + mine("2 0") + "|" + other, 2, []string{meter, other}},
		{"no previous count", mine("3"), 3, nil},
		{"a sixth field", mine("3 0 5"), 0, nil},
		{"a letter after", mine("3 0x") + "|" + other, 0, []string{other}},
		{"two spaces", "sw.1mi " + e + " " + w + "  3 0", 0, nil},
		{"a tab in the id", "sw.1mi\t" + e + " " + w + " 3 0", 0, nil},
		{"an id and a record in one run", "x " + mine("3 0") + "|" + mine("2 0"), 2, nil},
		{"the same id twice", mine("3 0") + "|" + mine("2 0"), 2, nil},
		{"trailing space", "sw.1ho " + e + " 0 1 |" + mine("3 "), 3, []string{"sw.1ho " + e + " 0 1 "}},
		{"a bar inside a record", "sw.1mi " + e + " " + w + "|3 0", 0, nil},
		{"nan", mine("nan 0") + "|" + other, 0, []string{other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "s:{" + strings.ReplaceAll(tc.name, " ", "-") + "}"
			if err := c.Set(ctx, key, tc.value, 0).Err(); err != nil {
				t.Fatal(err)
			}
			args, err := appendDecideArgs(nil, rules, limit.Cost{N: 1}, scriptClock{Fixed: true, At: now})
			if err != nil {
				t.Fatal(err)
			}
			reply, err := c.Eval(ctx, scripts.DecideScript().Source, []string{key}, args...).Result()
			if err != nil {
				t.Fatal(err)
			}
			d, err := parseDecideReply(reply, 1)
			if err != nil {
				t.Fatal(err)
			}
			if want := uint64(5 - tc.count - 1); !d.Allowed || d.Outcomes[0].Remaining != want {
				t.Fatalf("%q: %+v, want admitted with %d left", tc.value, d, want)
			}
			want := strings.Join(append([]string{mine(fmt.Sprint(tc.count+1) + " 0")}, tc.others...), "|")
			if got := c.Get(ctx, key).Val(); got != want {
				t.Fatalf("%q: value after the call %q, want %q", tc.value, got, want)
			}
		})
	}
}
