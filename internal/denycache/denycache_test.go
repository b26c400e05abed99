package denycache

import (
	"context"
	"flag"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/backendtest"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// The contract suite proves the wrapper changes no answer: every Decision
// is compared, field by field, with pkg/limit's model.
func TestContract(t *testing.T) {
	var mu sync.Mutex
	var made []*Backend
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Backend {
		b := New(memory.New(memory.Options{Now: now, SweepInterval: -1}), Options{Clock: elapsed(now), Size: 64})
		mu.Lock()
		made = append(made, b)
		mu.Unlock()
		return b
	})
	var hits uint64
	for _, b := range made {
		hits += b.Stats().Hits
	}
	if hits == 0 {
		t.Error("the suite ran without a single cache hit: it proved nothing about cached answers")
	}
	t.Logf("cache hits during the contract suite: %d", hits)
}

// counting passes everything to a real backend and counts the checks that
// reach it.
type counting struct {
	backend.Backend
	checks atomic.Int64
}

func (c *counting) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	c.checks.Add(int64(len(checks)))
	return c.Backend.Decide(ctx, checks)
}

// start is 20 s into a minute.
var start = time.Date(2030, 5, 1, 12, 0, 20, 0, time.UTC)

type fixture struct {
	t     *testing.T
	clock *testenv.Clock
	inner *counting
	b     *Backend
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	c := testenv.NewClock(start)
	inner := &counting{Backend: memory.New(memory.Options{Now: c.Now, SweepInterval: -1})}
	opts.Clock = elapsed(c.Now)
	if opts.MaxAge == 0 {
		opts.MaxAge = -1 // the scenarios test the laws; TestMaxAge tests the bound
	}
	f := &fixture{t: t, clock: c, inner: inner, b: New(inner, opts)}
	t.Cleanup(func() { f.b.Close() })
	return f
}

// do decides one check and reports the decision and whether the inner
// backend saw it.
func (f *fixture) do(id string, rules []limit.Rule, n uint64, refund bool) (limit.Decision, bool) {
	f.t.Helper()
	before := f.inner.checks.Load()
	res := f.b.Decide(context.Background(), []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: n, Refund: refund}}})
	if len(res) != 1 || res[0].Err != nil {
		f.t.Fatalf("Decide: %+v", res)
	}
	return res[0].Decision, f.inner.checks.Load() == before
}

var (
	fixed3  = []limit.Rule{{Name: "fixed", Unit: limit.Minute, Limit: 3}}
	bucket3 = []limit.Rule{{Name: "bucket", Algorithm: limit.TokenBucket, Unit: limit.Minute, Limit: 3}}
	log3    = []limit.Rule{{Name: "log", Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 3}}
	// Three rules of which the per-second fixed window denies first; the
	// others are fixed windows or untouched meters: predictable.
	three = []limit.Rule{
		{Name: "second", Unit: limit.Second, Limit: 2},
		{Name: "minute", Unit: limit.Minute, Limit: 100},
		{Name: "hour", Algorithm: limit.GCRA, Unit: limit.Hour, Limit: 1000},
	}
	// A partly used sliding window that admits while the fixed rule denies:
	// its Remaining grows with time, so the denial is not predictable.
	unpredictable = []limit.Rule{
		{Name: "fixed", Unit: limit.Minute, Limit: 2},
		{Name: "sliding", Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 10},
	}
)

// step is one request of a scenario: advance the clock by wait, then ask.
type step struct {
	wait    time.Duration
	rules   []limit.Rule // nil: the scenario's rules
	id      string       // "": the scenario's identity
	n       uint64
	refund  bool
	allowed bool
	cached  bool // answered without the inner backend
	reset   time.Duration
}

