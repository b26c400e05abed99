package memory

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/backendtest"
	"github.com/sluice-rl/sluice/pkg/limit"
)

func TestContract(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Backend {
		return New(Options{Now: now, SweepInterval: -1})
	})
}

func newClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2030, 5, 1, 12, 0, 0, 250_000_000, time.UTC))
}

// newUnswept returns a backend of opts on newClock's clock that never
// sweeps, closed when the test ends.
func newUnswept(t *testing.T, opts Options) (*Backend, *testenv.Clock) {
	t.Helper()
	clock := newClock()
	opts.Now, opts.SweepInterval = clock.Now, -1
	b := New(opts)
	t.Cleanup(func() { b.Close() })
	return b, clock
}

func decide(t *testing.T, b *Backend, checks ...backend.Check) []backend.Result {
	t.Helper()
	res := b.Decide(context.Background(), checks)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("check %d: %v", i, r.Err)
		}
	}
	return res
}

func TestSweepDropsExpiredState(t *testing.T) {
	b, clock := newUnswept(t, Options{})
	second := []limit.Rule{{Unit: limit.Second, Limit: 5}}
	mixed := []limit.Rule{
		{Unit: limit.Second, Limit: 5},
		{Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 5},
	}
	for i := range 100 {
		decide(t, b, backend.Check{Identity: fmt.Sprint("s", i), Rules: second, Cost: limit.Cost{N: 1}})
	}
	decide(t, b, backend.Check{Identity: "mixed", Rules: mixed, Cost: limit.Cost{N: 1}})
	if got := b.Len(); got != 101 {
		t.Fatalf("Len = %d, want 101", got)
	}
	clock.Advance(750*time.Millisecond - time.Microsecond)
	b.Sweep()
	if got := b.Len(); got != 101 {
		t.Fatalf("1µs before the window ends: Len = %d after Sweep, want 101", got)
	}
	clock.Advance(time.Microsecond)
	b.Sweep()
	if got := b.Len(); got != 1 {
		t.Fatalf("at the window end: Len = %d after Sweep, want 1 (the sliding log lives a minute)", got)
	}
	clock.Advance(time.Minute)
	b.Sweep()
	if got := b.Len(); got != 0 {
		t.Fatalf("after a minute: Len = %d, want 0", got)
	}
}

func TestNothingStoredWithoutUsage(t *testing.T) {
	b, _ := newUnswept(t, Options{})
	rules := []limit.Rule{
		{Unit: limit.Minute, Limit: 5},
		{Algorithm: limit.TokenBucket, Unit: limit.Minute, Limit: 5},
		{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 5},
		{Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 5},
	}
	decide(t, b,
		backend.Check{Identity: "peek", Rules: rules},
		backend.Check{Identity: "too big", Rules: rules, Cost: limit.Cost{N: 6}},
		backend.Check{Identity: "refund", Rules: rules, Cost: limit.Cost{N: 3, Refund: true}},
		backend.Check{Identity: "no rules", Cost: limit.Cost{N: 1}},
	)
	if got := b.Len(); got != 0 {
		t.Fatalf("Len = %d after peeks, denials and refunds on fresh identities, want 0", got)
	}
	// A refund that empties every rule removes the entry too.
	decide(t, b, backend.Check{Identity: "x", Rules: rules, Cost: limit.Cost{N: 2}})
	decide(t, b, backend.Check{Identity: "x", Rules: rules, Cost: limit.Cost{N: 2, Refund: true}})
	if got := b.Len(); got != 0 {
		t.Fatalf("Len = %d after a full refund, want 0", got)
	}
}

func TestExpiredEntryReadsAsEmpty(t *testing.T) {
	b, clock := newUnswept(t, Options{})
	// A meter that never drains forgets its level one period after the last
	// admission: the entry expires then, and is read as empty before any
	// sweep.
	rules := []limit.Rule{{Algorithm: limit.GCRA, Unit: limit.Second, Limit: 0, Burst: 2}}
	check := backend.Check{Identity: "x", Rules: rules, Cost: limit.Cost{N: 2}}
	decide(t, b, check)
	if res := decide(t, b, check); res[0].Allowed {
		t.Fatalf("second burst admitted at once: %+v", res[0])
	}
	clock.Advance(time.Second)
	if res := decide(t, b, check); !res[0].Allowed {
		t.Fatalf("after the state expired: %+v, want admitted", res[0])
	}
	// Old rules' state stays until it expires, even when later checks name
	// other rules; then it goes.
	other := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	decide(t, b, backend.Check{Identity: "x", Rules: other, Cost: limit.Cost{N: 1}})
	clock.Advance(time.Second)
	decide(t, b, backend.Check{Identity: "x", Rules: other})
	n := 0 // rule states held for "x", whichever shard it is in
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		if e := sh.entries["x"]; e != nil {
			n = len(e.rules)
		}
		sh.mu.Unlock()
	}
	if n != 1 {
		t.Fatalf("entry holds %d rule states, want only the live hour rule", n)
	}
}

