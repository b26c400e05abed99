package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// batchCounter counts pipelines and their commands through ObserveBatch.
type batchCounter struct{ pipelines, cmds atomic.Int64 }

func (c *batchCounter) observe(n int) {
	c.pipelines.Add(1)
	c.cmds.Add(int64(n))
}

// queueState reads the standalone node's queue: lanes running and
// requests queued.
func queueState(b *Backend) (lanes, queued int) {
	n := b.co.single
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lanes, len(n.queue)
}

// inFlight starts n calls (one check each, on ids prefix0..), one at a
// time, each once the one before is in its own pipeline; Redis must be
// paused and n at most the lanes, so each holds a lane.
func inFlight(t *testing.T, b *Backend, prefix string, n int) []<-chan backend.Result {
	t.Helper()
	var out []<-chan backend.Result
	for i := range n {
		out = append(out, decideAsync(context.Background(), b, fmt.Sprintf("%s%d", prefix, i)))
		waitUntil(t, 10*time.Second, fmt.Sprintf("%d calls in flight", i+1), func() bool {
			lanes, queued := queueState(b)
			return lanes == i+1 && queued == 0
		})
	}
	return out
}

// decideAsync runs decideOne on its own goroutine and delivers the result.
func decideAsync(ctx context.Context, b *Backend, id string) <-chan backend.Result {
	return decideRulesAsync(ctx, b, id, oneRule)
}

// decideRulesAsync is decideAsync for the given rules.
func decideRulesAsync(ctx context.Context, b *Backend, id string, rules []limit.Rule) <-chan backend.Result {
	out := make(chan backend.Result, 1)
	go func() {
		out <- b.Decide(ctx, []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: 1}}})[0]
	}()
	return out
}

// TestCoalesceFillsPipelines: callers deciding in lock step, with a window
// that never elapses and a limit of one pipeline per round, share exactly
// one pipeline per round, and the round's checks go in one script call:
// Redis runs one EVALSHA (one TIME) per round, and still reads and writes
// each check's counter (one MGET, one SET each), and every caller gets its
// own decision.
func TestCoalesceFillsPipelines(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	const callers, rounds = 16, 20
	var count batchCounter
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "cofill:", Timeout: 30 * time.Second,
		PipelineWindow: time.Hour, PipelineLimit: callers, ObserveBatch: count.observe})
	if err := rc.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	rules := []limit.Rule{{Unit: limit.Hour, Limit: rounds}}
	var wg sync.WaitGroup
	errs := make(chan error, callers*rounds)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("cofill|user=%d", g)
			for i := range rounds {
				r := b.Decide(context.Background(), []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: 1}}})[0]
				if r.Err != nil {
					errs <- r.Err
					return
				}
				// Each caller sees its own counter: rounds-1-i left.
				if !r.Allowed || r.Outcomes[0].Remaining != uint64(rounds-1-i) {
					errs <- fmt.Errorf("caller %d round %d: %+v", g, i, r.Decision)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p, c := count.pipelines.Load(), count.cmds.Load(); p != rounds || c != rounds {
		t.Errorf("%d pipelines carrying %d commands, want %d carrying one each", p, c, rounds)
	}
	stats := redistest.CommandCalls(t, rc)
	if stats["evalsha"] != rounds || stats["eval"] != 0 || stats["time"] != rounds ||
		stats["set"] != callers*rounds || stats["get"] != callers*rounds || stats["mget"] != 0 {
		// One fixed window: each decision is a GET and a SET of its counter key.
		t.Errorf("commandstats %v: want evalsha=time=%d, no eval, get=set=%d, no mget", stats, rounds, callers*rounds)
	}
}

// TestCoalesceOpportunistic: with no window, calls go out at once while a
// pipeline slot is free; calls that arrive while every slot waits on Redis
// queue and leave together, in pipelines of at most the limit (each one
// script call), as soon as a slot comes back. Redis is paused to hold the
// slots busy.
func TestCoalesceOpportunistic(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	var count batchCounter
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "coopp:", Timeout: 30 * time.Second,
		pipelineLanes: 2, PipelineLimit: 8, ObserveBatch: count.observe})
	if r := decideOne(b, "coopp|warm"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := rc.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	count.pipelines.Store(0)
	count.cmds.Store(0)

	srv.Pause()
	defer srv.Resume()
	results := inFlight(t, b, "coopp|early", 2)
	const late = 20
	for i := range late {
		results = append(results, decideAsync(context.Background(), b, fmt.Sprintf("coopp|late%d", i)))
	}
	waitUntil(t, 10*time.Second, "the late calls queued", func() bool {
		_, queued := queueState(b)
		return queued == late
	})
	srv.Resume()
	for i, ch := range results {
		if r := <-ch; r.Err != nil || !r.Allowed {
			t.Errorf("call %d: %+v", i, r)
		}
	}
	// 2 pipelines of one call, then the 20 queued calls in 8+8+4, each
	// pipeline's calls merged into one.
	if p, c := count.pipelines.Load(), count.cmds.Load(); p != 5 || c != 5 {
		t.Errorf("%d pipelines carrying %d commands, want 5 carrying one each", p, c)
	}
	if stats := redistest.CommandCalls(t, rc); stats["evalsha"] != 5 || stats["set"] != 2+late {
		t.Errorf("commandstats %v: want evalsha=5, set=%d (one per decision admitted)", stats, 2+late)
	}
}

