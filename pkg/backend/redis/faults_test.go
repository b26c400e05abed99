package redis

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

var oneRule = []limit.Rule{{Unit: limit.Hour, Limit: 1 << 40}}

func decideOne(b *Backend, id string) backend.Result {
	return b.Decide(context.Background(), []backend.Check{{Identity: id, Rules: oneRule, Cost: limit.Cost{N: 1}}})[0]
}

// waitUntil polls cond until it holds, failing t after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Until(t, timeout, what, cond)
}

// load runs goroutines deciding in a loop until stop is closed, and
// counts results; every error must wrap ErrUnavailable.
type load struct {
	ok, unavailable, other atomic.Int64
	circuitOpen            atomic.Int64 // of unavailable: failed fast by a breaker
	clusterDown            atomic.Int64 // of unavailable: refused with CLUSTERDOWN
	stop                   chan struct{}
	stopOnce               sync.Once
	wg                     sync.WaitGroup
	slowest                atomic.Int64 // ns, of a failed call
	mu                     sync.Mutex
	lastErr                error
	firstFail, lastFail    time.Time // when the first and last failed calls ended
}

func startLoad(b *Backend, goroutines int, ids []string) *load {
	l := &load{stop: make(chan struct{})}
	for g := range goroutines {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				r := decideOne(b, ids[(g+i)%len(ids)])
				switch {
				case r.Err == nil:
					l.ok.Add(1)
				case errors.Is(r.Err, backend.ErrUnavailable):
					l.unavailable.Add(1)
					if errors.Is(r.Err, backend.ErrCircuitOpen) {
						l.circuitOpen.Add(1)
					}
					if strings.Contains(r.Err.Error(), "CLUSTERDOWN") {
						l.clusterDown.Add(1)
					}
					time.Sleep(time.Millisecond) // pace failing callers; they fail fast
					if d := int64(time.Since(start)); d > l.slowest.Load() {
						l.slowest.Store(d)
					}
					l.mu.Lock()
					l.lastErr = r.Err
					if l.firstFail.IsZero() {
						l.firstFail = time.Now()
					}
					l.lastFail = time.Now()
					l.mu.Unlock()
				default:
					l.other.Add(1)
					l.mu.Lock()
					l.lastErr = r.Err
					l.mu.Unlock()
				}
			}
		}()
	}
	return l
}

// finish stops the load and waits for it; it may be called again.
func (l *load) finish() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// TestRedisKilledUnderLoad kills Redis while requests flow: callers get
// ErrUnavailable, each within the timeout, and the same backend recovers
// once Redis is back (with an empty script cache).
func TestRedisKilledUnderLoad(t *testing.T) {
	srv := redistest.Standalone(t)
	const timeout = 200 * time.Millisecond
	b := newBackend(t, Options{URL: srv.Addr(), Timeout: timeout, Breaker: BreakerOptions{Failures: 5, OpenFor: 100 * time.Millisecond}})
	l := startLoad(b, 8, []string{"kill|a", "kill|b", "kill|c"})
	defer l.finish()
	waitUntil(t, 10*time.Second, "load running", func() bool { return l.ok.Load() > 50 })

	srv.Kill()
	waitUntil(t, 10*time.Second, "callers see ErrUnavailable", func() bool { return l.unavailable.Load() > 20 })
	okWhileDown := l.ok.Load()

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitUntil(t, 20*time.Second, "decisions resume", func() bool { return l.ok.Load() > okWhileDown+50 })
	t.Logf("decisions resumed %v after the restart; %d calls failed with ErrUnavailable, slowest failure %v",
		time.Since(restarted).Round(time.Millisecond), l.unavailable.Load(), time.Duration(l.slowest.Load()).Round(time.Millisecond))
	if n := l.other.Load(); n > 0 {
		t.Errorf("%d calls failed with an error that is not ErrUnavailable, e.g. %v", n, l.lastErr)
	}
	// Bounded by the timeout (plus scheduling slack on a loaded machine).
	if slow := time.Duration(l.slowest.Load()); slow > timeout+2*time.Second {
		t.Errorf("a failed call took %v with a %v timeout", slow, timeout)
	}
}

