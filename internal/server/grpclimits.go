package server

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/sluice-rl/sluice/internal/logthrottle"
)

// Defaults of the binary for the fields of GRPCLimits (a zero field means
// no bound; see docs/decisions/0076-grpc-listener-bounds.md for the
// figures behind each number).
const (
	// DefaultGRPCMaxConcurrentStreams is the streams one connection may
	// have open, advertised in SETTINGS_MAX_CONCURRENT_STREAMS. Envoy
	// opens another connection when a connection reaches it, and gRPC
	// clients queue their calls: it spreads load, it never fails a call.
	DefaultGRPCMaxConcurrentStreams = 1024
	// DefaultGRPCMaxHeaderListBytes bounds a call's header list
	// (SETTINGS_MAX_HEADER_LIST_SIZE): Envoy's own bound on the headers it
	// accepts is 60 KiB; a rate-limit call's are a few hundred bytes.
	DefaultGRPCMaxHeaderListBytes = 64 << 10
	// DefaultGRPCMaxConnections bounds the gRPC listener's open
	// connections: each Envoy worker thread holds one or a few.
	DefaultGRPCMaxConnections = 16384
	// DefaultGRPCMaxConnectionsPerAddress bounds one remote address's
	// gRPC connections: a quarter of DefaultGRPCMaxConnections. An Envoy
	// holds one per worker thread.
	DefaultGRPCMaxConnectionsPerAddress = DefaultGRPCMaxConnections / 4
	// DefaultMaxInFlight bounds the calls being received or answered at
	// once, over all connections, gRPC and /json.
	DefaultMaxInFlight = 10000
	// DefaultMaxInFlightPerConnection is the calls of MaxInFlight one
	// connection may hold: a tenth, so that one client (or a few) cannot
	// take them all. An Envoy worker holds a few calls on its connection
	// at once, a few hundred when Redis is slow.
	DefaultMaxInFlightPerConnection = 1000
	// DefaultGRPCRequestTimeout bounds the wait for a call's request
	// message after its headers: Envoy sends both at once.
	DefaultGRPCRequestTimeout = 5 * time.Second
	// DefaultGRPCMaxEarlyResetsPerSecond bounds the calls one connection
	// may reset before their request message, per second.
	DefaultGRPCMaxEarlyResetsPerSecond = 100
	// DefaultGRPCMaxConnectionIdle closes a gRPC connection that has had
	// no call for this long: Envoy's own default idle timeout for its
	// upstream connections.
	DefaultGRPCMaxConnectionIdle = time.Hour
)

// healthReserve is how many calls of the gRPC health service may run
// beyond MaxInFlight, so that an overloaded instance still answers its
// probes (a liveness probe that fails restarts a pod that is only busy).
const healthReserve = 64

// healthPrefix starts the full method names of the gRPC health service.
const healthPrefix = "/grpc.health.v1.Health/"