func TestCache(t *testing.T) {
	raised := []limit.Rule{fixed3[0]}
	raised[0].Limit = 4
	renamed := []limit.Rule{fixed3[0]}
	renamed[0].Name = "other name"
	minute := []limit.Rule{{Unit: limit.Minute, Limit: 10}} // shares fixed3's state
	fastBucket := []limit.Rule{bucket3[0]}                  // shares bucket3's state, drains twice as fast
	fastBucket[0].Limit, fastBucket[0].Burst = 6, 3
	tests := []struct {
		name  string
		rules []limit.Rule
		steps []step
	}{
		{"fixed window: cached until the window ends", fixed3, []step{
			{n: 3, allowed: true, reset: 40 * time.Second},
			{n: 1, reset: 40 * time.Second},
			{n: 1, cached: true, reset: 40 * time.Second},
			{wait: 10 * time.Second, n: 1, cached: true, reset: 30 * time.Second},
			{wait: 30*time.Second - time.Microsecond, n: 1, cached: true, reset: time.Microsecond},
			{wait: time.Microsecond, n: 1, allowed: true, reset: time.Minute},
		}},
		{"fixed window: a larger cost is answered, a smaller one is not", fixed3, []step{
			{n: 2, allowed: true, reset: 40 * time.Second},
			{n: 2, reset: 40 * time.Second},
			{n: 5, cached: true, reset: 40 * time.Second},
			{n: 2, cached: true, reset: 40 * time.Second},
			{n: 1, allowed: true, reset: 40 * time.Second},
		}},
		{"token bucket: same cost cached, larger cost asked", bucket3, []step{
			{n: 3, allowed: true, reset: time.Minute},
			{n: 1, reset: 20 * time.Second},
			{wait: 5 * time.Second, n: 1, cached: true, reset: 15 * time.Second},
			{n: 2, reset: 35 * time.Second},
			{wait: 15 * time.Second, n: 1, allowed: true, reset: time.Minute},
		}},
		{"sliding log: cached until the oldest entry leaves", log3, []step{
			{n: 1, allowed: true, reset: time.Minute},
			{wait: 10 * time.Second, n: 2, allowed: true, reset: time.Minute},
			{n: 1, reset: 50 * time.Second},
			{wait: 49 * time.Second, n: 1, cached: true, reset: time.Second},
			{wait: time.Second, n: 1, allowed: true, reset: time.Minute},
		}},
		{"token bucket, cost 2: cached until Remaining grows to 1", bucket3, []step{
			{n: 3, allowed: true, reset: time.Minute},
			{n: 2, reset: 40 * time.Second},
			{n: 2, cached: true, reset: 40 * time.Second},
			{wait: 19 * time.Second, n: 2, cached: true, reset: 21 * time.Second},
			{wait: time.Second, n: 2, reset: 20 * time.Second}, // Remaining is 1 now
		}},
		{"three rules, a used meter among them", three, []step{
			{n: 2, allowed: true, reset: time.Second},
			{n: 1, reset: time.Second},
			{wait: 500 * time.Millisecond, n: 1, cached: true, reset: 500 * time.Millisecond},
			{wait: 500*time.Millisecond - time.Microsecond, n: 1, cached: true, reset: time.Microsecond},
			{wait: time.Microsecond, n: 1, allowed: true, reset: time.Second},
		}},
		{"a used meter: cached until its Remaining may grow", []limit.Rule{
			{Name: "fixed", Unit: limit.Minute, Limit: 2},
			{Name: "bucket", Algorithm: limit.TokenBucket, Unit: limit.Second, Multiplier: 10, Limit: 10, Burst: 5},
		}, []step{
			{n: 2, allowed: true, reset: 40 * time.Second}, // the bucket holds 2 of 5, 1 s per unit
			{n: 1, reset: 40 * time.Second},
			// The bucket's Remaining (3) becomes 4 at +1 s: cached until a
			// few µs before.
			{wait: 900 * time.Millisecond, n: 1, cached: true, reset: 39100 * time.Millisecond},
			{wait: 100*time.Millisecond - 3*time.Microsecond, n: 1, reset: 39*time.Second + 3*time.Microsecond},
		}},
		{"a changed limit misses, a changed name hits", fixed3, []step{
			{n: 3, allowed: true, reset: 40 * time.Second},
			{n: 1, reset: 40 * time.Second},
			{rules: renamed, n: 1, cached: true, reset: 40 * time.Second},
			{rules: raised, n: 1, allowed: true, reset: 40 * time.Second},
		}},
		{"another identity misses", fixed3, []step{
			{n: 3, allowed: true, reset: 40 * time.Second},
			{n: 1, reset: 40 * time.Second},
			{id: "other", n: 1, allowed: true, reset: 40 * time.Second},
		}},
		{"peeks always reach the store", fixed3, []step{
			{n: 3, allowed: true, reset: 40 * time.Second},
			{n: 1, reset: 40 * time.Second},
			{n: 0, allowed: true, reset: 40 * time.Second},
			{n: 1, cached: true, reset: 40 * time.Second},
		}},
		{"a refund reaches the store and forgets the denial", fixed3, []step{
			{n: 3, allowed: true, reset: 40 * time.Second},
			{n: 1, reset: 40 * time.Second},
			{n: 1, refund: true, allowed: true, reset: 40 * time.Second},
			{n: 1, allowed: true, reset: 40 * time.Second},
		}},
		{"an admitted cost on shared state forgets the denial", fixed3, []step{
			{n: 3, allowed: true, reset: 40 * time.Second},
			{n: 1, reset: 40 * time.Second},
			{rules: minute, n: 2, allowed: true, reset: 40 * time.Second},
			{n: 1, reset: 40 * time.Second}, // asked again: remaining could have changed
			{n: 1, cached: true, reset: 40 * time.Second},
		}},
		{"a peek of shared state under another limit forgets the denial", bucket3, []step{
			{n: 3, allowed: true, reset: time.Minute},
			{n: 1, reset: 20 * time.Second},
			{n: 1, cached: true, reset: 20 * time.Second},
			{rules: fastBucket, n: 0, allowed: true, reset: 30 * time.Second},
			{n: 1, reset: 20 * time.Second},
			{n: 1, cached: true, reset: 20 * time.Second},
		}},
		{"an unpredictable denial is not cached", unpredictable, []step{
			{n: 2, allowed: true, reset: 40 * time.Second},
			{n: 1, reset: 40 * time.Second},
			{n: 1, reset: 40 * time.Second},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Options{})
			model := memory.New(memory.Options{Now: f.clock.Now, SweepInterval: -1})
			defer model.Close()
			for i, st := range tt.steps {
				f.clock.Advance(st.wait)
				rules, id := tt.rules, "id"
				if st.rules != nil {
					rules = st.rules
				}
				if st.id != "" {
					id = st.id
				}
				d, cached := f.do(id, rules, st.n, st.refund)
				want := model.Decide(context.Background(), []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: st.n, Refund: st.refund}}})[0].Decision
				if !backendtest.SameDecision(d, want) {
					t.Fatalf("step %d: got %s, want the store's %s", i, format(d), format(want))
				}
				if d.Allowed != st.allowed || cached != st.cached || d.BindingOutcome().Reset != st.reset {
					t.Fatalf("step %d: allowed=%v cached=%v reset=%v, want allowed=%v cached=%v reset=%v",
						i, d.Allowed, cached, d.BindingOutcome().Reset, st.allowed, st.cached, st.reset)
				}
			}
		})
	}
}

