package server

import (
	"bytes"
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// rawDeadline bounds every raw HTTP/2 connection of these tests.
const rawDeadline = 20 * time.Second

// shouldRateLimit is the full method name of the rate-limit call.
const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// rawConn is a client speaking raw HTTP/2 to the gRPC listener: it opens
// streams without honouring the server's settings, as a hostile client
// would, and records what the server answers.
type rawConn struct {
	nc  net.Conn
	fr  *http2.Framer
	wmu sync.Mutex // orders writes of the test and of the reader's acks

	mu       sync.Mutex
	settings map[http2.SettingID]uint32 // the server's first SETTINGS
	resets   map[http2.ErrCode]int      // RST_STREAMs by code
	statuses map[string]int             // grpc-status of streams the server ended, by value
	closed   bool                       // the server closed the connection
	goaways  int                        // GOAWAY frames
	changed  chan struct{}              // signalled on every frame recorded
	next     uint32                     // next stream id
}

// dialPreface connects to addr (closed at cleanup) and sends the client
// preface and empty SETTINGS, all within rawDeadline.
func dialPreface(t *testing.T, addr string) (net.Conn, *http2.Framer) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, rawDeadline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(rawDeadline))
	fr := http2.NewFramer(nc, nc)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return nc, fr
}

// dialRaw connects to addr as dialPreface does, and reads the server's
// frames in the background until the connection closes (at cleanup at
// the latest).
func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, fr := dialPreface(t, addr)
	c := &rawConn{nc: nc, fr: fr, resets: map[http2.ErrCode]int{},
		statuses: map[string]int{}, changed: make(chan struct{}, 1), next: 1}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	go c.read()
	c.waitFor(t, "the server's SETTINGS", func() bool { return c.settings != nil })
	return c
}

func (c *rawConn) write(f func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return f()
}

// read records the server's frames until the connection ends.
func (c *rawConn) read() {
	defer c.record(func() { c.closed = true })
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			got := map[http2.SettingID]uint32{}
			f.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
			c.record(func() {
				if c.settings == nil {
					c.settings = got
				}
			})
			c.write(func() error { return c.fr.WriteSettingsAck() })
		case *http2.PingFrame:
			if !f.IsAck() {
				c.write(func() error { return c.fr.WritePing(true, f.Data) })
			}
		case *http2.RSTStreamFrame:
			c.record(func() { c.resets[f.ErrCode]++ })
		case *http2.GoAwayFrame:
			c.record(func() { c.goaways++ })
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" && f.StreamEnded() {
					c.record(func() { c.statuses[hf.Value]++ })
				}
			}
		}
	}
}

func (c *rawConn) record(f func()) {
	c.mu.Lock()
	f()
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// waitFor waits, up to rawDeadline, until cond (run under c.mu) holds.
func (c *rawConn) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(rawDeadline)
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.changed:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// open starts n streams of method with only their headers (extra are
// more header fields, name then value): no request, no end of stream. A
// server that admits them holds each open until the connection closes.
func (c *rawConn) open(t *testing.T, n int, method string, extra ...string) {
	t.Helper()
	fields := append([]string{":method", "POST", ":scheme", "http", ":authority", "raw", ":path", method,
		"content-type", "application/grpc", "te", "trailers"}, extra...)
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	block := b.Bytes()
	for range n {
		id := c.next
		c.next += 2
		err := c.write(func() error {
			first, rest := block, []byte(nil)
			if len(first) > 16384 { // the largest frame the server accepts by default
				first, rest = block[:16384], block[16384:]
			}
			if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: rest == nil}); err != nil {
				return err
			}
			for len(rest) > 0 {
				chunk := rest[:min(len(rest), 16384)]
				rest = rest[len(chunk):]
				if err := c.fr.WriteContinuation(id, len(rest) == 0, chunk); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The server advertises its per-connection stream bound and its header
// list bound in its SETTINGS, and leaves out what has no bound (gRPC's
// defaults: unbounded streams, 16 MiB of headers not advertised).
func TestGRPCLimitsAdvertised(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		limits                 GRPCLimits
		streams, headers       uint32
		hasStreams, hasHeaders bool
	}{
		{name: "no bounds", limits: GRPCLimits{}},
		{name: "both bounds", limits: GRPCLimits{MaxConcurrentStreams: 7, MaxHeaderListBytes: 4096},
			streams: 7, headers: 4096, hasStreams: true, hasHeaders: true},
		{name: "the binary's defaults", limits: GRPCLimits{MaxConcurrentStreams: DefaultGRPCMaxConcurrentStreams, MaxHeaderListBytes: DefaultGRPCMaxHeaderListBytes},
			streams: 1024, headers: 65536, hasStreams: true, hasHeaders: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t, testConfig, Options{GRPCLimits: tc.limits}, nil)
			c := dialRaw(t, st.srv.GRPCAddr())
			c.mu.Lock()
			defer c.mu.Unlock()
			v, ok := c.settings[http2.SettingMaxConcurrentStreams]
			if ok != tc.hasStreams || v != tc.streams {
				t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v), want %d (sent: %v)", v, ok, tc.streams, tc.hasStreams)
			}
			v, ok = c.settings[http2.SettingMaxHeaderListSize]
			if ok != tc.hasHeaders || v != tc.headers {
				t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE = %d (sent: %v), want %d (sent: %v)", v, ok, tc.headers, tc.hasHeaders)
			}
		})
	}
}

