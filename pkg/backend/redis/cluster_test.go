package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// idsPerMaster finds, for every master, an identity whose slot it serves.
func idsPerMaster(t *testing.T, c *redistest.ClusterSet, prefix string) map[string]string {
	t.Helper()
	id := func(i int) string { return fmt.Sprintf("%s|user=%d", prefix, i) }
	out := map[string]string{}
	for m, i := range c.OnePerMaster(t, id) {
		out[m] = id(i)
	}
	return out
}

// oneAndOthers picks one master of ids (master → identity) and returns it
// with the identities of all the other masters.
func oneAndOthers(ids map[string]string) (master string, others []string) {
	for m, id := range ids {
		if master == "" {
			master = m
			continue
		}
		others = append(others, id)
	}
	return master, others
}

// TestClusterNodesInParallel pauses one master (it accepts connections but
// answers nothing) and sends, several times, one Decide with a check on
// every master. The checks on the other masters must succeed each time: the
// per-node parts of the pipeline run concurrently, so none waits behind the
// hung node (sequentially, whichever came after it would hit the deadline).
func TestClusterNodesInParallel(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute}) // no failover during the pause
	opts := clusterOptions(c)
	opts.Timeout = 2 * time.Second // generous: a healthy node must answer within it under -race on a loaded machine
	opts.Breaker.Failures = -1
	b := newBackend(t, opts)
	ids := idsPerMaster(t, c, "par")
	var hung string
	var checks []backend.Check
	for m, id := range ids {
		if hung == "" {
			hung = m
		}
		checks = append(checks, backend.Check{Identity: id, Rules: threeRules, Cost: limit.Cost{N: 1}})
	}
	for i, r := range b.Decide(context.Background(), checks) {
		if r.Err != nil {
			t.Fatalf("before the pause, check %d: %v", i, r.Err)
		}
	}
	pid := c.PID(hung)
	pause(t, pid)
	defer resume(pid)
	for round := range 4 {
		for i, r := range b.Decide(context.Background(), checks) {
			if ids[hung] == checks[i].Identity {
				if !errors.Is(r.Err, backend.ErrUnavailable) {
					t.Errorf("round %d: the check on the hung master: %v, want ErrUnavailable", round, r.Err)
				}
				continue
			}
			if r.Err != nil {
				t.Errorf("round %d: check %d on a healthy master failed: %v", round, i, r.Err)
			}
		}
	}
}

// TestClusterFailover kills the master serving one descriptor while
// requests flow to the other masters, and measures how long until that
// descriptor is decided again (its replica promoted, go-redis told of the
// new slot map). The calls to the other masters must never be failed by a
// breaker: each node has its own. Whether they fail at all is Redis's
// choice: with cluster-require-full-coverage yes (its default), every node
// answers CLUSTERDOWN from the moment the cluster marks the master failed
// until the replica takes over, so the only failures allowed on the healthy
// masters are those; with "no", the healthy masters serve their slots
// throughout, and not one call to them may fail.
func TestClusterFailover(t *testing.T) {
	redistest.EachCoverage(t, redistest.ClusterOptions{NodeTimeout: time.Second}, func(t *testing.T, c *redistest.ClusterSet, fullCoverage bool) {
		opts := clusterOptions(c)
		opts.Timeout = 2 * time.Second // generous: a healthy node must answer within it under -race on a loaded machine
		failover(t, c, newBackend(t, opts), fullCoverage)
	})
}