var seeds = flag.Uint64("seeds", 8, "TestDifferential: how many random traffic seeds to compare")

// TestDifferential drives random traffic through a cached and an uncached
// memory backend on one clock and requires identical answers, with many
// answers coming from the cache: requests decided check by check (Decide)
// and requests decided together (DecideTogether, all-or-nothing), where
// the cache answers the requests whose every check it holds a denial of.
func TestDifferential(t *testing.T) {
	for _, together := range []bool{false, true} {
		name := "Decide"
		if together {
			name = "DecideTogether"
		}
		t.Run(name, func(t *testing.T) {
			hits := differential(t, *seeds, 3000, together, func(t *testing.T, now func() time.Time) (cached *Backend, model backend.Backend) {
				model = memory.New(memory.Options{Now: now, SweepInterval: -1})
				cached = New(memory.New(memory.Options{Now: now, SweepInterval: -1}), Options{Clock: elapsed(now), Size: 4, Shards: 1})
				return cached, model
			})
			if hits < 1000 {
				t.Errorf("only %d answers came from the cache: the comparison proves little", hits)
			}
		})
	}
}

// decideBoth asks b for checks, together or by Decide, and fails t when a
// backend declines a request decided together.
func decideBoth(t *testing.T, b backend.Backend, checks []backend.Check, together bool) []backend.Result {
	t.Helper()
	if !together {
		return b.Decide(context.Background(), checks)
	}
	res, ok := b.(backend.TogetherDecider).DecideTogether(context.Background(), checks)
	if !ok {
		t.Fatalf("DecideTogether declined %+v", checks)
	}
	return res
}