// A client that ignores the stream bound and opens many streams that it
// never finishes has the streams beyond the bound refused
// (REFUSED_STREAM, safe to retry) at once: the server's goroutines stay
// bounded, and other connections are served.
func TestGRPCStreamFloodRefused(t *testing.T) {
	const bound, flood = 16, 2000
	st := newStack(t, testConfig, Options{GRPCLimits: GRPCLimits{MaxConcurrentStreams: bound}}, nil)
	before := runtime.NumGoroutine()
	c := dialRaw(t, st.srv.GRPCAddr())
	c.open(t, bound+flood, shouldRateLimit)
	c.waitFor(t, "the streams beyond the bound refused", func() bool { return c.resets[http2.ErrCodeRefusedStream] >= flood })
	c.mu.Lock()
	refused, closed := c.resets[http2.ErrCodeRefusedStream], c.closed
	c.mu.Unlock()
	if refused != flood || closed {
		t.Errorf("refused %d streams (connection closed: %v), want %d refused on an open connection", refused, closed, flood)
	}
	// The held streams each have a goroutine waiting for a request; the
	// refused ones have none. Allow some slack for the runtime's own.
	if grown := runtime.NumGoroutine() - before; grown > bound+32 {
		t.Errorf("goroutines grew by %d for %d held and %d refused streams, want at most %d", grown, bound, flood, bound+32)
	}
	// Another connection is served.
	resp, err := rlsv3.NewRateLimitServiceClient(st.conn(t)).ShouldRateLimit(context.Background(), request("api", "k", "v"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("call on another connection: %v %v", resp.GetOverallCode(), err)
	}
}

// A call whose headers exceed MaxHeaderListBytes never reaches the
// service: headers that add up beyond the bound have their stream reset
// (FRAME_SIZE_ERROR); a single field longer than the bound cannot even be
// decoded, and the connection is closed; headers that add up beyond it
// only with a `trailer` field, which HTTP/2's decoder counts apart, are
// answered ResourceExhausted. Other connections are served.
func TestGRPCHeaderListBound(t *testing.T) {
	const bound = 4096
	many := []string{}
	for i := range 8 {
		many = append(many, fmt.Sprintf("x-part-%d", i), strings.Repeat("a", 1000))
	}
	const (
		reset  = "reset"
		closed = "closed"
	)
	for _, tc := range []struct {
		name   string
		fields []string
		want   string // reset, closed, or the grpc-status of the answer
	}{
		{name: "fields adding up beyond the bound", fields: many, want: reset},
		{name: "one field beyond the bound", fields: []string{"x-big", strings.Repeat("a", 2*bound)}, want: closed},
		// Each part within the bound, together over it.
		{name: "fields and a trailer field adding up beyond the bound",
			fields: append(slices.Clone(many[:6]), "trailer", strings.Repeat("a", 3000)), want: "8"},
		{name: "a trailer field beyond the bound", fields: []string{"trailer", strings.Repeat("a", 2*bound)}, want: closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t, testConfig, Options{GRPCLimits: GRPCLimits{MaxHeaderListBytes: bound}}, nil)
			c := dialRaw(t, st.srv.GRPCAddr())
			c.open(t, 1, shouldRateLimit, tc.fields...)
			c.waitFor(t, "the oversized call ended", func() bool { return len(c.resets) > 0 || len(c.statuses) > 0 || c.closed })
			c.mu.Lock()
			var got string
			switch {
			case c.resets[http2.ErrCodeFrameSize] == 1 && len(c.statuses) == 0:
				got = reset
			case c.closed && c.resets[http2.ErrCodeFrameSize] != 1 && len(c.statuses) == 0:
				got = closed
			case len(c.statuses) == 1:
				for v := range c.statuses {
					got = v
				}
			default:
				got = fmt.Sprintf("resets %v, statuses %v, closed %v", c.resets, c.statuses, c.closed)
			}
			c.mu.Unlock()
			if got != tc.want {
				t.Errorf("the call ended %s, want %s", got, tc.want)
			}
			resp, err := rlsv3.NewRateLimitServiceClient(st.conn(t)).ShouldRateLimit(context.Background(), request("api", "k", "v"))
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("a call with small headers: %v %v", resp.GetOverallCode(), err)
			}
		})
	}
}

