package redis

import (
	"context"
	"errors"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// TestBreakerPerNode takes one cluster master away (frozen with SIGSTOP,
// or killed) with a node timeout long enough that the cluster does not
// fail it over, while calls flow to the other masters, with and without
// coalescing. The dead master's breaker opens and fails its checks fast
// with ErrCircuitOpen; the calls to the other masters meanwhile, before and
// after it opened, all succeed, and their breakers stay closed. When the
// master is back and the open period has passed (on a fake clock), one
// probe closes its breaker.
func TestBreakerPerNode(t *testing.T) {
	for _, fault := range []struct {
		name     string
		down, up func(t *testing.T, c *redistest.ClusterSet, addr string)
	}{
		{
			"paused",
			func(t *testing.T, c *redistest.ClusterSet, addr string) { pause(t, c.PID(addr)) },
			func(t *testing.T, c *redistest.ClusterSet, addr string) { resume(c.PID(addr)) },
		},
		{
			"killed",
			func(t *testing.T, c *redistest.ClusterSet, addr string) {
				if _, err := c.KillMaster(slotOf(t, c, addr)); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, c *redistest.ClusterSet, addr string) {
				if err := c.RestartNode(addr); err != nil {
					t.Fatal(err)
				}
				if err := c.WaitHealthy(30 * time.Second); err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(fault.name, func(t *testing.T) {
			// No failover while the master is away: every slot keeps its
			// master, and the cluster keeps serving the others' slots.
			c := redistest.Cluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
			ids := idsPerMaster(t, c, "pn")
			dead, others := oneAndOthers(ids)
			type run struct {
				name  string
				b     *Backend
				clock *testenv.Clock
				load  *load
			}
			var runs []*run
			for _, coalesce := range []bool{true, false} {
				clock := testenv.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
				opts := clusterOptions(c)
				opts.KeyPrefix = "pn:"
				opts.Timeout = 2 * time.Second // generous: a healthy node must answer within it under -race on a loaded machine
				opts.Clock = clock.Now
				opts.DisableCoalescing = !coalesce
				opts.Breaker = BreakerOptions{Failures: 3, OpenFor: time.Minute}
				r := &run{name: map[bool]string{true: "coalescing", false: "direct"}[coalesce], b: newBackend(t, opts), clock: clock}
				for _, id := range ids {
					if res := decideOne(r.b, id); res.Err != nil {
						t.Fatalf("%s, before the fault: %v", r.name, res.Err)
					}
				}
				runs = append(runs, r)
			}
			for _, r := range runs {
				r.load = startLoad(r.b, 2, others)
				defer r.load.finish()
				waitUntil(t, 10*time.Second, r.name+": load running", func() bool { return r.load.ok.Load() > 20 })
			}

			fault.down(t, c, dead)
			downed := true
			defer func() {
				if downed {
					fault.up(t, c, dead)
				}
			}()
			for _, r := range runs {
				// Calls to the dead master fail (at the timeout, or refused)
				// until its breaker opens.
				waitUntil(t, time.Minute, r.name+": the dead master's breaker open", func() bool {
					res := decideOne(r.b, ids[dead])
					if res.Err == nil {
						t.Fatalf("%s: a check on the dead master was decided", r.name)
					}
					return r.b.breakers.isOpen(dead)
				})
				// One Decide over every master: the dead one's check fails
				// fast, the others are decided.
				var checks []backend.Check
				for _, id := range ids {
					checks = append(checks, backend.Check{Identity: id, Rules: oneRule, Cost: limit.Cost{N: 1}})
				}
				for i, res := range r.b.Decide(context.Background(), checks) {
					if checks[i].Identity == ids[dead] {
						if !errors.Is(res.Err, backend.ErrCircuitOpen) || !errors.Is(res.Err, backend.ErrUnavailable) {
							t.Errorf("%s: the dead master's check: %v, want ErrCircuitOpen", r.name, res.Err)
						}
						continue
					}
					if res.Err != nil {
						t.Errorf("%s: a healthy master's check in the same Decide: %v", r.name, res.Err)
					}
				}
			}
			// The healthy masters keep deciding while the dead one's breaker
			// is open.
			for _, r := range runs {
				before := r.load.ok.Load()
				waitUntil(t, time.Minute, r.name+": decisions with the breaker open", func() bool {
					return r.load.ok.Load() > before+100
				})
			}
			for _, r := range runs {
				r.load.finish()
				r.load.mu.Lock()
				lastErr := r.load.lastErr
				r.load.mu.Unlock()
				if n := r.load.unavailable.Load() + r.load.other.Load(); n > 0 {
					t.Errorf("%s: %d calls to the healthy masters failed, e.g. %v; want none", r.name, n, lastErr)
				}
				for _, id := range others {
					if m := addrOf(t, r.b, id); r.b.breakers.isOpen(m) {
						t.Errorf("%s: the breaker of healthy master %s is open", r.name, m)
					}
				}
				t.Logf("%s: the healthy masters decided %d calls, none failed, while master %s was %s",
					r.name, r.load.ok.Load(), dead, fault.name)
			}

			// Back: after the open period, one probe closes the breaker.
			fault.up(t, c, dead)
			downed = false
			for _, r := range runs {
				if res := decideOne(r.b, ids[dead]); !errors.Is(res.Err, backend.ErrCircuitOpen) {
					t.Errorf("%s: before the open period passed: %v, want ErrCircuitOpen", r.name, res.Err)
				}
				r.clock.Advance(time.Minute)
				waitUntil(t, time.Minute, r.name+": the dead master's checks decided again", func() bool {
					if res := decideOne(r.b, ids[dead]); res.Err == nil {
						return true
					}
					r.clock.Advance(time.Minute) // a failed probe opened it again
					return false
				})
				if r.b.breakers.isOpen(dead) {
					t.Errorf("%s: the breaker is open after a decision", r.name)
				}
			}
		})
	}
}

// slotOf returns a slot the master at addr serves.
func slotOf(t *testing.T, c *redistest.ClusterSet, addr string) int {
	t.Helper()
	for slot := 0; slot < 16384; slot += 64 {
		if m, err := c.MasterOf(slot); err == nil && m == addr {
			return slot
		}
	}
	t.Fatalf("no slot served by %s", addr)
	return 0
}

// TestLiveRefusal: the replies of a live node in a passing state do not
// count against its breaker; the others, and no reply at all, do. The
// replies are real ones, raised by a script on a real Redis.
func TestLiveRefusal(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	tests := []struct {
		reply string
		live  bool
	}{
		{"CLUSTERDOWN The cluster is down", true},
		{"TRYAGAIN Multiple keys request during rehashing of slot", true},
		{"LOADING Redis is loading the dataset in memory", true},
		{"MASTERDOWN Link with MASTER is down", true},
		{"READONLY You can't write against a read only replica.", true},
		{"MOVED 3999 127.0.0.1:6381", true},
		{"ASK 3999 127.0.0.1:6381", true},
		{"OOM command not allowed when used memory > 'maxmemory'.", false},
		{"BUSY Redis is busy running a script.", false},
		{"ERR max number of clients reached", false},
		{"NOSCRIPT No matching script.", false},
	}
	for _, tt := range tests {
		t.Run(tt.reply, func(t *testing.T) {
			err := rc.Eval(context.Background(), "return redis.error_reply(ARGV[1])", nil, tt.reply).Err()
			if err == nil {
				t.Fatal("no error reply")
			}
			if !isUnavailable(err) {
				t.Fatalf("%v is not taken for unavailability", err)
			}
			if got := liveRefusal(err); got != tt.live {
				t.Errorf("liveRefusal(%v) = %v, want %v", err, got, tt.live)
			}
		})
	}
	if liveRefusal(context.DeadlineExceeded) {
		t.Error("a timeout is taken for a live node's refusal")
	}
}

// TestBreakerNoSlotMap starts the backend against a cluster whose seed
// nodes are all dead, so go-redis never had a slot map: checks fail with
// ErrUnavailable, then, once the breaker of the unknown node opens, fast
// with ErrCircuitOpen naming the missing slot map. When
// the nodes are back, the probe after the open period loads the slot map
// and the checks are decided.
func TestBreakerNoSlotMap(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
	masters := c.Masters()
	for _, m := range masters {
		if _, err := c.KillMaster(slotOf(t, c, m)); err != nil {
			t.Fatal(err)
		}
	}
	clock := testenv.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBackend(t, Options{Type: TypeCluster, URL: strings.Join(masters, ","), KeyPrefix: "nomap:",
		Timeout: 300 * time.Millisecond, Clock: clock.Now, Breaker: BreakerOptions{Failures: 3, OpenFor: time.Minute}})
	for i := range 3 {
		r := decideOne(b, "nomap|a")
		if !errors.Is(r.Err, backend.ErrUnavailable) || errors.Is(r.Err, backend.ErrCircuitOpen) {
			t.Fatalf("call %d with no slot map: %v, want ErrUnavailable from the client", i, r.Err)
		}
	}
	if !b.breakers.isOpen("") {
		t.Fatal("the unknown node's breaker is closed after 3 failures")
	}
	for range 10 {
		r := decideOne(b, "nomap|a")
		if !errors.Is(r.Err, backend.ErrCircuitOpen) || !strings.Contains(r.Err.Error(), "no slot map") {
			t.Fatalf("with the breaker open: %v, want ErrCircuitOpen naming the missing slot map", r.Err)
		}
	}
	if b.mapped.Load() {
		t.Fatal("the backend believes it has a slot map")
	}

	for _, m := range masters {
		if err := c.RestartNode(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "decisions once the cluster is back", func() bool {
		clock.Advance(time.Minute) // each try is a probe
		return decideOne(b, "nomap|a").Err == nil
	})
	if !b.mapped.Load() {
		t.Error("decided without the backend knowing it has a slot map")
	}
}
