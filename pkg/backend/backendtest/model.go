package backendtest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// modelSteps is how many Decide calls testModel makes per seed.
const modelSteps = 400

// testModel drives random traffic (costs, peeks, refunds, odd clock steps,
// batches over several identities, rule sets that share state IDs with
// different limits) and compares every Decision with pkg/limit's, to the
// microsecond. It is the test that keeps a backend's own arithmetic (the
// Lua scripts) bit for bit equal to the Go.
func (s *suite) testModel(t *testing.T) {
	kathmandu, err := time.LoadLocation("Asia/Kathmandu")
	if err != nil {
		t.Fatalf("load zone: %v", err)
	}
	ruleSets := [][]limit.Rule{
		{{Unit: limit.Second, Multiplier: 10, Limit: 7}},
		{{Algorithm: limit.SlidingWindow, Unit: limit.Second, Multiplier: 10, Limit: 7}},
		{{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 13}},
		{{Algorithm: limit.SlidingLog, Unit: limit.Second, Multiplier: 10, Limit: 7}},
		{{Algorithm: limit.TokenBucket, Unit: limit.Second, Multiplier: 7, Limit: 3, Burst: 5}},
		{{Algorithm: limit.LeakyBucket, Unit: limit.Minute, Limit: 7}},
		{{Algorithm: limit.GCRA, Unit: limit.Second, Limit: 3, Burst: 2}},
		{{Unit: limit.Hour, Multiplier: 2, Limit: 20, Location: kathmandu}},
		// Same state IDs as above with other limits, mixed together.
		{
			{Unit: limit.Second, Multiplier: 10, Limit: 4},
			{Algorithm: limit.SlidingWindow, Unit: limit.Second, Multiplier: 10, Limit: 9},
			{Algorithm: limit.SlidingLog, Unit: limit.Second, Multiplier: 10, Limit: 5},
			{Algorithm: limit.TokenBucket, Unit: limit.Second, Multiplier: 7, Limit: 6, Burst: 2},
			{Algorithm: limit.GCRA, Unit: limit.Second, Limit: 1},
		},
		{
			{Algorithm: limit.LeakyBucket, Unit: limit.Minute, Limit: 11, Burst: 3},
			{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 5},
			{Unit: limit.Hour, Multiplier: 2, Limit: 6, Location: kathmandu},
		},
	}
	costs := []uint64{0, 1, 1, 1, 1, 2, 3, 6}
	steps := []time.Duration{0, 0, time.Microsecond, 333 * time.Millisecond, 1700 * time.Millisecond,
		4*time.Second + 999_999*time.Microsecond, 13 * time.Second, 61 * time.Second, 17 * time.Minute}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			e := s.env(t, base.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
			ids := []string{e.id("a"), e.id("b"), e.id("c")}
			for step := range modelSteps {
				e.wait(steps[rng.IntN(len(steps))])
				// One to three checks, each on its own identity.
				order := rng.Perm(len(ids))[:1+rng.IntN(len(ids))]
				checks := make([]backend.Check, len(order))
				for i, k := range order {
					c := backend.Check{Identity: ids[k], Rules: ruleSets[rng.IntN(len(ruleSets))]}
					c.Cost.N = costs[rng.IntN(len(costs))]
					c.Cost.Refund = rng.IntN(8) == 0
					checks[i] = c
				}
				e.decide(fmt.Sprintf("seed %d step %d", seed, step), checks...)
				if t.Failed() {
					return // the first difference is the useful one
				}
			}
		})
	}
}