func TestSweeperRunsAndStops(t *testing.T) {
	before := runtime.NumGoroutine()
	clock := newClock()
	b := New(Options{Now: clock.Now, SweepInterval: time.Millisecond})
	decide(t, b, backend.Check{Identity: "x", Rules: []limit.Rule{{Unit: limit.Second, Limit: 1}}, Cost: limit.Cost{N: 1}})
	clock.Advance(time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for b.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background sweeper never dropped the expired entry")
		}
		time.Sleep(time.Millisecond) // polling a condition, not waiting for time to pass
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d before New, %d after Close", before, runtime.NumGoroutine())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestClosedAndCancelled(t *testing.T) {
	b := New(Options{SweepInterval: -1})
	check := backend.Check{Identity: "x", Rules: []limit.Rule{{Unit: limit.Second, Limit: 1}}, Cost: limit.Cost{N: 1}}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := b.Decide(ctx, []backend.Check{check, check})
	if len(res) != 2 || !errors.Is(res[0].Err, context.Canceled) || !errors.Is(res[1].Err, context.Canceled) {
		t.Fatalf("cancelled context: %+v", res)
	}
	if err := b.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	b.Close()
	res = b.Decide(context.Background(), []backend.Check{check})
	if len(res) != 1 || !errors.Is(res[0].Err, backend.ErrUnavailable) {
		t.Fatalf("after Close: %+v, want ErrUnavailable", res)
	}
	if err := b.Ping(context.Background()); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("Ping after Close: %v", err)
	}
}

func TestShards(t *testing.T) {
	tests := []struct{ in, min, want int }{
		{1, 0, 1},
		{3, 0, 4},
		{64, 0, 64},
		{100, 0, 128},
		{0, 64, 0},
	}
	for _, tt := range tests {
		b := New(Options{Shards: tt.in, SweepInterval: -1})
		got := len(b.shards)
		b.Close()
		if tt.want != 0 && got != tt.want || got < tt.min || got&(got-1) != 0 {
			t.Errorf("Shards %d: %d shards, want %d (min %d, a power of two)", tt.in, got, tt.want, tt.min)
		}
	}
}

func TestDecideAllocations(t *testing.T) {
	b := New(Options{SweepInterval: -1})
	defer b.Close()
	checks := []backend.Check{{Identity: "x", Rules: benchRules, Cost: limit.Cost{N: 1}}}
	ctx := context.Background()
	b.Decide(ctx, checks)
	// One slice of results and one of outcomes per check: nothing else.
	if n := testing.AllocsPerRun(1000, func() { b.Decide(ctx, checks) }); n > 2 {
		t.Errorf("Decide allocates %v times per call, want ≤ 2", n)
	}
}

var benchRules = []limit.Rule{
	{Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 1e9},
	{Unit: limit.Hour, Limit: 1e12},
}

func benchIdentities(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench|user=%d", i)
	}
	return ids
}

// BenchmarkDecide decides one check of two rules per call, over 1024
// descriptors.
func BenchmarkDecide(b *testing.B) {
	be := New(Options{SweepInterval: -1})
	defer be.Close()
	ids := benchIdentities(1024)
	checks := []backend.Check{{Rules: benchRules, Cost: limit.Cost{N: 1}}}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		checks[0].Identity = ids[i&1023]
		i++
		be.Decide(ctx, checks)
	}
}

// BenchmarkDecideParallel is BenchmarkDecide from GOMAXPROCS goroutines.
func BenchmarkDecideParallel(b *testing.B) {
	be := New(Options{SweepInterval: -1})
	defer be.Close()
	ids := benchIdentities(1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		checks := []backend.Check{{Rules: benchRules, Cost: limit.Cost{N: 1}}}
		i := 0
		for pb.Next() {
			checks[0].Identity = ids[i&1023]
			i += 7
			be.Decide(ctx, checks)
		}
	})
}