// TestStartWithRedisDown: New succeeds with no Redis, decisions fail with
// ErrUnavailable, and the same backend works once Redis comes up.
func TestStartWithRedisDown(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill()
	b := newBackend(t, Options{URL: srv.Addr(), Timeout: 200 * time.Millisecond, Breaker: BreakerOptions{Failures: -1}})
	r := decideOne(b, "down|a")
	if !errors.Is(r.Err, backend.ErrUnavailable) {
		t.Fatalf("decide with Redis down: %v, want ErrUnavailable", r.Err)
	}
	if err := b.Ping(context.Background()); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("Ping with Redis down: %v, want ErrUnavailable", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "decisions once Redis is up", func() bool { return decideOne(b, "down|a").Err == nil })
	if err := b.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// The background loader loads the script once Redis answers.
	waitUntil(t, 40*time.Second, "script loaded in the background", func() bool {
		ok, err := srv.Client().ScriptExists(context.Background(), b.script.SHA1).Result()
		return err == nil && ok[0]
	})
}

// TestScriptFlushUnderLoad flushes Redis's script cache repeatedly while
// requests flow: no caller ever sees an error (NOSCRIPT falls back to EVAL
// within the same Decide).
func TestScriptFlushUnderLoad(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	b := newBackend(t, Options{URL: srv.Addr()})
	l := startLoad(b, 8, []string{"flush|a", "flush|b"})
	for i := range 20 {
		before := l.ok.Load()
		if err := rc.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, fmt.Sprintf("decisions after flush %d", i), func() bool { return l.ok.Load() > before+10 })
	}
	l.finish()
	if n := l.unavailable.Load() + l.other.Load(); n > 0 {
		t.Fatalf("%d callers saw an error across SCRIPT FLUSH, e.g. %v", n, l.lastErr)
	}
	stats := redistest.CommandCalls(t, rc)
	if stats["eval"] == 0 {
		t.Fatalf("commandstats %v: no EVAL fallback happened, the test did not exercise NOSCRIPT", stats)
	}
	t.Logf("%d decisions, %d EVAL fallbacks after 20 flushes", l.ok.Load(), stats["eval"])
}

// TestScriptFlushCluster flushes the script cache on every master of a
// cluster; decisions spread over all masters see no error.
func TestScriptFlushCluster(t *testing.T) {
	c := cluster.Get(t)
	opts := clusterOptions(c)
	opts.KeyPrefix = "flushc:"
	b := newBackend(t, opts)
	ids := idsPerMaster(t, c, "flushc")
	var checks []backend.Check
	for _, id := range ids {
		checks = append(checks, backend.Check{Identity: id, Rules: threeRules, Cost: limit.Cost{N: 1}})
	}
	evalsBefore := 0
	for _, m := range c.Masters() {
		evalsBefore += redistest.CommandCalls(t, c.NodeClient(m))["eval"]
		if err := c.NodeClient(m).ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		for i, r := range b.Decide(context.Background(), checks) {
			if r.Err != nil {
				t.Fatalf("round %d check %d after SCRIPT FLUSH: %v", round, i, r.Err)
			}
		}
	}
	evals := 0
	for _, m := range c.Masters() {
		evals += redistest.CommandCalls(t, c.NodeClient(m))["eval"]
	}
	if evals-evalsBefore != len(checks) {
		t.Fatalf("%d EVAL fallbacks, want one per master (%d)", evals-evalsBefore, len(checks))
	}
}

