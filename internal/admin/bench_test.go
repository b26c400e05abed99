package admin

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// BenchmarkObserverDescriptor is the admin observer's cost per decided
// descriptor (rates and heavy hitters), from parallel goroutines, a tenth
// of the descriptors denied, drawn from 10,000 distinct descriptors:
//
//   - uniform: each equally likely, what an attack from many addresses
//     looks like (nearly every one unmonitored in every summary);
//   - zipf: zipf-skewed (s = 1.1), a few heavy descriptors and a long tail.
func BenchmarkObserverDescriptor(b *testing.B) {
	const distinct = 10_000
	rules := []limit.Rule{{Name: "per_user", Algorithm: limit.FixedWindow, Unit: limit.Minute, Limit: 10}}
	outcomes := []limit.Outcome{{Allowed: true}} // shared, so that the loop allocates nothing itself
	entries := make([][]descriptor.Entry, distinct)
	for i := range entries {
		entries[i] = []descriptor.Entry{{Key: "user", Value: "user-" + strconv.Itoa(i)}}
	}
	// Fixed pseudo-random orders, so that every run sees the same streams
	// and the generator costs nothing inside the loop.
	rng := rand.New(rand.NewPCG(1, 2))
	uniform, zipf := make([]int, 1<<16), make([]int, 1<<16)
	z := rand.NewZipf(rng, 1.1, 1, distinct-1)
	for i := range uniform {
		uniform[i], zipf[i] = rng.IntN(distinct), int(z.Uint64())
	}
	for _, bc := range []struct {
		name  string
		order []int
	}{{"uniform", uniform}, {"zipf", zipf}} {
		b.Run(bc.name, func(b *testing.B) {
			o := NewObserver(hitters.New(hitters.Options{}), nil)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(len(bc.order))
				for pb.Next() {
					i++
					ev := service.DescriptorEvent{Domain: "api", Entries: entries[bc.order[i&(len(bc.order)-1)]], Outcome: service.OutcomeOK,
						Cost: limit.Cost{N: 1}, Rules: rules, Decision: limit.Decision{Allowed: true, Outcomes: outcomes}}
					if i%10 == 0 {
						ev.Outcome, ev.Decision.Allowed = service.OutcomeOverLimit, false
					}
					o.Descriptor(ev)
				}
			})
		})
	}
}
