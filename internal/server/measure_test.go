package server

import (
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

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