// TestBreaker opens the breaker on a dead Redis, fails fast while open,
// keeps it open when a probe fails, and closes it on a probe that succeeds.
// The open period runs on a fake clock.
func TestBreaker(t *testing.T) {
	srv := redistest.Standalone(t)
	clock := testenv.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBackend(t, Options{URL: srv.Addr(), Timeout: 300 * time.Millisecond, Clock: clock.Now,
		Breaker: BreakerOptions{Failures: 3, OpenFor: 10 * time.Second}})
	if r := decideOne(b, "brk|a"); r.Err != nil {
		t.Fatal(r.Err)
	}
	srv.Kill()

	circuitOpen := func(r backend.Result) bool {
		return errors.Is(r.Err, backend.ErrUnavailable) && errors.Is(r.Err, backend.ErrCircuitOpen)
	}
	for i := range 3 {
		r := decideOne(b, "brk|a")
		if !errors.Is(r.Err, backend.ErrUnavailable) || circuitOpen(r) {
			t.Fatalf("failure %d: %v, want ErrUnavailable from Redis itself", i+1, r.Err)
		}
	}
	if !b.breakers.isOpen("") {
		t.Fatal("breaker still closed after 3 consecutive failures")
	}
	if r := decideOne(b, "brk|a"); !circuitOpen(r) {
		t.Fatalf("with the breaker open: %v, want circuit open", r.Err)
	}

	// The open period passes with Redis still down: one probe goes through
	// and fails, and the breaker opens again.
	clock.Advance(10 * time.Second)
	if r := decideOne(b, "brk|a"); circuitOpen(r) || !errors.Is(r.Err, backend.ErrUnavailable) {
		t.Fatalf("probe: %v, want Redis's own failure", r.Err)
	}
	if r := decideOne(b, "brk|a"); !circuitOpen(r) {
		t.Fatalf("after a failed probe: %v, want circuit open", r.Err)
	}

	// Redis is back, but the breaker stays open until the period passes.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if r := decideOne(b, "brk|a"); !circuitOpen(r) {
		t.Fatalf("before the open period passed: %v, want circuit open", r.Err)
	}
	clock.Advance(10 * time.Second)
	if r := decideOne(b, "brk|a"); r.Err != nil {
		t.Fatalf("probe with Redis back: %v", r.Err)
	}
	if b.breakers.isOpen("") {
		t.Fatal("breaker open after a successful probe")
	}
	if r := decideOne(b, "brk|a"); r.Err != nil {
		t.Fatalf("after the breaker closed: %v", r.Err)
	}
}

// TestPausedRedis: a hung Redis (SIGSTOP) answers nothing; many concurrent
// callers all get ErrUnavailable naming the timeout, and once the breaker is
// open further calls fail at once instead of queueing behind the dead
// connections.
func TestPausedRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	clock := testenv.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	const timeout = 200 * time.Millisecond
	b := newBackend(t, Options{URL: srv.Addr(), Timeout: timeout, PoolSize: 4, Clock: clock.Now,
		Breaker: BreakerOptions{Failures: 5, OpenFor: time.Minute}})
	if r := decideOne(b, "pause|a"); r.Err != nil {
		t.Fatal(r.Err)
	}
	goroutinesBefore := runtime.NumGoroutine()
	srv.Pause()
	defer srv.Resume()
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = decideOne(b, "pause|a").Err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("caller %d: %v, want ErrUnavailable", i, err)
		}
	}
	// Nothing is left waiting on the hung server once the callers returned.
	waitUntil(t, 5*time.Second, "goroutines back to the level before the pause", func() bool {
		return runtime.NumGoroutine() <= goroutinesBefore+2
	})
	if !b.breakers.isOpen("") {
		t.Fatal("breaker still closed after 40 timeouts")
	}
	if r := decideOne(b, "pause|a"); !errors.Is(r.Err, backend.ErrCircuitOpen) {
		t.Fatalf("with the breaker open: %v", r.Err)
	}
	srv.Resume()
	clock.Advance(time.Minute)
	waitUntil(t, 10*time.Second, "decisions after resume", func() bool { return decideOne(b, "pause|a").Err == nil })
}

// pause and resume freeze and continue one of our own redis-server
// processes by PID.
func pause(t *testing.T, pid int) {
	t.Helper()
	if pid == 0 {
		t.Fatal("no PID to pause")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

func resume(pid int) { _ = syscall.Kill(pid, syscall.SIGCONT) }
