package redis

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// BenchmarkDecide measures one Decide of one check of three rules against
// a local redis-server, from parallel callers. It is for profiling and
// allocation counts; docs/benchmarks.md holds the load benchmark's numbers.
func BenchmarkDecide(b *testing.B) {
	srv := redistest.Standalone(b)
	be := newBackend(b, Options{URL: srv.Addr(), KeyPrefix: "bench:"})
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("bench|user=%d", n.Add(1))
		checks := []backend.Check{{Identity: id, Rules: threeRules, Cost: limit.Cost{N: 1}}}
		for pb.Next() {
			if r := be.Decide(context.Background(), checks); r[0].Err != nil {
				b.Fatal(r[0].Err)
			}
		}
	})
}