// differential runs seeds random traffic sequences of steps requests each
// through a cached backend and its model (newPair makes both on one clock),
// requiring identical decisions, and returns the cache's hits.
func differential(t *testing.T, seeds uint64, steps int, together bool,
	newPair func(t *testing.T, now func() time.Time) (*Backend, backend.Backend)) uint64 {
	zone, err := time.LoadLocation("Asia/Kathmandu")
	if err != nil {
		t.Fatal(err)
	}
	ruleSets := [][]limit.Rule{
		{{Unit: limit.Second, Multiplier: 10, Limit: 5}},
		{{Algorithm: limit.SlidingWindow, Unit: limit.Second, Multiplier: 10, Limit: 5}},
		{{Algorithm: limit.SlidingLog, Unit: limit.Second, Multiplier: 10, Limit: 5}},
		{{Algorithm: limit.TokenBucket, Unit: limit.Second, Multiplier: 7, Limit: 3, Burst: 5}},
		{{Algorithm: limit.LeakyBucket, Unit: limit.Minute, Limit: 7}},
		{{Algorithm: limit.GCRA, Unit: limit.Second, Limit: 3, Burst: 2}},
		{{Unit: limit.Hour, Limit: 9, Location: zone}},
		// Shares state with the sets above, with the same limits. (Other
		// limits on shared state make the memory backend's answers depend
		// on when it drops state by the latest rule's expiry, which the
		// cache changes by hiding denials; TestCache covers that case.)
		{
			{Unit: limit.Second, Multiplier: 10, Limit: 5},
			{Algorithm: limit.SlidingLog, Unit: limit.Second, Multiplier: 10, Limit: 5},
			{Algorithm: limit.GCRA, Unit: limit.Second, Limit: 3, Burst: 2},
		},
		{
			{Unit: limit.Second, Limit: 2},
			{Unit: limit.Minute, Limit: 20},
			{Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 500},
		},
		{{Unit: limit.Minute}}, // limit 0
	}
	costs := []uint64{0, 1, 1, 1, 1, 1, 2, 3, 6}
	waits := []time.Duration{0, 0, 0, time.Microsecond, 7 * time.Millisecond, 333 * time.Millisecond, 1700 * time.Millisecond, 4 * time.Second, 61 * time.Second}
	var hits uint64
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0xdec1de))
			c := testenv.NewClock(start.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
			b, model := newPair(t, c.Now)
			defer model.Close()
			defer b.Close()
			ids := []string{"a", "b", "c", "d", "e", "f"}
			var denied []backend.Check // recent denials, asked again like an abusive client would
			for step := range steps {
				c.Advance(waits[rng.IntN(len(waits))])
				checks := make([]backend.Check, 1+rng.IntN(3))
				for i := range checks {
					if len(denied) > 0 && rng.IntN(2) == 0 {
						checks[i] = denied[rng.IntN(len(denied))]
						checks[i].Cost.N += uint64(rng.IntN(2)) // the same or a larger cost
						continue
					}
					checks[i] = backend.Check{
						Identity: ids[rng.IntN(len(ids))], // may repeat in one batch
						Rules:    ruleSets[rng.IntN(len(ruleSets))],
						Cost:     limit.Cost{N: costs[rng.IntN(len(costs))], Refund: rng.IntN(10) == 0},
					}
				}
				got := decideBoth(t, b, checks, together)
				want := decideBoth(t, model, checks, together)
				for i := range checks {
					if !want[i].Allowed && len(denied) < 8 {
						denied = append(denied, checks[i])
					} else if !want[i].Allowed {
						denied[rng.IntN(len(denied))] = checks[i]
					}
					if got[i].Err != nil || !backendtest.SameDecision(got[i].Decision, want[i].Decision) {
						t.Fatalf("step %d check %d (%s, %v, cost %+v): got %s (err %v), want %s",
							step, i, checks[i].Identity, checks[i].Rules, checks[i].Cost, format(got[i].Decision), got[i].Err, format(want[i].Decision))
					}
				}
			}
			st := b.Stats()
			if st.Entries > 4 {
				t.Errorf("%d identities held, size 4", st.Entries)
			}
			hits += st.Hits
			t.Logf("%+v", st)
		})
	}
	return hits
}

