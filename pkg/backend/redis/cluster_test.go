package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// idsPerMaster finds, for every master, an identity whose slot it serves.
func idsPerMaster(t *testing.T, c *redistest.ClusterSet, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	masters := c.Masters()
	for i := 0; len(out) < len(masters) && i < 1000; i++ {
		id := fmt.Sprintf("%s|user=%d", prefix, i)
		slot, err := c.KeySlot(id)
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.MasterOf(slot)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := out[m]; !ok {
			out[m] = id
		}
	}
	if len(out) != len(masters) {
		t.Fatalf("found identities for %d of %d masters", len(out), len(masters))
	}
	return out
}

// TestClusterNodesInParallel pauses one master (it accepts connections but
// answers nothing) and sends, several times, one Decide with a check on
// every master. The checks on the other masters must succeed each time: the
// per-node parts of the pipeline run concurrently, so none waits behind the
// hung node (sequentially, whichever came after it would hit the deadline).
func TestClusterNodesInParallel(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{NodeTimeout: 10 * time.Second}) // no failover during the pause
	opts := clusterOptions(c)
	opts.Timeout = 300 * time.Millisecond
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
// requests flow to every master, and measures how long until that
// descriptor is decided again (its replica promoted, go-redis told of the
// new slot map). Decisions on the other masters must not stop meanwhile.
func TestClusterFailover(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{NodeTimeout: time.Second})
	opts := clusterOptions(c)
	opts.Timeout = 300 * time.Millisecond
	b := newBackend(t, opts)
	ids := idsPerMaster(t, c, "fo")
	var victim string
	var others []string
	for m, id := range ids {
		if victim == "" {
			victim = m
			continue
		}
		others = append(others, id)
	}
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
	promoted := make(chan time.Duration, 1)
	go func() {
		for time.Since(killed) < 60*time.Second {
			if m, err := c.MasterOf(slot); err == nil && m != victim {
				promoted <- time.Since(killed)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		promoted <- -1
	}()
	failures := 0
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
		if time.Since(killed) > 60*time.Second {
			t.Fatalf("no decision on the failed-over slot 60s after the kill: %v", r.Err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	newMaster, _ := c.MasterOf(slot)
	t.Logf("failover: decisions on slot %d resumed %v after its master %s was killed (cluster-node-timeout 1s; the cluster showed the new master %s after %v); %d calls failed meanwhile with ErrUnavailable; the other masters decided %d calls meanwhile",
		slot, recovered.Round(time.Millisecond), victim, newMaster, (<-promoted).Round(time.Millisecond), failures, l.ok.Load()-okAtKill)
	if l.ok.Load() == okAtKill {
		t.Error("the other masters decided nothing during the failover")
	}
	if n := l.other.Load(); n > 0 {
		t.Errorf("%d calls on other masters failed with a non-ErrUnavailable error: %v", n, l.lastErr)
	}
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