// GRPCLimits bound what clients can hold on the gRPC listener, so that no
// client, however it behaves, makes the process take memory or goroutines
// without end. A zero field means no bound (gRPC's own behaviour).
type GRPCLimits struct {
	// MaxConcurrentStreams bounds the open streams (calls) of one
	// connection; it is advertised to the client, and a stream the client
	// opens beyond it anyway is reset with REFUSED_STREAM.
	MaxConcurrentStreams uint32
	// MaxHeaderListBytes bounds the headers of one call (HTTP/2's size:
	// names, values and 32 bytes per field); it is advertised to the
	// client, and a call whose headers are larger is reset. Zero keeps
	// gRPC's own bound, 16 MiB.
	MaxHeaderListBytes uint32
	// MaxConnections bounds the open gRPC connections. A connection
	// accepted beyond it is closed at once, and a warning is logged when
	// the listener reaches the bound.
	MaxConnections int
	// MaxConnectionsPerAddress bounds the open connections of one remote
	// IP address; with it, the last sixteenth of MaxConnections is kept
	// for addresses that hold fewer than four, so that a gRPC health prober is
	// answered whatever other clients hold. 0 means no such bound.
	MaxConnectionsPerAddress int
	// MaxConnectionIdle closes, with a GOAWAY, a connection that has had
	// no call open for this long, so that idle connections do not hold
	// MaxConnections' places (nor memory) for ever.
	MaxConnectionIdle time.Duration
	// MaxInFlight bounds the calls open at once across all connections:
	// gRPC calls of any method from their headers to their answer, and
	// /json decisions. A gRPC call beyond it is answered at once, before
	// its request is read, with ResourceExhausted; a /json request with
	// 503. The health service has a small reserve beyond it. While calls
	// are shed for it, gRPC health answers NOT_SERVING, until the calls
	// open are back to three quarters of it.
	MaxInFlight int
	// MaxInFlightPerConnection bounds the calls one gRPC connection may
	// hold of MaxInFlight (health calls apart), so that no client takes
	// every slot; a call beyond it is answered ResourceExhausted at once.
	// It counts only with MaxInFlight; 0 means no bound of its own.
	MaxInFlightPerConnection int
	// MaxEarlyResetsPerSecond bounds, per connection and second, the calls
	// that end before their request message arrives (reset by the
	// client: HTTP/2's rapid reset). A connection that passes it is
	// closed. Envoy sends a call's message with its headers, so its calls
	// never count. 0 means no bound.
	MaxEarlyResetsPerSecond int
	// RequestTimeout bounds the time from a call's headers to its request
	// message: a call whose message has not arrived by then is cancelled
	// (its stream reset) and its slot of MaxInFlight given back, counted
	// in Load().RequestTimeouts. Envoy sends the message with the
	// headers. 0 means no bound: a client may hold a call open for ever.
	RequestTimeout time.Duration
}

// Load is what the server's bounds see now.
type Load struct {
	// InFlight is the calls open now (0 when MaxInFlight is 0: nothing
	// counts them).
	InFlight int64
	// Shed counts the calls answered ResourceExhausted (or 503 on /json)
	// because MaxInFlight calls were open.
	Shed uint64
	// ShedConnection counts the gRPC calls answered ResourceExhausted
	// because their connection held MaxInFlightPerConnection calls.
	ShedConnection uint64
	// RequestTimeouts counts the gRPC calls cancelled for not sending
	// their request message within RequestTimeout.
	RequestTimeouts uint64
	// ResetConnectionsClosed counts the connections closed for
	// resetting more calls than MaxEarlyResetsPerSecond.
	ResetConnectionsClosed uint64
	// Saturated is true while calls are being shed for MaxInFlight (gRPC
	// health answers NOT_SERVING meanwhile).
	Saturated bool
	// Connections is the open gRPC connections.
	Connections int64
	// ConnectionsRefused counts the gRPC connections closed at once for
	// being beyond MaxConnections.
	ConnectionsRefused uint64
	// TooLarge counts the calls (gRPC and /json) refused for being larger
	// than MaxRequestBytes.
	TooLarge uint64
}

// Load reports the server's bounds' counts.
func (s *Server) Load() Load {
	return Load{
		InFlight:               s.inflight.n.Load(),
		Shed:                   s.inflight.shed.Load(),
		ShedConnection:         s.calls.shedConn.Load(),
		RequestTimeouts:        s.calls.timeouts.Load(),
		ResetConnectionsClosed: s.calls.resetCloses.Load(),
		Saturated:              s.inflight.saturated.Load(),
		Connections:            s.grpcLimit.open.Load(),
		ConnectionsRefused:     s.grpcLimit.refused.Load(),
		TooLarge:               s.tooLarge.n.Load(),
	}
}

