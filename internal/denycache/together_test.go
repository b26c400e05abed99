package denycache

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/backendtest"
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

// togetherCounter is a memory backend that counts the checks its
// DecideTogether is asked.
type togetherCounter struct {
	*memory.Backend
	checks atomic.Int64
}

func (c *togetherCounter) DecideTogether(ctx context.Context, checks []backend.Check) ([]backend.Result, bool) {
	c.checks.Add(int64(len(checks)))
	return c.Backend.DecideTogether(ctx, checks)
}

// TestDecideTogetherFromCache: a request decided together whose every
// check has a remembered denial is answered without the store, each check
// with the denial the store gave, as hits; a request of which one check
// has none, or that carries a refund or a charged cost, goes to the store
// whole (the others' peeks, the refund and the charge are the store's),
// its cacheable checks counted as misses.
func TestDecideTogetherFromCache(t *testing.T) {
	one := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	ctx := context.Background()
	check := func(id string, cost limit.Cost) backend.Check {
		return backend.Check{Identity: id, Rules: one, Cost: cost}
	}
	c := testenv.NewClock(start) // still: every answer is the first denial's
	inner := &togetherCounter{Backend: memory.New(memory.Options{Now: c.Now, SweepInterval: -1})}
	b := New(inner, Options{Clock: elapsed(c.Now), MaxAge: -1})
	t.Cleanup(func() { b.Close() })
	if res := b.Decide(ctx, []backend.Check{check("a", limit.Cost{N: 1}), check("b", limit.Cost{N: 1})}); !res[0].Allowed || !res[1].Allowed {
		t.Fatalf("filling a and b: %+v", res)
	}
	first := b.Decide(ctx, []backend.Check{check("a", limit.Cost{N: 1}), check("b", limit.Cost{N: 1})}) // remembered
	for _, tc := range []struct {
		name            string
		checks          []backend.Check
		toStore         int64 // checks the store is asked
		hits, misses    uint64
		deniedA, denied int // the index of a's denial, the denials expected
	}{
		{"every check remembered", []backend.Check{check("a", limit.Cost{N: 1}), check("b", limit.Cost{N: 1})}, 0, 2, 0, 0, 2},
		{"a twice and b", []backend.Check{check("a", limit.Cost{N: 1}), check("b", limit.Cost{N: 1}), check("a", limit.Cost{N: 1})}, 0, 3, 0, 0, 3},
		{"c not remembered", []backend.Check{check("a", limit.Cost{N: 1}), check("c", limit.Cost{N: 1})}, 2, 0, 2, 0, 1},
		{"a refund beside", []backend.Check{check("b", limit.Cost{N: 1, Refund: true}), check("a", limit.Cost{N: 1})}, 2, 0, 1, 1, 1},
		{"a charged cost beside", []backend.Check{check("a", limit.Cost{N: 1}), check("d", limit.Cost{N: 1, Charge: true})}, 2, 0, 1, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, st := inner.checks.Load(), b.Stats()
			res, ok := b.DecideTogether(ctx, tc.checks)
			if !ok || len(res) != len(tc.checks) {
				t.Fatalf("ok=%v, %d results for %d checks", ok, len(res), len(tc.checks))
			}
			denied := 0
			for _, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if !r.Allowed {
					denied++
				}
			}
			if denied != tc.denied || !backendtest.SameDecision(res[tc.deniedA].Decision, first[0].Decision) {
				t.Errorf("%d denied, a %s; want %d denied, a %s", denied, format(res[tc.deniedA].Decision), tc.denied, format(first[0].Decision))
			}
			after := b.Stats()
			if got := inner.checks.Load() - before; got != tc.toStore {
				t.Errorf("the store was asked %d checks, want %d", got, tc.toStore)
			}
			if after.Hits-st.Hits != tc.hits || after.Misses-st.Misses != tc.misses {
				t.Errorf("hits +%d, misses +%d; want +%d, +%d", after.Hits-st.Hits, after.Misses-st.Misses, tc.hits, tc.misses)
			}
		})
	}
}