// bufferLogger is a logger writing text lines into a buffer safe to read
// while the server writes.
func bufferLogger() (*logrus.Logger, *testenv.SyncBuffer) {
	buf := &testenv.SyncBuffer{}
	l := logrus.New()
	l.SetOutput(buf)
	return l, buf
}

// Beyond MaxInFlight calls open across all connections, a call is
// answered ResourceExhausted at once (503 on /json), counted, and logged;
// the health service still answers from its reserve; once the held calls
// end, calls are answered again.
func TestGRPCMaxInFlight(t *testing.T) {
	const bound = 4
	log, logs := bufferLogger()
	st := newStack(t, testConfig, Options{GRPCLimits: GRPCLimits{MaxInFlight: bound}, Logger: log}, nil)
	// Two connections hold two calls each: the bound is the process's,
	// not a connection's.
	var holders []*rawConn
	for range 2 {
		c := dialRaw(t, st.srv.GRPCAddr())
		c.open(t, bound/2, shouldRateLimit)
		holders = append(holders, c)
	}
	waitFor(t, "the held calls counted", func() bool { return st.srv.Load().InFlight == bound })

	client := rlsv3.NewRateLimitServiceClient(st.conn(t))
	_, err := client.ShouldRateLimit(context.Background(), request("api", "k", "v"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "SLUICE_MAX_IN_FLIGHT") {
		t.Fatalf("call beyond the bound: %v, want ResourceExhausted naming SLUICE_MAX_IN_FLIGHT", err)
	}
	if code, body := st.do(t, http.MethodPost, "/json", `{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`); code != http.StatusServiceUnavailable {
		t.Fatalf("/json beyond the bound: %d %s, want 503", code, body)
	}
	// Health is answered from its reserve, and says calls are being shed.
	h, err := healthpb.NewHealthClient(st.conn(t)).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health at the bound: %v %v, want NOT_SERVING from the reserve", h, err)
	}
	if got := st.srv.Load(); got.Shed != 2 || got.InFlight != bound || !got.Saturated {
		t.Fatalf("load %+v, want 2 shed and %d in flight", got, bound)
	}
	if out := logs.String(); strings.Count(out, "calls in flight at their bound") != 1 || !strings.Contains(out, fmt.Sprintf("max_in_flight=%d", bound)) {
		t.Fatalf("log: want one throttled warning with the bound, got:\n%s", out)
	}

	for _, c := range holders {
		c.nc.Close()
	}
	waitFor(t, "the held calls released", func() bool { return st.srv.Load().InFlight == 0 })
	resp, err := client.ShouldRateLimit(context.Background(), request("api", "k", "v"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("call after the held ones ended: %v %v", resp.GetOverallCode(), err)
	}
	if l := st.srv.Load(); l.InFlight != 0 || l.Saturated {
		t.Fatalf("after every call ended: %+v, want none in flight, not saturated", l)
	}
	h, err = healthpb.NewHealthClient(st.conn(t)).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after the held calls ended: %v %v, want SERVING", h, err)
	}
}

