package denycache

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// The cache forwards DecideTogether to an inner backend that has it, and
// declines (deciding nothing) over one that does not; a denial decided
// together is remembered like one decided by Decide.
func TestDecideTogetherForwards(t *testing.T) {
	one := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	checks := []backend.Check{{Identity: "a", Rules: one, Cost: limit.Cost{N: 1}}, {Identity: "b", Rules: one, Cost: limit.Cost{N: 1}}}
	ctx := context.Background()

	f := newFixture(t, Options{}) // its inner backend hides DecideTogether
	if res, ok := f.b.DecideTogether(ctx, checks); ok || res != nil || f.inner.checks.Load() != 0 {
		t.Fatalf("over a backend without DecideTogether: ok=%v %+v, %d checks reached it; want declined, nothing decided", ok, res, f.inner.checks.Load())
	}

	mem := memory.New(memory.Options{SweepInterval: -1})
	b := New(mem, Options{})
	t.Cleanup(func() { b.Close() })
	if res, ok := b.DecideTogether(ctx, checks); !ok || !res[0].Allowed || !res[1].Allowed {
		t.Fatalf("first request: ok=%v %+v, want both admitted", ok, res)
	}
	if res, ok := b.DecideTogether(ctx, checks); !ok || res[0].Allowed || res[1].Allowed {
		t.Fatalf("second request: ok=%v %+v, want both denied", ok, res)
	}
	before := b.Stats().Hits
	if res := b.Decide(ctx, checks[:1]); res[0].Allowed {
		t.Fatalf("a after a together denial: %+v, want denied", res)
	}
	if b.Stats().Hits != before+1 {
		t.Errorf("a denial decided together was not remembered (hits %d → %d)", before, b.Stats().Hits)
	}
}