// TestMaxDescriptorsEvictsLeastRecentlyUsed: a full backend evicts the least
// recently used descriptor to store a new one, counts it, and never holds
// more than MaxDescriptors; the evicted descriptor restarts empty.
func TestMaxDescriptorsEvictsLeastRecentlyUsed(t *testing.T) {
	b, _ := newUnswept(t, Options{Shards: 1, MaxDescriptors: 3})
	hour := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	take := func(id string) bool {
		return decide(t, b, backend.Check{Identity: id, Rules: hour, Cost: limit.Cost{N: 1}})[0].Allowed
	}
	for _, id := range []string{"a", "b", "c"} {
		take(id)
	}
	take("a") // denied, but a is now the most recently used
	take("d") // evicts b, the least recently used
	if got := b.Len(); got != 3 {
		t.Fatalf("Len = %d, want 3", got)
	}
	if got := b.Evictions(); got != 1 {
		t.Fatalf("Evictions = %d, want 1", got)
	}
	if take("a") || take("c") || take("d") {
		t.Errorf("a kept descriptor lost its count")
	}
	if !take("b") {
		t.Errorf("the evicted descriptor did not restart empty")
	}
}

// TestMaxDescriptorsEvictsExpiredFirst: an expired descriptor among the
// least recently used makes room without counting an eviction, even when a
// live one was used less recently.
func TestMaxDescriptorsEvictsExpiredFirst(t *testing.T) {
	b, clock := newUnswept(t, Options{Shards: 1, MaxDescriptors: 2})
	hour := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	second := []limit.Rule{{Unit: limit.Second, Limit: 1}}
	decide(t, b, backend.Check{Identity: "live", Rules: hour, Cost: limit.Cost{N: 1}})
	decide(t, b, backend.Check{Identity: "short", Rules: second, Cost: limit.Cost{N: 1}})
	clock.Advance(time.Second)
	decide(t, b, backend.Check{Identity: "new", Rules: hour, Cost: limit.Cost{N: 1}})
	if b.Evictions() != 0 {
		t.Fatalf("Evictions = %d, want 0: the expired descriptor should have made room", b.Evictions())
	}
	if decide(t, b, backend.Check{Identity: "live", Rules: hour, Cost: limit.Cost{N: 1}})[0].Allowed {
		t.Errorf("the live descriptor was evicted instead of the expired one")
	}
}

// TestMaxDescriptorsDefault: the zero Options bound the backend at
// DefaultMaxDescriptors; a negative value means no bound.
func TestMaxDescriptorsDefault(t *testing.T) {
	for _, tt := range []struct {
		max, want int
	}{{0, DefaultMaxDescriptors}, {-1, 0}, {100, 128}} {
		b := New(Options{SweepInterval: -1, Shards: 64, MaxDescriptors: tt.max})
		total := 0
		for i := range b.shards {
			total += b.shards[i].max
		}
		b.Close()
		if tt.want != 0 && (total < tt.want || total > tt.want+64) || tt.want == 0 && total != 0 {
			t.Errorf("MaxDescriptors %d: shards hold %d in all, want about %d", tt.max, total, tt.want)
		}
	}
}

// FuzzOtherStatesBounded: whatever limit overrides earlier checks named
// (any unit, any multiplier), an identity keeps at most
// backend.MaxOtherStates states beside the rules of the latest check, and
// the configured rule keeps its count (an override of its very period
// shares its state, as the reference's key does).
func FuzzOtherStatesBounded(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte{7, 255, 7, 254, 0, 1, 6, 200, 5, 100, 4, 50, 3, 25, 2, 12, 1, 6, 7, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, clock := newUnswept(t, Options{Shards: 1})
		configured := []limit.Rule{{Unit: limit.Minute, Limit: 1 << 20}}
		taken := uint64(0)
		for i := 0; i+1 < len(data) && i < 400; i += 2 {
			unit := limit.Unit(1 + int(data[i])%7)
			override := []limit.Rule{{Unit: unit, Multiplier: uint32(data[i+1]) * 997, Limit: 5}}
			d := decide(t, b, backend.Check{Identity: "x", Rules: override, Cost: limit.Cost{N: 1}})[0]
			if d.Allowed && override[0].Key() == configured[0].Key() {
				taken++ // the same period: the override shares the configured rule's state
			}
			decide(t, b, backend.Check{Identity: "x", Rules: configured, Cost: limit.Cost{N: 1}})
			taken++
			clock.Advance(time.Duration(data[i]) * time.Millisecond)
			sh := &b.shards[0]
			if e := sh.entries["x"]; e != nil && len(e.rules) > backend.MaxOtherStates+1 {
				t.Fatalf("after %d overrides the identity holds %d states", i/2+1, len(e.rules))
			}
		}
		if taken == 0 {
			return
		}
		d := decide(t, b, backend.Check{Identity: "x", Rules: configured})[0]
		if d.Outcomes[0].Remaining != 1<<20-taken {
			t.Fatalf("the configured rule lost its count: remaining %d, want %d", d.Outcomes[0].Remaining, 1<<20-taken)
		}
	})
}