func TestEviction(t *testing.T) {
	f := newFixture(t, Options{Size: 2, Shards: 1})
	deny := func(id string) {
		t.Helper()
		f.do(id, fixed3, 3, false)
		if d, _ := f.do(id, fixed3, 1, false); d.Allowed {
			t.Fatalf("%s: not denied", id)
		}
	}
	cached := func(id string) bool {
		t.Helper()
		_, c := f.do(id, fixed3, 1, false)
		return c
	}
	deny("a")
	deny("b")
	if !cached("a") { // a is referenced, b is not
		t.Fatal("a not cached")
	}
	deny("c") // full: the hand clears a's bit, evicts b
	if st := f.b.Stats(); st.Evictions != 1 || st.Entries != 2 {
		t.Fatalf("after a third identity: %+v, want 1 eviction and 2 entries", st)
	}
	if !cached("a") || !cached("c") || cached("b") {
		t.Fatal("CLOCK evicted the referenced identity instead of the idle one")
	}
	// Expired entries are dropped on access and their slot reused without
	// an eviction.
	f.clock.Advance(time.Minute)
	for _, id := range []string{"a", "b", "c"} {
		if cached(id) {
			t.Fatalf("%s: an expired denial answered", id)
		}
	}
	if st := f.b.Stats(); st.Entries != 0 || st.Evictions != 2 {
		t.Fatalf("after expiry: %+v, want no entries and no further evictions", st)
	}
}

func TestVariants(t *testing.T) {
	f := newFixture(t, Options{})
	// Five rule sets with five distinct states: consume them all first (an
	// admitted cost forgets the identity's denials), then deny each.
	sets := [][]limit.Rule{fixed3, log3, bucket3, {{Unit: limit.Hour, Limit: 3}}, {{Unit: limit.Minute, Multiplier: 2, Limit: 3}}}
	for _, rules := range sets {
		f.do("x", rules, 3, false)
	}
	for _, rules := range sets {
		if d, _ := f.do("x", rules, 1, false); d.Allowed {
			t.Fatalf("%v: admitted", rules)
		}
	}
	hits := 0
	for _, rules := range sets {
		if _, c := f.do("x", rules, 1, false); c {
			hits++
		}
	}
	if hits != maxVariants {
		t.Errorf("%d of %d rule sets of one identity answered, want %d (the most kept)", hits, len(sets), maxVariants)
	}
}

func TestBatch(t *testing.T) {
	f := newFixture(t, Options{})
	f.do("x", fixed3, 3, false)
	f.do("x", fixed3, 1, false) // remembered
	ctx := context.Background()
	// A refund earlier in the batch: the later check must not be answered
	// from the cache, it must see the refund.
	res := f.b.Decide(ctx, []backend.Check{
		{Identity: "x", Rules: fixed3, Cost: limit.Cost{N: 1, Refund: true}},
		{Identity: "x", Rules: fixed3, Cost: limit.Cost{N: 1}},
		{Identity: "y", Rules: fixed3, Cost: limit.Cost{N: 1}},
	})
	if len(res) != 3 || !res[0].Allowed || !res[1].Allowed || !res[2].Allowed {
		t.Fatalf("refund then take in one batch: %+v", res)
	}
	// A hit between two misses keeps its place.
	f.do("z", fixed3, 3, false)
	f.do("z", fixed3, 1, false)
	before := f.inner.checks.Load()
	res = f.b.Decide(ctx, []backend.Check{
		{Identity: "p", Rules: fixed3, Cost: limit.Cost{N: 1}},
		{Identity: "z", Rules: fixed3, Cost: limit.Cost{N: 1}},
		{Identity: "q", Rules: fixed3, Cost: limit.Cost{N: 2}},
	})
	if n := f.inner.checks.Load() - before; n != 2 {
		t.Errorf("the inner backend saw %d checks, want 2", n)
	}
	if !res[0].Allowed || res[1].Allowed || !res[2].Allowed || res[0].BindingOutcome().Remaining != 2 || res[2].BindingOutcome().Remaining != 1 {
		t.Errorf("results out of place: %+v", res)
	}
}

// failing is a backend that fails every check, or returns too few results.
type failing struct{ short bool }

func (f failing) Decide(_ context.Context, checks []backend.Check) []backend.Result {
	if f.short {
		return nil
	}
	res := make([]backend.Result, len(checks))
	for i := range res {
		res[i].Err = fmt.Errorf("failing: %w", backend.ErrUnavailable)
	}
	return res
}
func (failing) Ping(context.Context) error { return backend.ErrUnavailable }
func (failing) Close() error               { return nil }

