package admin

import (
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// BenchmarkObserverDescriptor is the admin observer's cost per decided
// descriptor (rates and heavy hitters), from parallel goroutines, over
// 10,000 distinct descriptors, a tenth of them denied.
func BenchmarkObserverDescriptor(b *testing.B) {
	o := NewObserver(hitters.New(hitters.Options{}), nil)
	rules := []limit.Rule{{Name: "per_user", Algorithm: limit.FixedWindow, Unit: limit.Minute, Limit: 10}}
	entries := make([][]descriptor.Entry, 10000)
	for i := range entries {
		entries[i] = []descriptor.Entry{{Key: "user", Value: "user-" + strconv.Itoa(i)}}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			ev := service.DescriptorEvent{Domain: "api", Entries: entries[i%len(entries)], Outcome: service.OutcomeOK,
				Cost: limit.Cost{N: 1}, Rules: rules, Decision: limit.Decision{Allowed: true, Outcomes: []limit.Outcome{{Allowed: true}}}}
			if i%10 == 0 {
				ev.Outcome, ev.Decision.Allowed = service.OutcomeOverLimit, false
			}
			o.Descriptor(ev)
		}
	})
}
