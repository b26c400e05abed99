package metrics

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// hotEvents are the events a busy service reports most: admitted and
// denied descriptors with named rules, a request, and a detailed_metric
// descriptor whose label is already known.
func hotEvents() (ok, over, detailed service.DescriptorEvent, req service.RequestEvent) {
	rules := []limit.Rule{
		{Name: "burst", Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 10, Burst: 30},
		{Name: "hourly", Unit: limit.Hour, Limit: 1000},
	}
	admitted := limit.Decision{Allowed: true, Binding: 0, Outcomes: []limit.Outcome{{Allowed: true, Remaining: 20}, {Allowed: true, Remaining: 900}}}
	denied := limit.Decision{Allowed: false, Binding: 0, Outcomes: []limit.Outcome{{Allowed: false}, {Allowed: true, Remaining: 900}}}
	entries := []descriptor.Entry{{Key: "user", Value: "alice"}}
	ok = service.DescriptorEvent{Domain: "api", Entries: entries, Outcome: service.OutcomeOK, Cost: limit.Cost{N: 1}, Rules: rules, Decision: admitted}
	over = ok
	over.Outcome, over.Decision = service.OutcomeOverLimit, denied
	detailed = ok
	detailed.Node = &descriptor.Node{Key: "user", Depth: 1, DetailedMetric: true}
	req = service.RequestEvent{Domain: "api"}
	return
}

func newBenchMetrics(tb testing.TB) *Metrics {
	m, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// TestObserverDoesNotAllocate holds the Observer's hot path to zero
// allocations once a domain's and its rules' counters exist.
func TestObserverDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	m := newBenchMetrics(t)
	ok, over, detailed, req := hotEvents()
	allocs := testing.AllocsPerRun(200, func() {
		m.Descriptor(ok)
		m.Descriptor(over)
		m.Descriptor(detailed)
		m.Request(req)
	})
	if allocs != 0 {
		t.Errorf("the Observer allocates %v times per run, want 0", allocs)
	}
}

func BenchmarkDescriptorOK(b *testing.B) {
	m := newBenchMetrics(b)
	ok, _, _, _ := hotEvents()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Descriptor(ok)
		}
	})
}

func BenchmarkDescriptorOverLimit(b *testing.B) {
	m := newBenchMetrics(b)
	_, over, _, _ := hotEvents()
	b.ReportAllocs()
	for b.Loop() {
		m.Descriptor(over)
	}
}

func BenchmarkDescriptorDetailed(b *testing.B) {
	m := newBenchMetrics(b)
	_, _, detailed, _ := hotEvents()
	b.ReportAllocs()
	for b.Loop() {
		m.Descriptor(detailed)
	}
}

func BenchmarkRequest(b *testing.B) {
	m := newBenchMetrics(b)
	_, _, _, req := hotEvents()
	b.ReportAllocs()
	for b.Loop() {
		m.Request(req)
	}
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