func TestErrors(t *testing.T) {
	ctx := context.Background()
	check := []backend.Check{{Identity: "x", Rules: fixed3, Cost: limit.Cost{N: 1}}}
	for _, short := range []bool{false, true} {
		b := New(failing{short: short}, Options{})
		res := b.Decide(ctx, check)
		if len(res) != 1 || res[0].Err == nil {
			t.Errorf("short=%v: %+v, want an error", short, res)
		}
		if b.Len() != 0 {
			t.Errorf("short=%v: an error was cached", short)
		}
		if err := b.Ping(ctx); err == nil {
			t.Errorf("Ping does not reach the inner backend")
		}
	}

	f := newFixture(t, Options{})
	f.do("x", fixed3, 3, false)
	f.do("x", fixed3, 1, false)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if res := f.b.Decide(cancelled, check); res[0].Err == nil {
		t.Errorf("a cancelled context was answered from the cache: %+v", res)
	}
	f.b.Close()
	if res := f.b.Decide(ctx, check); res[0].Err == nil {
		t.Errorf("after Close: %+v, want the inner backend's error", res)
	}
}

// TestConcurrent hammers a few identities from many goroutines, with
// refunds mixed in: the cache must never admit more than the store would.
func TestConcurrent(t *testing.T) {
	f := newFixture(t, Options{Size: 8})
	const workers, calls, quota = 32, 300, 50
	rules := []limit.Rule{{Unit: limit.Hour, Limit: quota}}
	ids := []string{"a", "b", "c", "d"}
	var admitted, refunded [4]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				k := (w + i) % len(ids)
				refund := w == 0 && i%50 == 0 && i < calls/2 // plenty of traffic follows each refund
				res := f.b.Decide(context.Background(), []backend.Check{{Identity: ids[k], Rules: rules, Cost: limit.Cost{N: 1, Refund: refund}}})
				if res[0].Err != nil {
					t.Errorf("Decide: %v", res[0].Err)
					return
				}
				switch {
				case refund:
					refunded[k].Add(1)
				case res[0].Allowed:
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for k, id := range ids {
		// A refund gives back at most one (nothing when the count is 0).
		// Every refund is followed by many requests, so a cache that kept
		// denying after a refund would leave the window short of full.
		peek := f.b.Decide(context.Background(), []backend.Check{{Identity: id, Rules: rules}})[0]
		used := quota - int64(peek.BindingOutcome().Remaining)
		a, r := admitted[k].Load(), refunded[k].Load()
		if used != quota || a < quota || a > quota+r {
			t.Errorf("%s: admitted %d with %d refunds, store holds %d of %d", id, a, r, used, quota)
		}
	}
	if st := f.b.Stats(); st.Hits == 0 {
		t.Errorf("no hits under contention: %+v", st)
	}
}

func TestHitAllocations(t *testing.T) {
	f := newFixture(t, Options{})
	f.do("x", three, 2, false)
	f.do("x", three, 1, false)
	checks := []backend.Check{{Identity: "x", Rules: three, Cost: limit.Cost{N: 1}}}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if res := f.b.Decide(ctx, checks); res[0].Allowed {
			t.Fatal("admitted")
		}
	})
	// The returned results and outcomes; nothing else.
	if allocs > 2 {
		t.Errorf("a hit allocates %.0f times, want at most 2 (the returned slices)", allocs)
	}
}

func TestShardSizing(t *testing.T) {
	for _, tt := range []struct{ size, shards, wantShards, wantPer int }{
		{0, 0, 64, 157},
		{10, 0, 1, 10},
		{1000, 0, 8, 125},
		{3, 8, 2, 2},
		{100, 5, 4, 25},
	} {
		b := New(failing{}, Options{Size: tt.size, Shards: tt.shards})
		if len(b.shards) != tt.wantShards || cap(b.shards[0].slots) != tt.wantPer {
			t.Errorf("size %d shards %d: %d shards of %d, want %d of %d", tt.size, tt.shards, len(b.shards), cap(b.shards[0].slots), tt.wantShards, tt.wantPer)
		}
	}
}

func format(d limit.Decision) string {
	s := fmt.Sprintf("allowed=%v binding=%d", d.Allowed, d.Binding)
	for i, o := range d.Outcomes {
		s += fmt.Sprintf(" [%d: %v %d %v]", i, o.Allowed, o.Remaining, o.Reset)
	}
	return s
}

// elapsed turns a wall-style test clock into the cache's clock: the time
// since its first reading.
func elapsed(now func() time.Time) func() time.Duration {
	origin := now()
	return func() time.Duration { return now().Sub(origin) }
}
