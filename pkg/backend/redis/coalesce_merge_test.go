package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/backendtest"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// Cross-request batching against a real redis-server: the checks of
// concurrent Decides queued for one pipeline go in one script call, and
// each is decided exactly as its own call would decide it.

// queueAll submits each request of reqs on its own goroutine, one at a
// time, each once the one before is queued, on a backend whose window
// never elapses and whose pipeline limit is len(reqs) calls (one node: a
// call per request): the last request fills the queue, which goes out in
// one pipeline, in the order of reqs.
func queueAll(t *testing.T, b *Backend, reqs [][]backend.Check) []<-chan []backend.Result {
	t.Helper()
	return queueAllBy(t, b, reqs, func() int {
		_, queued := queueState(b)
		return queued
	})
}

// queueAllBy is queueAll, reading the number of requests queued with
// queued.
func queueAllBy(t *testing.T, b *Backend, reqs [][]backend.Check, queued func() int) []<-chan []backend.Result {
	t.Helper()
	var out []<-chan []backend.Result
	for i, checks := range reqs {
		ch := make(chan []backend.Result, 1)
		go func() { ch <- b.Decide(context.Background(), checks) }()
		out = append(out, ch)
		if i < len(reqs)-1 {
			waitUntil(t, 10*time.Second, fmt.Sprintf("request %d queued", i), func() bool { return queued() == i+1 })
		}
	}
	return out
}

// mergeRuleSets are the rule sets of TestCoalesceMergedMatchesSeparateCalls:
// every algorithm, small limits so that rounds deny, and a sliding log,
// whose state is a key of its own.
var mergeRuleSets = [][]limit.Rule{
	{{Unit: limit.Second, Limit: 4}},
	{{Algorithm: limit.SlidingLog, Unit: limit.Second, Limit: 5}},
	{
		{Name: "burst", Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 3, Burst: 6},
		{Name: "minute", Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 20},
	},
	{
		{Algorithm: limit.GCRA, Unit: limit.Second, Limit: 10, Burst: 2},
		{Algorithm: limit.LeakyBucket, Unit: limit.Minute, Limit: 30, Burst: 5},
		{Unit: limit.Hour, Limit: 40},
	},
}

// TestCoalesceMergedMatchesSeparateCalls: rounds of concurrent requests
// (one to three checks each, on a few shared descriptors, costs taken,
// peeked, refunded and charged) queued behind a held lane go in one
// pipeline of one script call, and every check is decided exactly as the
// memory backend decides the same checks one after the other, in queue
// order, on the same clock.
func TestCoalesceMergedMatchesSeparateCalls(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now } // written only between rounds
	const rounds, perRound = 8, 12
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "comerge:", Timeout: 30 * time.Second,
		PipelineWindow: time.Hour, PipelineLimit: perRound, FakeRedisClock: clock})
	mem := memory.New(memory.Options{Now: clock, SweepInterval: -1})
	defer mem.Close()
	if err := rc.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(15, 53))
	wantCalls := 0 // each round's descriptors in calls of at most maxMergeItems, cut between requests
	for round := range rounds {
		var reqs [][]backend.Check
		for range perRound {
			var checks []backend.Check
			for range 1 + rng.IntN(3) {
				c := backend.Check{
					Identity: fmt.Sprintf("comerge|user=%d", rng.IntN(4)),
					Rules:    mergeRuleSets[rng.IntN(len(mergeRuleSets))],
					Cost:     limit.Cost{N: uint64(rng.IntN(4))},
				}
				switch rng.IntN(8) {
				case 0:
					c.Cost.Refund = true
				case 1:
					c.Cost.Charge = true
				}
				checks = append(checks, c)
			}
			reqs = append(reqs, checks)
		}
		n := 0
		for _, checks := range reqs {
			if n == 0 || n+len(checks) > maxMergeItems {
				wantCalls, n = wantCalls+1, 0
			}
			n += len(checks)
		}
		got := queueAll(t, b, reqs)
		for i, checks := range reqs {
			want := mem.Decide(context.Background(), checks)
			res := <-got[i]
			for k := range checks {
				if res[k].Err != nil {
					t.Fatalf("round %d request %d check %d: %v", round, i, k, res[k].Err)
				}
				if !backendtest.SameDecision(res[k].Decision, want[k].Decision) {
					t.Errorf("round %d request %d check %d (%+v): Redis %+v, separately %+v",
						round, i, k, checks[k], res[k].Decision, want[k].Decision)
				}
			}
		}
		now = now.Add(300 * time.Millisecond)
	}
	if stats := redistest.CommandCalls(t, rc); stats["evalsha"] != wantCalls || stats["eval"] != 0 {
		t.Errorf("commandstats %v: want evalsha=%d (%d rounds), no eval", stats, wantCalls, rounds)
	}
}