// A flood of streams over many connections, each within its connection's
// stream bound, is held to MaxInFlight over the process: the streams
// beyond it are answered ResourceExhausted, and the goroutines stay
// bounded by the bound, not by the flood.
func TestGRPCInFlightFloodBounded(t *testing.T) {
	const bound, conns, perConn = 32, 8, 200
	st := newStack(t, testConfig, Options{GRPCLimits: GRPCLimits{MaxInFlight: bound}}, nil)
	before := runtime.NumGoroutine()
	var cs []*rawConn
	for range conns {
		c := dialRaw(t, st.srv.GRPCAddr())
		c.open(t, perConn, shouldRateLimit)
		cs = append(cs, c)
	}
	waitFor(t, "every stream held or shed", func() bool {
		l := st.srv.Load()
		return l.InFlight+int64(l.Shed) == conns*perConn
	})
	shed := 0
	waitFor(t, "the clients to read every ResourceExhausted", func() bool {
		shed = 0
		for _, c := range cs {
			c.mu.Lock()
			shed += c.statuses[fmt.Sprint(int(codes.ResourceExhausted))]
			c.mu.Unlock()
		}
		return shed >= conns*perConn-bound
	})
	if l := st.srv.Load(); l.InFlight != bound || int(l.Shed) != conns*perConn-bound || shed != int(l.Shed) {
		t.Errorf("load %+v, clients saw %d ResourceExhausted; want %d in flight, %d shed", l, shed, bound, conns*perConn-bound)
	}
	// Per connection: a reader, a writer and a keepalive goroutine; per
	// held call, one.
	if grown, most := runtime.NumGoroutine()-before, bound+4*conns+32; grown > most {
		t.Errorf("goroutines grew by %d for %d streams, want at most %d", grown, conns*perConn, most)
	}
}

// Connections beyond MaxConnections are closed at once, counted, and
// logged; the listener accepts again once one closes.
func TestGRPCConnectionLimit(t *testing.T) {
	log, logs := bufferLogger()
	st := newStack(t, testConfig, Options{GRPCLimits: GRPCLimits{MaxConnections: 2}, Logger: log}, nil)
	held := []*rawConn{dialRaw(t, st.srv.GRPCAddr()), dialRaw(t, st.srv.GRPCAddr())}
	extra, err := net.Dial("tcp", st.srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if took, closed := closedWithin(t, extra, 2*time.Second); !closed {
		t.Fatalf("third connection still open after %v with MaxConnections 2", took)
	}
	if l := st.srv.Load(); l.ConnectionsRefused != 1 || l.Connections != 2 {
		t.Fatalf("load %+v, want 2 open and 1 refused", l)
	}
	// The warning follows the close.
	waitFor(t, "the warning", func() bool { return strings.Contains(logs.String(), "gRPC listener at its connection limit") })
	held[0].nc.Close()
	waitFor(t, "the closed connection released", func() bool { return st.srv.Load().Connections == 1 })
	dialRaw(t, st.srv.GRPCAddr()) // gets the server's SETTINGS: accepted
}

// BenchmarkInFlightSlot is what counting a unary call against MaxInFlight
// adds to it: the tap's admission and release registration, and the
// interceptor's release, around a stream context as gRPC makes one; with
// a request timeout, its timer too.
func BenchmarkInFlightSlot(b *testing.B) {
	info := &tap.Info{FullMethodName: shouldRateLimit}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, tc := range []struct {
		name           string
		counted, timed bool
	}{{"counted=false", false, false}, {"counted=true", true, false}, {"counted=true,timed", true, true}} {
		s := &Server{}
		s.inflight.max = 1 << 30
		if tc.timed {
			s.calls.timeout = time.Minute
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				if tc.counted {
					ctx, _ = s.tapInFlight(ctx, info)
					handler(ctx, nil)
					c := callOf(ctx)
					c.received()
					c.end()
				} else {
					handler(ctx, nil)
				}
				cancel()
			}
			if n := s.inflight.n.Load(); n != 0 {
				b.Fatalf("%d slots held after every call returned", n)
			}
		})
	}
}

