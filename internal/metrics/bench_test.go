package metrics

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// hot holds the events a busy service reports most: admitted and denied
// descriptors with named rules, a detailed_metric descriptor whose label is
// already known, and a request.
type hot struct {
	ok, over, detailed service.DescriptorEvent
	req                service.RequestEvent
}

// hotEvents returns the hot events.
func hotEvents() hot {
	rules := []limit.Rule{
		{Name: "burst", Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 10, Burst: 30},
		{Name: "hourly", Unit: limit.Hour, Limit: 1000},
	}
	admitted := limit.Decision{Allowed: true, Binding: 0, Outcomes: []limit.Outcome{{Allowed: true, Remaining: 20}, {Allowed: true, Remaining: 900}}}
	denied := limit.Decision{Allowed: false, Binding: 0, Outcomes: []limit.Outcome{{Allowed: false}, {Allowed: true, Remaining: 900}}}
	entries := []descriptor.Entry{{Key: "user", Value: "alice"}}
	var h hot
	h.ok = service.DescriptorEvent{Domain: "api", Entries: entries, Outcome: service.OutcomeOK, Cost: limit.Cost{N: 1}, Rules: rules, Decision: admitted}
	h.over = h.ok
	h.over.Outcome, h.over.Decision = service.OutcomeOverLimit, denied
	h.detailed = h.ok
	h.detailed.Node = &descriptor.Node{Key: "user", Depth: 1, DetailedMetric: true}
	h.req = service.RequestEvent{Domain: "api"}
	return h
}

// benchObserve reports allocations and runs observe in a loop, on fresh
// Metrics, with the hot events.
func benchObserve(b *testing.B, observe func(m *Metrics, h *hot)) {
	m := newBenchMetrics(b)
	h := hotEvents()
	b.ReportAllocs()
	for b.Loop() {
		observe(m, &h)
	}
}

func newBenchMetrics(tb testing.TB) *Metrics {
	m, _ := newRegistered(tb, Options{})
	return m
}

// TestObserverDoesNotAllocate holds the Observer's hot path to zero
// allocations once a domain's and its rules' counters exist.
func TestObserverDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	m := newBenchMetrics(t)
	h := hotEvents()
	allocs := testing.AllocsPerRun(200, func() {
		m.Descriptor(h.ok)
		m.Descriptor(h.over)
		m.Descriptor(h.detailed)
		m.Request(h.req)
	})
	if allocs != 0 {
		t.Errorf("the Observer allocates %v times per run, want 0", allocs)
	}
}

func BenchmarkDescriptorOK(b *testing.B) {
	m := newBenchMetrics(b)
	h := hotEvents()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Descriptor(h.ok)
		}
	})
}

func BenchmarkDescriptorOverLimit(b *testing.B) {
	benchObserve(b, func(m *Metrics, h *hot) { m.Descriptor(h.over) })
}

func BenchmarkDescriptorDetailed(b *testing.B) {
	benchObserve(b, func(m *Metrics, h *hot) { m.Descriptor(h.detailed) })
}

func BenchmarkRequest(b *testing.B) {
	benchObserve(b, func(m *Metrics, h *hot) { m.Request(h.req) })
}

// BenchmarkService measures a whole ShouldRateLimit call on the memory
// backend with and without the metrics (Observer and backend decorator),
// so the difference is the cost of the metrics per call.
func BenchmarkService(b *testing.B) {
	const yaml = `
domain: api
descriptors:
  - key: user
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 1000000000, burst: 1000000000}
      - {name: hourly, unit: hour, requests_per_unit: 1000000000}
`
	for _, withMetrics := range []bool{false, true} {
		name := "without"
		if withMetrics {
			name = "with"
		}
		b.Run(name+"_metrics", func(b *testing.B) {
			mem := memory.New(memory.Options{SweepInterval: -1})
			defer mem.Close()
			so := service.Options{Backend: mem, Logger: stacktest.QuietLogger()}
			if withMetrics {
				m := newBenchMetrics(b)
				so.Backend, so.Observer = m.InstrumentBackend(mem), m
			}
			svc := service.New(so)
			svc.SetConfig(parseConfig(b, yaml))
			req := rq("api", d("user", "alice"), d("unknown", "x"))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