// TestCoalesceMergedRefusal: Redis's refusals reach every request of a
// merged call, classified as a lone request's would be. BUSY (a script
// running) and a Redis that does not answer (paused) fail each with
// ErrUnavailable as they fail a lone request. OOM, which Redis
// raises at a script's first write, fails each writing descriptor with
// ErrUnavailable as it fails a lone request; a script cache emptied
// (NOSCRIPT, the whole call refused) sends the merged call again with
// EVAL, once, and every request is decided.
func TestCoalesceMergedRefusal(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	ctx := context.Background()
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "corefuse:", Timeout: 30 * time.Second,
		PipelineWindow: time.Hour, PipelineLimit: 3, Breaker: BreakerOptions{Failures: -1}})
	// The same settings, with no window: a request goes at once, alone.
	alone := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "corefuse:", Timeout: 30 * time.Second,
		Breaker: BreakerOptions{Failures: -1}})
	one := func(id string) []backend.Check {
		return []backend.Check{{Identity: id, Rules: oneRule, Cost: limit.Cost{N: 1}}}
	}
	reqs := [][]backend.Check{one("corefuse|a"),
		{{Identity: "corefuse|b", Rules: oneRule, Cost: limit.Cost{N: 1}}, {Identity: "corefuse|c", Rules: threeRules, Cost: limit.Cost{N: 1}}},
		one("corefuse|d")}

	t.Run("OOM", func(t *testing.T) {
		if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		defer rc.ConfigSet(ctx, "maxmemory", "0")
		lone := decideOne(alone, "corefuse|lone")
		if !errors.Is(lone.Err, backend.ErrUnavailable) || !strings.Contains(lone.Err.Error(), "OOM") {
			t.Fatalf("a lone request: %v, want ErrUnavailable with OOM", lone.Err)
		}
		if err := rc.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for i, ch := range queueAll(t, b, reqs) {
			for k, r := range <-ch {
				// The same classification as the lone request's; the
				// message may lack Redis's "script: ..." suffix, which
				// Redis adds to an error no script caught.
				if !errors.Is(r.Err, backend.ErrUnavailable) || !strings.Contains(r.Err.Error(), "OOM command not allowed") {
					t.Errorf("request %d check %d: %v, want ErrUnavailable with OOM as the lone request's %v", i, k, r.Err, lone.Err)
				}
			}
		}
		if stats := redistest.CommandCalls(t, rc); stats["evalsha"] != 1 {
			t.Errorf("commandstats %v: want evalsha=1 (the merged call)", stats)
		}
	})

	// every checks that each request's checks fail as the lone request's
	// did: ErrUnavailable, and what holds for the error.
	every := func(t *testing.T, got []<-chan []backend.Result, lone backend.Result, what string, is func(error) bool) {
		t.Helper()
		if !errors.Is(lone.Err, backend.ErrUnavailable) || !is(lone.Err) {
			t.Fatalf("a lone request: %v, want ErrUnavailable, %s", lone.Err, what)
		}
		for i, ch := range got {
			for k, r := range <-ch {
				if !errors.Is(r.Err, backend.ErrUnavailable) || !is(r.Err) {
					t.Errorf("request %d check %d: %v, want ErrUnavailable, %s, as the lone request's %v", i, k, r.Err, what, lone.Err)
				}
			}
		}
	}

	t.Run("BUSY", func(t *testing.T) {
		// A script that runs past the busy threshold makes Redis refuse
		// every other command with BUSY until it is killed.
		if err := rc.ConfigSet(ctx, "lua-time-limit", "10").Err(); err != nil {
			t.Fatal(err)
		}
		defer rc.ConfigSet(ctx, "lua-time-limit", "5000")
		busy := make(chan error, 1)
		go func() { busy <- rc.Eval(ctx, "while true do end", nil).Err() }()
		defer func() {
			rc.ScriptKill(ctx)
			<-busy
		}()
		waitUntil(t, 10*time.Second, "Redis busy", func() bool {
			err := rc.Ping(ctx).Err()
			return err != nil && strings.HasPrefix(err.Error(), "BUSY")
		})
		every(t, queueAll(t, b, reqs), decideOne(alone, "corefuse|lone"), "BUSY", func(err error) bool {
			return strings.Contains(err.Error(), "BUSY ") && strings.Contains(err.Error(), " is busy running a script") // Redis or Valkey
		})
	})

	t.Run("timeout", func(t *testing.T) {
		short := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "corefuse:", Timeout: 300 * time.Millisecond,
			PipelineWindow: time.Hour, PipelineLimit: 3, Breaker: BreakerOptions{Failures: -1}})
		shortAlone := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "corefuse:", Timeout: 300 * time.Millisecond,
			Breaker: BreakerOptions{Failures: -1}})
		srv.Pause()
		defer srv.Resume()
		every(t, queueAll(t, short, reqs), decideOne(shortAlone, "corefuse|lone"), "a timeout", func(err error) bool {
			var nerr net.Error
			return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout())
		})
	})

	t.Run("NOSCRIPT", func(t *testing.T) {
		if err := rc.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rc.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for i, ch := range queueAll(t, b, reqs) {
			for k, r := range <-ch {
				if r.Err != nil || !r.Allowed {
					t.Errorf("request %d check %d: %+v, want allowed", i, k, r)
				}
			}
		}
		// The merged call met NOSCRIPT and was sent again, once, with EVAL,
		// deciding each descriptor once: a GET and a SET of its counter key
		// each.
		if stats := redistest.CommandCalls(t, rc); stats["evalsha"] != 1 || stats["eval"] != 1 || stats["set"] != 4 || stats["get"] != 4 {
			t.Errorf("commandstats %v: want evalsha=1, eval=1, set=4, get=4", stats)
		}
	})
}