// TestCoalesceCallerLeaves: a caller whose context ends while its call is
// queued returns at once with ErrUnavailable naming its context's error,
// its call is never sent, and the breaker does not count it.
func TestCoalesceCallerLeaves(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	var count batchCounter
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "coleave:", Timeout: 30 * time.Second,
		pipelineLanes: 1, ObserveBatch: count.observe, Breaker: BreakerOptions{Failures: 1}})
	if r := decideOne(b, "coleave|warm"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := rc.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	first := inFlight(t, b, "coleave|first", 1)[0]

	cancelled, cancel := context.WithCancel(context.Background())
	second := decideAsync(cancelled, b, "coleave|second")
	timed, cancelTimed := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelTimed()
	third := decideAsync(timed, b, "coleave|third")
	waitUntil(t, 10*time.Second, "two calls queued", func() bool {
		_, queued := queueState(b)
		return queued == 2
	})
	cancel()
	for name, tt := range map[string]struct {
		ch   <-chan backend.Result
		want error
	}{"cancelled": {second, context.Canceled}, "deadline": {third, context.DeadlineExceeded}} {
		r := <-tt.ch
		if !errors.Is(r.Err, backend.ErrUnavailable) || !errors.Is(r.Err, tt.want) {
			t.Errorf("%s caller: %v, want ErrUnavailable and %v", name, r.Err, tt.want)
		}
	}
	if b.breakers.isOpen("") {
		t.Error("callers leaving opened the breaker")
	}
	srv.Resume()
	if r := <-first; r.Err != nil || !r.Allowed {
		t.Fatalf("first call: %+v", r)
	}
	waitUntil(t, 10*time.Second, "the lane gone", func() bool {
		lanes, queued := queueState(b)
		return lanes == 0 && queued == 0
	})
	if p := count.pipelines.Load(); p != 2 { // the warm-up and the first call
		t.Errorf("%d pipelines, want 2: the calls whose callers left were sent", p)
	}
	if stats := redistest.CommandCalls(t, rc); stats["evalsha"] != 1 {
		t.Errorf("commandstats %v: want exactly the first call's EVALSHA", stats)
	}
}

// TestCoalesceErrorPerCall: in one shared pipeline, merged into one script
// call, a call whose key holds the wrong type gets Redis's error, and only
// that call: the others are decided.
func TestCoalesceErrorPerCall(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	var count batchCounter
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "coerr:", Timeout: 30 * time.Second,
		PipelineWindow: time.Hour, PipelineLimit: 3, ObserveBatch: count.observe})
	// A sliding log is a sorted set; a string in its place makes the
	// script's ZREMRANGEBYSCORE fail with WRONGTYPE. (A counter holding
	// something else reads as empty and is overwritten: decision 0012.)
	logRule := []limit.Rule{{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 100}}
	if err := rc.Set(context.Background(), Key("coerr:", "coerr|bad", logRule[0]), "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var results []<-chan backend.Result
	for _, id := range []string{"coerr|a", "coerr|bad", "coerr|b"} {
		results = append(results, decideRulesAsync(context.Background(), b, id, logRule))
	}
	for i, ch := range results {
		r := <-ch
		if i == 1 {
			if r.Err == nil || errors.Is(r.Err, backend.ErrUnavailable) || !strings.Contains(r.Err.Error(), "WRONGTYPE") {
				t.Errorf("the call on a wrong-type key: %v, want Redis's WRONGTYPE error", r.Err)
			}
			continue
		}
		if r.Err != nil || !r.Allowed {
			t.Errorf("call %d beside it: %+v", i, r)
		}
	}
	if p, c := count.pipelines.Load(), count.cmds.Load(); p != 1 || c != 1 {
		t.Errorf("%d pipelines carrying %d commands, want the three calls in one", p, c)
	}
}

