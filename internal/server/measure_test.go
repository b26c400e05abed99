package server

import (
	"context"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
)

// TestMeasureGRPCHoldings measures what a gRPC connection and a held call
// cost the server: heap and stack in use, and goroutines, per idle
// connection and per call whose headers came and whose request never
// does. Client and server share the process, so the figures include the
// raw client's small share. It runs only with SLUICE_MEASURE=1:
//
//	SLUICE_MEASURE=1 go test -run TestMeasureGRPCHoldings -v ./internal/server/
func TestMeasureGRPCHoldings(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("a measurement: SLUICE_MEASURE=1")
	}
	const conns, calls = 2000, 2000
	inUse := func() (int64, int) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc + m.StackInuse), runtime.NumGoroutine()
	}
	settle := func() { time.Sleep(500 * time.Millisecond) } // let the server's goroutines start
	for round := range 6 {
		// Alternate gRPC's own write buffer per connection with one
		// shared between writes (grpc.SharedWriteBuffer).
		shared := round%2 == 1
		var opts Options
		if shared {
			opts.GRPCOptions = []grpc.ServerOption{grpc.SharedWriteBuffer(true)}
		}
		st := newStack(t, testConfig, opts, nil)
		b0, g0 := inUse()
		// Idle connections: the preface and the settings exchanged, then
		// nothing; the client keeps only the socket.
		var idle []net.Conn
		for range conns {
			idle = append(idle, dialIdle(t, st.srv.GRPCAddr()))
		}
		settle()
		b1, g1 := inUse()
		t.Logf("round %d (shared write buffer %v): idle connection: %.0f bytes, %.2f goroutines", round, shared,
			float64(b1-b0)/conns, float64(g1-g0)/conns)
		for _, hdr := range []int{0, 8000} {
			var extra []string
			if hdr > 0 {
				extra = []string{"x-pad", strings.Repeat("a", hdr)}
			}
			c := dialRaw(t, st.srv.GRPCAddr())
			h0, n0 := inUse()
			c.open(t, calls, shouldRateLimit, extra...)
			settle()
			h1, n1 := inUse()
			t.Logf("round %d: held call with %d bytes of extra headers: %.0f bytes, %.2f goroutines", round, hdr,
				float64(h1-h0)/calls, float64(n1-n0)/calls)
			c.nc.Close()
		}
		for _, c := range idle {
			c.Close()
		}
		if err := st.stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// dialIdle opens a gRPC connection that exchanges settings and then sends
// nothing, and returns its socket.
func dialIdle(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, fr := dialPreface(t, addr)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			return nc
		}
	}
}

// TestMeasureInFlightCost measures what counting the calls in flight
// (GRPCLimits.MaxInFlight) costs a call: CPU time of the process (client
// and server) per call, with and without the bound, in alternated rounds
// of 20,000 calls from 16 callers on one connection. It runs only with
// SLUICE_MEASURE=1:
//
//	SLUICE_MEASURE=1 go test -run TestMeasureInFlightCost -v ./internal/server/
func TestMeasureInFlightCost(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("a measurement: SLUICE_MEASURE=1")
	}
	const calls, callers, rounds = 20000, 16, 10
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	perCall := map[bool][]float64{}
	for round := range rounds {
		bounded := round%2 == 0
		var opts Options
		if bounded {
			opts.GRPCLimits.MaxInFlight = DefaultMaxInFlight
		}
		st := newStack(t, "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n", opts, nil)
		client := rlsv3.NewRateLimitServiceClient(st.conn(t))
		req := request("api", "k", "v")
		if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		begin := cpu()
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for range calls / callers {
					if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		perCall[bounded] = append(perCall[bounded], float64(cpu()-begin)/float64(time.Microsecond)/calls)
		if err := st.stop(); err != nil {
			t.Fatal(err)
		}
	}
	for _, bounded := range []bool{false, true} {
		v := perCall[bounded]
		slices.Sort(v)
		t.Logf("MaxInFlight set %v: median %.2f µs of CPU per call, rounds %.2f", bounded, v[len(v)/2], v)
	}
}