// Every way a call ends gives its in-flight slot back: answered, failed
// by a panic (answered Internal), or its stream reset by the client
// before the request came. With a bound of 1, each next call is served.
func TestGRPCInFlightSlotsGivenBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, st *stack)
	}{
		{"answered", func(t *testing.T, st *stack) {
			if _, err := rlsv3.NewRateLimitServiceClient(st.conn(t)).ShouldRateLimit(context.Background(), request("api", "k", "v")); err != nil {
				t.Fatal(err)
			}
		}},
		{"panicked", func(t *testing.T, st *stack) {
			_, err := rlsv3.NewRateLimitServiceClient(st.conn(t)).ShouldRateLimit(context.Background(), request("api", "panic", "v"))
			if status.Code(err) != codes.Internal {
				t.Fatalf("panicking call: %v, want Internal", err)
			}
		}},
		{"reset before its request", func(t *testing.T, st *stack) {
			c := dialRaw(t, st.srv.GRPCAddr())
			c.open(t, 1, shouldRateLimit)
			waitFor(t, "the call held", func() bool { return st.srv.Load().InFlight == 1 })
			if err := c.write(func() error { return c.fr.WriteRSTStream(1, http2.ErrCodeCancel) }); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, _ := bufferLogger()
			st := newStack(t, testConfig, Options{GRPCLimits: GRPCLimits{MaxInFlight: 1}, Logger: log}, func(svc rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceServer {
				return panicOn{svc}
			})
			tc.end(t, st)
			waitFor(t, "the slot given back", func() bool { return st.srv.Load().InFlight == 0 })
			if _, err := rlsv3.NewRateLimitServiceClient(st.conn(t)).ShouldRateLimit(context.Background(), request("api", "k", "w")); err != nil {
				t.Fatalf("next call: %v", err)
			}
			if shed := st.srv.Load().Shed; shed != 0 {
				t.Fatalf("%d calls shed, want none", shed)
			}
		})
	}
}

// panicOn panics in ShouldRateLimit when the first entry's key is
// "panic", and otherwise asks the service it wraps.
type panicOn struct{ rlsv3.RateLimitServiceServer }

func (p panicOn) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDescriptors()[0].GetEntries()[0].GetKey() == "panic" {
		panic("boom")
	}
	return p.RateLimitServiceServer.ShouldRateLimit(ctx, req)
}

// A connection with no call open for MaxConnectionIdle is sent a GOAWAY
// and closed; one holding a call is not idle and stays. (The bound is a
// second so that the busy connection opens its call well within it.)
func TestGRPCIdleConnectionClosed(t *testing.T) {
	st := newStack(t, testConfig, Options{GRPCLimits: GRPCLimits{MaxConnectionIdle: time.Second}}, nil)
	busy := dialRaw(t, st.srv.GRPCAddr())
	busy.open(t, 1, shouldRateLimit)
	idle := dialRaw(t, st.srv.GRPCAddr())
	idle.waitFor(t, "the idle connection closed", func() bool { return idle.closed })
	idle.mu.Lock()
	goaways := idle.goaways
	idle.mu.Unlock()
	busy.mu.Lock()
	defer busy.mu.Unlock()
	if goaways == 0 || busy.closed || busy.goaways != 0 {
		t.Fatalf("idle connection: %d GOAWAY; busy connection: closed %v, %d GOAWAY; want the idle one sent away, the busy one kept",
			goaways, busy.closed, busy.goaways)
	}
}