// grpcLimitOptions are the gRPC server options for l.
func (s *Server) grpcLimitOptions(l GRPCLimits) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if l.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(l.MaxConcurrentStreams))
	}
	if l.MaxHeaderListBytes > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(l.MaxHeaderListBytes))
	}
	switch {
	case l.MaxHeaderListBytes > 0:
		opts = append(opts, grpc.InTapHandle(s.tapHeadersThenInFlight(l.MaxHeaderListBytes)))
	case s.tracksCalls():
		opts = append(opts, grpc.InTapHandle(s.tapInFlight))
	}
	if l.RequestTimeout > 0 {
		opts = append(opts, grpc.StreamInterceptor(s.streamReceived))
	}
	return opts
}

// tapHeadersThenInFlight refuses a call whose headers are over bound
// (tapHeaderList), then admits it within MaxInFlight (tapInFlight, when
// there is such a bound).
func (s *Server) tapHeadersThenInFlight(bound uint32) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if err := tapHeaderList(info, bound); err != nil {
			return ctx, err
		}
		if s.tracksCalls() {
			return s.tapInFlight(ctx, info)
		}
		return ctx, nil
	}
}

// tapHeaderList refuses, with ResourceExhausted, a call carrying a
// `trailer` field whose headers add up beyond bound (HTTP/2's measure:
// names, values and 32 bytes per field). HTTP/2's decoder
// (golang.org/x/net/http2) resets a call whose fields add up beyond
// MaxHeaderListSize, but it counts a `trailer` field against a budget of
// its own, as large again: such a call's headers could reach twice the
// bound. Every other field is in the decoder's count, so only calls with
// that field are summed here, from the metadata gRPC decoded (what the
// call holds), before the call has a goroutine.
func tapHeaderList(info *tap.Info, bound uint32) error {
	if _, ok := info.Header["trailer"]; !ok {
		return nil
	}
	var n uint64
	for k, vs := range info.Header {
		for _, v := range vs {
			n += uint64(len(k)+len(v)) + 32
		}
	}
	if n <= uint64(bound) {
		return nil
	}
	return status.Errorf(codes.ResourceExhausted,
		"the call's headers take %d bytes, over the bound of %d (SLUICE_GRPC_MAX_HEADER_LIST_BYTES)", n, bound)
}

// errOverloaded answers a call beyond MaxInFlight.
var errOverloaded = status.Error(codes.ResourceExhausted,
	"sluice is answering as many calls as it is configured to (SLUICE_MAX_IN_FLIGHT); try again or another instance")

// inflight counts the calls open at once against a bound, and logs
// (throttled) when it refuses one.
type inflight struct {
	max      int64 // 0: no bound, nothing counted
	n        atomic.Int64
	shed     atomic.Uint64
	log      logrus.FieldLogger
	throttle logthrottle.Log
	// saturated is set when a call is shed, and cleared when the calls
	// open fall back to three quarters of max; onSaturation, if not nil,
	// is told of each change (it reads saturated itself: two changes may
	// reach it out of order).
	saturated    atomic.Bool
	onSaturation func()
}

// acquire takes a slot if fewer than max+extra calls are open, and
// reports whether it did; each true must be followed by one release.
// Without a bound it always succeeds and counts nothing.
func (g *inflight) acquire(extra int64) bool {
	if g.max <= 0 {
		return true
	}
	// Add, then back out: a slot is held only by a call that saw the
	// count within the bound after its own increment, so never more
	// than max+extra calls hold one.
	if g.n.Add(1) <= g.max+extra {
		return true
	}
	g.n.Add(-1)
	g.shed.Add(1)
	if g.saturated.CompareAndSwap(false, true) && g.onSaturation != nil {
		g.onSaturation()
	}
	g.throttle.Warn(g.log.WithFields(logrus.Fields{"max_in_flight": g.max}),
		"calls in flight at their bound (SLUICE_MAX_IN_FLIGHT): answering new calls ResourceExhausted until some finish", nil)
	return false
}

// release gives back a slot taken by acquire.
func (g *inflight) release() {
	if g.max > 0 {
		if n := g.n.Add(-1); n <= g.max-g.max/4 && g.saturated.Load() &&
			g.saturated.CompareAndSwap(true, false) && g.onSaturation != nil {
			g.onSaturation()
		}
	}
}