// failover is TestClusterFailover on one cluster.
func failover(t *testing.T, c *redistest.ClusterSet, b *Backend, fullCoverage bool) {
	ids := idsPerMaster(t, c, "fo")
	victim, others := oneAndOthers(ids)
	l := startLoad(b, 4, others)
	defer l.finish()
	waitUntil(t, 10*time.Second, "load running", func() bool { return l.ok.Load() > 50 })
	if r := decideOne(b, ids[victim]); r.Err != nil {
		t.Fatal(r.Err)
	}

	slot, err := c.KeySlot(ids[victim])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KillMaster(slot); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	okAtKill := l.ok.Load()
	// When the cluster itself has promoted the replica, for the report.
	promoted := c.WatchPromotion(slot, victim, killed, 60*time.Second)
	failures, open := 0, 0
	var recovered time.Duration
	for {
		r := decideOne(b, ids[victim])
		if r.Err == nil {
			recovered = time.Since(killed)
			break
		}
		if !errors.Is(r.Err, backend.ErrUnavailable) {
			t.Fatalf("during failover: %v, want ErrUnavailable", r.Err)
		}
		failures++
		if errors.Is(r.Err, backend.ErrCircuitOpen) {
			open++
		}
		if time.Since(killed) > 60*time.Second {
			t.Fatalf("no decision on the failed-over slot 60s after the kill: %v", r.Err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.finish()
	newMaster, _ := c.MasterOf(slot)
	l.mu.Lock()
	window := "none"
	if !l.firstFail.IsZero() {
		window = fmt.Sprintf("from %v to %v after the kill",
			l.firstFail.Sub(killed).Round(time.Millisecond), l.lastFail.Sub(killed).Round(time.Millisecond))
	}
	lastErr := l.lastErr
	l.mu.Unlock()
	t.Logf("failover: decisions on slot %d resumed %v after its master %s was killed (cluster-node-timeout 1s; the cluster showed the new master %s after %v); "+
		"%d calls on it failed meanwhile with ErrUnavailable (%d of them fast, by its breaker); "+
		"the other masters decided %d calls meanwhile and %d failed (%d CLUSTERDOWN), %s",
		slot, recovered.Round(time.Millisecond), victim, newMaster, (<-promoted).Round(time.Millisecond),
		failures, open, l.ok.Load()-okAtKill, l.unavailable.Load(), l.clusterDown.Load(), window)
	if l.ok.Load() == okAtKill {
		t.Error("the other masters decided nothing during the failover")
	}
	if n := l.other.Load(); n > 0 {
		t.Errorf("%d calls on other masters failed with a non-ErrUnavailable error: %v", n, lastErr)
	}
	if n := l.circuitOpen.Load(); n > 0 {
		t.Errorf("%d calls on the healthy masters were failed by a breaker, e.g. %v", n, lastErr)
	}
	for _, id := range others {
		if m := addrOf(t, b, id); b.breakers.isOpen(m) {
			t.Errorf("the breaker of healthy master %s is open", m)
		}
	}
	if fullCoverage {
		if n := l.unavailable.Load() - l.clusterDown.Load(); n > 0 {
			t.Errorf("%d calls on the healthy masters failed with something else than CLUSTERDOWN, e.g. %v", n, lastErr)
		}
	} else if n := l.unavailable.Load(); n > 0 {
		t.Errorf("%d calls on the healthy masters failed, e.g. %v; want none when the cluster does not require full coverage", n, lastErr)
	}
}

// addrOf returns the address of the master go-redis routes id's keys to.
func addrOf(t *testing.T, b *Backend, id string) string {
	t.Helper()
	key := "{" + id + "}"
	m, err := b.cluster.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// TestSentinelFailover kills the Sentinel-managed master; the sentinel
// promotes the replica and the same backend decides again through it.
func TestSentinelFailover(t *testing.T) {
	s := redistest.Sentinel(t)
	url := s.MasterName()
	for _, a := range s.SentinelAddrs() {
		url += "," + a
	}
	b := newBackend(t, Options{Type: TypeSentinel, URL: url, Timeout: 300 * time.Millisecond})
	if r := decideOne(b, "sen|a"); r.Err != nil {
		t.Fatal(r.Err)
	}
	s.KillMaster()
	killed := time.Now()
	failures := 0
	for {
		r := decideOne(b, "sen|a")
		if r.Err == nil {
			break
		}
		if !errors.Is(r.Err, backend.ErrUnavailable) {
			t.Fatalf("during failover: %v, want ErrUnavailable", r.Err)
		}
		failures++
		if time.Since(killed) > 60*time.Second {
			t.Fatalf("no decision 60s after the master was killed: %v", r.Err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("sentinel failover: decisions resumed %v after the master was killed (down-after 1s); %d calls failed meanwhile",
		time.Since(killed).Round(time.Millisecond), failures)
}