// TestCoalesceClusterNodeFails: concurrent callers on every master of a
// cluster, one master paused: the callers on it fail with ErrUnavailable,
// the others are all decided.
func TestCoalesceClusterNodeFails(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute}) // no failover during the pause
	opts := clusterOptions(c)
	opts.KeyPrefix = "cofail:"
	opts.Timeout = 2 * time.Second // generous: a healthy node must answer within it under -race on a loaded machine
	opts.Breaker.Failures = -1
	var count batchCounter
	opts.ObserveBatch = count.observe
	b := newBackend(t, opts)
	ids := idsPerMaster(t, c, "cofail")
	var hung string
	var all []string
	for m, id := range ids {
		if hung == "" {
			hung = m
		}
		all = append(all, id)
		if r := decideOne(b, id); r.Err != nil {
			t.Fatalf("before the pause, %s: %v", id, r.Err)
		}
	}
	pid := c.PID(hung)
	pause(t, pid)
	defer resume(pid)

	const callers, calls = 12, 6
	var wg sync.WaitGroup
	var okHealthy, failedHung atomic.Int64
	errs := make(chan error, callers*calls)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				id := all[(g+i)%len(all)]
				r := decideOne(b, id)
				switch {
				case id == ids[hung] && errors.Is(r.Err, backend.ErrUnavailable):
					failedHung.Add(1)
				case id == ids[hung]:
					errs <- fmt.Errorf("a call on the paused master: %v, want ErrUnavailable", r.Err)
				case r.Err != nil:
					errs <- fmt.Errorf("a call on a healthy master (%s): %v", id, r.Err)
				default:
					okHealthy.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if okHealthy.Load() == 0 || failedHung.Load() == 0 {
		t.Errorf("%d calls decided on healthy masters, %d failed on the paused one: want both", okHealthy.Load(), failedHung.Load())
	}
	t.Logf("%d decided, %d failed on the paused master, %d pipelines for %d commands",
		okHealthy.Load(), failedHung.Load(), count.pipelines.Load(), count.cmds.Load())
}

// TestCloseWithCallsInFlight: Close fails the calls in flight and queued
// at once (long before the 60s timeout would), and leaves no goroutine
// behind.
func TestCloseWithCallsInFlight(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := New(ctx, Options{URL: srv.Addr(), Timeout: time.Minute, pipelineLanes: 2, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if r := decideOne(b, "coclose|warm"); r.Err != nil {
		t.Fatal(r.Err)
	}
	before := runtime.NumGoroutine()
	srv.Pause()
	defer srv.Resume()
	results := inFlight(t, b, "coclose|early", 2)
	for i := range 8 {
		results = append(results, decideAsync(context.Background(), b, fmt.Sprintf("coclose|late%d", i)))
	}
	waitUntil(t, 10*time.Second, "eight calls queued", func() bool {
		_, queued := queueState(b)
		return queued == 8
	})
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return with calls in flight (the timeout is a minute)")
	}
	for i, ch := range results {
		select {
		case r := <-ch:
			if !errors.Is(r.Err, backend.ErrUnavailable) {
				t.Errorf("call %d: %v, want ErrUnavailable", i, r.Err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("call %d still waiting after Close", i)
		}
	}
	waitUntil(t, 10*time.Second, "goroutines back to the level before the calls", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// TestCoalescerPrunesIdleNodes: a new node address prunes the queues idle
// for idleNodeTTL, and only those: a recently used queue and a queue with
// work stay.
func TestCoalescerPrunesIdleNodes(t *testing.T) {
	c := &coalescer{nodes: map[string]*node{}}
	old := time.Now().Add(-2 * idleNodeTTL).UnixNano()
	for _, addr := range []string{"gone:1", "busy:1", "recent:1"} {
		if c.node(addr, time.Now()) == nil {
			t.Fatalf("node(%q) = nil on an open coalescer", addr)
		}
	}
	c.nodes["gone:1"].lastUsed.Store(old)
	busy := c.nodes["busy:1"]
	busy.lastUsed.Store(old)
	busy.queue = append(busy.queue, &request{})

	tests := []struct {
		addr string
		want []string // the addresses kept after node(addr)
	}{
		{"recent:1", []string{"busy:1", "gone:1", "recent:1"}}, // a known address prunes nothing
		{"new:1", []string{"busy:1", "new:1", "recent:1"}},
	}
	for _, tt := range tests {
		if n := c.node(tt.addr, time.Now()); n == nil || n.addr != tt.addr {
			t.Fatalf("node(%q) = %+v", tt.addr, n)
		}
		var got []string
		for addr := range c.nodes {
			got = append(got, addr)
		}
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("after node(%q): queues %q, want %q", tt.addr, got, tt.want)
		}
	}
	// The pruned address comes back as a fresh queue when used again.
	if n := c.node("gone:1", time.Now()); n == nil || len(c.nodes) != 4 {
		t.Errorf("node(gone:1) again: %v, %d queues, want a new one beside 3", n, len(c.nodes))
	}
}
