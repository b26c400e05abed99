package redis

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// The benchmarks run against a local redis-server. They are for profiling,
// allocation counts and comparing settings side by side in one run;
// docs/benchmarks.md holds the load benchmark's numbers.

// BenchmarkDecide measures one Decide of one check of three rules from
// GOMAXPROCS parallel callers, each on its own descriptor (so, after the
// first few calls, mostly denials), with coalescing off and on.
func BenchmarkDecide(b *testing.B) {
	srv := redistest.Standalone(b)
	for _, co := range []bool{false, true} {
		b.Run(fmt.Sprintf("coalesce=%v", onOff(co)), func(b *testing.B) {
			be := newBackend(b, Options{URL: srv.Addr(), KeyPrefix: "bench:", DisableCoalescing: !co})
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
		})
	}
}

// Rules that always admit, so that every call runs the script's write path.
var (
	openRules1 = []limit.Rule{{Unit: limit.Second, Limit: 1 << 40}}
	openRules3 = []limit.Rule{
		{Name: "burst", Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 1 << 40, Burst: 1 << 41},
		{Name: "hourly", Algorithm: limit.SlidingWindow, Unit: limit.Hour, Limit: 1 << 40},
		{Name: "daily", Unit: limit.Day, Limit: 1 << 40},
	}
)

// BenchmarkDecideParallel measures Decide from 64 concurrent callers (like
// the in-flight requests of a loaded sluice: gRPC serves each on its own
// goroutine), one check each, of 1 or 3 always-admitting rules on 1000
// descriptors, with coalescing off and on. ns/op is wall time per Decide
// across all callers, so lower is more throughput; with 64 callers in a
// closed loop the mean latency of one Decide is 64 × ns/op. cmds/pipeline
// is the mean pipeline size. The callers=1 runs show what coalescing costs
// a lone caller (a hand-off to the goroutine that sends the pipeline).
func BenchmarkDecideParallel(b *testing.B) {
	srv := redistest.Standalone(b)
	for _, callers := range []int{1, 64} {
		for _, rules := range [][]limit.Rule{openRules1, openRules3} {
			for _, co := range []bool{false, true} {
				b.Run(fmt.Sprintf("callers=%d/rules=%d/coalesce=%s", callers, len(rules), onOff(co)), func(b *testing.B) {
					benchParallel(b, srv, Options{URL: srv.Addr(), DisableCoalescing: !co}, rules, callers)
				})
			}
		}
	}
}

// benchParallel runs callers concurrent callers deciding one check each
// against a backend built from opts, on srv. Besides wall time it reports
// the CPU time per Decide of this process (client-µs/op: all goroutines,
// the GC included) and of redis-server (redis-µs/op, from INFO cpu): on a
// machine shared with other work, wall time swings with their load while
// CPU time per operation barely moves.
func benchParallel(b *testing.B, srv *redistest.Server, opts Options, rules []limit.Rule, callers int) {
	var count batchCounter
	opts.KeyPrefix = "benchp:"
	opts.ObserveBatch = count.observe
	be := newBackend(b, opts)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("benchp|user=%d", i)
	}
	var seq atomic.Int64
	caller := func(next func() bool) {
		g := seq.Add(1)
		checks := []backend.Check{{Rules: rules, Cost: limit.Cost{N: 1}}}
		for i := 0; next(); i++ {
			checks[0].Identity = ids[(g*7919+int64(i))%int64(len(ids))]
			if r := be.Decide(context.Background(), checks); r[0].Err != nil || !r[0].Allowed {
				b.Fatalf("%+v", r[0])
			}
		}
	}
	b.ReportAllocs()
	client0, redis0 := cpuTimes(b, srv)
	b.ResetTimer()
	if callers == 1 {
		n := 0
		caller(func() bool { n++; return n <= b.N })
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((callers + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) { caller(pb.Next) })
	}
	b.StopTimer()
	client1, redis1 := cpuTimes(b, srv)
	if p := count.pipelines.Load(); p > 0 {
		b.ReportMetric(float64(count.cmds.Load())/float64(p), "cmds/pipeline")
	}
	b.ReportMetric(float64((client1-client0).Microseconds())/float64(b.N), "client-µs/op")
	b.ReportMetric(float64((redis1-redis0).Microseconds())/float64(b.N), "redis-µs/op")
}

// cpuTimes returns the CPU time (user and system) used so far by this
// process and by srv's redis-server.
func cpuTimes(b *testing.B, srv *redistest.Server) (client, server time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	info, err := srv.Client().Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			server += time.Duration(sec * float64(time.Second))
		}
	}
	return client, server
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// BenchmarkCoalesceSettings sweeps the coalescing settings (in-flight
// pipelines per node, window, limit) with the load of
// BenchmarkDecideParallel, three rules; it is how the defaults were chosen
// (docs/decisions/0010-coalescing.md).
func BenchmarkCoalesceSettings(b *testing.B) {
	srv := redistest.Standalone(b)
	for _, tt := range []struct {
		lanes  int
		window time.Duration
		limit  int
	}{
		{1, 0, 128}, {2, 0, 128}, {4, 0, 128}, {8, 0, 128}, {16, 0, 128},
		{4, 0, 16}, {4, 0, 32}, {4, 0, 64},
		{4, 50 * time.Microsecond, 128}, {4, 200 * time.Microsecond, 128}, {1, 200 * time.Microsecond, 128},
	} {
		for _, rules := range [][]limit.Rule{openRules1, openRules3} {
			b.Run(fmt.Sprintf("rules=%d/lanes=%d/window=%v/limit=%d", len(rules), tt.lanes, tt.window, tt.limit), func(b *testing.B) {
				benchParallel(b, srv, Options{URL: srv.Addr(), pipelineLanes: tt.lanes, PipelineWindow: tt.window, PipelineLimit: tt.limit}, rules, 64)
			})
		}
	}
}
