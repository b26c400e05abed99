package rlqs

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// TestSimulatedEnvoysMemory: Envoys share a 60 per minute rule through one
// instance on the embedded store.
func TestSimulatedEnvoysMemory(t *testing.T) {
	clock := testenv.NewClock(simStart)
	cfg := parseConfig(t, simConfig)
	in := startInstance(t, memory.NewQuotaStore(), func() *descriptor.Config { return cfg }, clock.Now, Options{})
	envoys := newEnvoys(clock, []*instance{in}, []func(time.Duration) float64{
		shifting(3, 0.2, 20*time.Second, 0), shifting(3, 0.2, 20*time.Second, 1),
	})
	run := simulate(clock, envoys, map[string]string{"api": "orders"}, 10*time.Minute, 50*time.Millisecond, nil)
	t.Log(describeRun(run))
	if run.unmatchedDenied > 0 {
		t.Errorf("unmatched bucket denied %d times", run.unmatchedDenied)
	}
	if m := run.maxWindow(); m > 66 {
		t.Errorf("a window admitted %d, more than 60 x 1.1", m)
	}
}
