package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// TestBreakerPerClusterNode is the regression test for a circuit breaker
// shared by a whole cluster: calls to one hung master opened it, and then
// calls to the healthy masters failed with "circuit open" too, so one sick
// node stopped every decision of every slot (test/reliability's
// TestClusterMasterKilled saw it under -race). Each node now has its own
// breaker.
func TestBreakerPerClusterNode(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{NodeTimeout: 10 * time.Second}) // no failover meanwhile
	clock := &fakeClock{now: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	opts := clusterOptions(c)
	opts.KeyPrefix = "brknode:"
	opts.Timeout = 200 * time.Millisecond
	opts.Clock = clock.Now
	opts.Breaker = BreakerOptions{Failures: 3, OpenFor: time.Minute}
	b := newBackend(t, opts)
	ids := idsPerMaster(t, c, "brknode")
	var sick string
	var healthy []string
	for m, id := range ids {
		if sick == "" {
			sick = m
			continue
		}
		healthy = append(healthy, id)
	}
	check := func(id string) backend.Check {
		return backend.Check{Identity: id, Rules: []limit.Rule{{Unit: limit.Hour, Limit: 1 << 40}}, Cost: limit.Cost{N: 1}}
	}
	decide := func(ids ...string) []backend.Result {
		var checks []backend.Check
		for _, id := range ids {
			checks = append(checks, check(id))
		}
		return b.Decide(context.Background(), checks)
	}
	for _, r := range decide(append([]string{ids[sick]}, healthy...)...) {
		if r.Err != nil {
			t.Fatalf("before the pause: %v", r.Err)
		}
	}
	pid := c.PID(sick)
	pause(t, pid)
	defer resume(pid)

	circuitOpen := func(err error) bool {
		return errors.Is(err, backend.ErrUnavailable) && strings.Contains(err.Error(), "circuit open")
	}
	for i := range 3 {
		if r := decide(ids[sick])[0]; !errors.Is(r.Err, backend.ErrUnavailable) || circuitOpen(r.Err) {
			t.Fatalf("call %d to the hung master: %v, want its own timeout", i+1, r.Err)
		}
	}
	if r := decide(ids[sick])[0]; !circuitOpen(r.Err) {
		t.Fatalf("after 3 failures the hung master's calls: %v, want circuit open", r.Err)
	}
	for _, id := range healthy {
		if r := decide(id)[0]; r.Err != nil {
			t.Fatalf("a healthy master's call while the hung master's breaker is open: %v", r.Err)
		}
	}
	// One Decide over every master: the hung one fails at once, the others
	// are decided.
	for i, r := range decide(append([]string{ids[sick]}, healthy...)...) {
		if i == 0 && !circuitOpen(r.Err) {
			t.Fatalf("mixed Decide, hung master: %v, want circuit open", r.Err)
		}
		if i > 0 && r.Err != nil {
			t.Fatalf("mixed Decide, healthy master %d: %v", i, r.Err)
		}
	}
	// The hung master answers again: its breaker closes after its open
	// period, on the first probe.
	resume(pid)
	clock.advance(time.Minute)
	waitUntil(t, 10*time.Second, "the master's calls decided again", func() bool { return decide(ids[sick])[0].Err == nil })
}