// TestCoalesceClusterMergesOneSlot: on a cluster, the queued requests of
// one master are merged per hash tag (a script may touch one slot only):
// the requests on one hot descriptor go in one script call, those on
// another descriptor of the same master in another, and each is decided
// as if alone, in queue order (each sees the writes of those before it).
func TestCoalesceClusterMergesOneSlot(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{})
	run := fmt.Sprintf("coslot%d", time.Now().UnixNano()) // the cluster outlives a run
	ids := idsPerMaster(t, c, run)
	master, hot := "", ""
	for m, id := range ids {
		master, hot = m, id
		break
	}
	other := ""
	for i := 0; other == ""; i++ {
		id := fmt.Sprintf("%s|other=%d", run, i)
		slot, err := c.KeySlot(id)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := c.MasterOf(slot); err != nil {
			t.Fatal(err)
		} else if m == master && id != hot {
			other = id
		}
	}
	const hotN, otherN, limitN = 6, 3, 4
	var count batchCounter
	opts := clusterOptions(c)
	opts.KeyPrefix = "coslot:"
	opts.Timeout = 30 * time.Second
	opts.PipelineWindow = time.Hour
	opts.PipelineLimit = hotN + otherN
	opts.ObserveBatch = count.observe
	b := newBackend(t, opts)

	rules := []limit.Rule{{Unit: limit.Hour, Limit: limitN}}
	var reqs [][]backend.Check
	for i := range hotN + otherN {
		id := hot
		if i%3 == 2 {
			id = other
		}
		reqs = append(reqs, []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: 1}}})
	}
	out := queueAllBy(t, b, reqs, func() int {
		b.co.mu.RLock()
		defer b.co.mu.RUnlock()
		n := 0
		for _, nd := range b.co.nodes {
			n += queued(nd)
		}
		return n
	})
	seen := map[string]int{}
	for i, ch := range out {
		r := (<-ch)[0]
		id := reqs[i][0].Identity
		seen[id]++
		wantAllowed := seen[id] <= limitN
		wantRemaining := uint64(max(limitN-seen[id], 0))
		if r.Err != nil || r.Allowed != wantAllowed || r.Outcomes[0].Remaining != wantRemaining {
			t.Errorf("request %d (%s, its %d.): %+v, want allowed=%v remaining=%d", i, id, seen[id], r, wantAllowed, wantRemaining)
		}
	}
	if p, n := count.pipelines.Load(), count.cmds.Load(); p != 1 || n != 2 {
		t.Errorf("%d pipelines carrying %d commands, want 1 carrying 2: one per descriptor's slot", p, n)
	}
}

// TestCoalesceMergingOff: with DisableMerging the requests one pipeline
// carries keep a script call each.
func TestCoalesceMergingOff(t *testing.T) {
	srv := redistest.Standalone(t)
	var count batchCounter
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "cooff:", Timeout: 30 * time.Second,
		PipelineWindow: time.Hour, PipelineLimit: 3, DisableMerging: true, ObserveBatch: count.observe})
	var reqs [][]backend.Check
	for i := range 3 {
		reqs = append(reqs, []backend.Check{{Identity: fmt.Sprintf("cooff|%d", i), Rules: oneRule, Cost: limit.Cost{N: 1}}})
	}
	for i, ch := range queueAll(t, b, reqs) {
		if r := (<-ch)[0]; r.Err != nil || !r.Allowed {
			t.Errorf("request %d: %+v", i, r)
		}
	}
	if p, n := count.pipelines.Load(), count.cmds.Load(); p != 1 || n != 3 {
		t.Errorf("%d pipelines carrying %d commands, want 1 carrying 3", p, n)
	}
}
