package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/sluice-rl/sluice/internal/logthrottle"
)

// A gRPC call holds a slot of MaxInFlight from its headers to its answer.
// Envoy sends a call's request message with its headers, but a client
// may send the headers alone and nothing more: without a bound on that
// wait, a few connections hold every slot for as long as they like, and
// every other call is answered ResourceExhausted, which Envoy (with its
// default failure_mode_deny false) turns into "no limit". So a call's
// admission, in the tap, also starts a timer that cancels the call if its
// message has not arrived within RequestTimeout, and counts the call
// against its connection's share (MaxInFlightPerConnection).

// callKey is the context key of a call's admission (*call).
type callKey struct{}

// call is one admitted gRPC call's hold: its slots, and the timer that
// cancels it if its request message does not arrive.
type call struct {
	s       *Server
	conn    *connCalls // the connection's count, or nil when not counted
	from    *connCalls // the connection's counts, for its resets; or nil
	counted bool       // holds a slot of MaxInFlight
	// state is 0 until the request message arrives (1) or the call is
	// cancelled for not sending it (2).
	state  atomic.Uint32
	timer  *time.Timer
	cancel context.CancelCauseFunc
	// stopEnd stops the release registered at the end of the call's
	// context (context.AfterFunc); true when it had not run.
	stopEnd func() bool
}

// callSlots counts what the per-call bounds did.
type callSlots struct {
	perConn   int64 // MaxInFlightPerConnection; 0: no share counted
	timeout   time.Duration
	maxResets int64 // MaxEarlyResetsPerSecond; 0: not counted
	shedConn  atomic.Uint64
	timeouts  atomic.Uint64
	// resetCloses counts the connections closed for MaxEarlyResetsPerSecond.
	resetCloses atomic.Uint64
	log         logrus.FieldLogger
	throttle    logthrottle.Log
}

// errRequestTimeout is the cause of a call cancelled for its missing
// request message.
var errRequestTimeout = errors.New("the call's request message did not arrive within SLUICE_GRPC_REQUEST_TIMEOUT")

// errConnectionShare answers a call beyond its connection's share.
var errConnectionShare = status.Error(codes.ResourceExhausted,
	"this connection holds as many calls as one connection may (SLUICE_GRPC_MAX_IN_FLIGHT_PER_CONNECTION); try again or another connection")

// tracksCalls reports whether the tap admits calls: with an in-flight
// bound or a request timeout.
func (s *Server) tracksCalls() bool {
	return s.inflight.max > 0 || s.calls.timeout > 0 || s.calls.maxResets > 0
}

// tapInFlight admits a gRPC call within MaxInFlight and its connection's
// share of it, refusing it with ResourceExhausted beyond, and starts its
// RequestTimeout. gRPC runs it once a call's headers are read, before the
// call has a goroutine or its request is read; the context it returns is
// the call's, the one the request is read under. The call's slots are
// given back when its context ends, which gRPC does for every stream it
// admits, however it ends (answered, reset, past its deadline, its
// connection closed); releaseSlot gives a unary call's back sooner.
func (s *Server) tapInFlight(ctx context.Context, info *tap.Info) (context.Context, error) {
	c := &call{s: s}
	if s.calls.maxResets > 0 {
		c.from = connCallsOf(ctx)
	}
	if s.inflight.max > 0 {
		var extra int64
		health := strings.HasPrefix(info.FullMethodName, healthPrefix)
		if health {
			extra = healthReserve
		}
		if !s.inflight.acquire(extra) {
			return ctx, errOverloaded
		}
		c.counted = true
		if s.calls.perConn > 0 && !health {
			if cc := connCallsOf(ctx); cc != nil {
				if cc.n.Add(1) > s.calls.perConn {
					cc.n.Add(-1)
					s.inflight.release()
					s.calls.shedConn.Add(1)
					s.calls.throttle.Warn(s.calls.log.WithFields(logrus.Fields{"max_in_flight_per_connection": s.calls.perConn}),
						"a connection holds its share of the calls in flight (SLUICE_GRPC_MAX_IN_FLIGHT_PER_CONNECTION): answering its new calls ResourceExhausted until some finish", nil)
					return ctx, errConnectionShare
				}
				c.conn = cc
			}
		}
	}
	if s.calls.timeout > 0 {
		ctx, c.cancel = context.WithCancelCause(ctx)
		c.timer = time.AfterFunc(s.calls.timeout, c.expire)
	}
	c.stopEnd = context.AfterFunc(ctx, c.release)
	return context.WithValue(ctx, callKey{}, c), nil
}

// expire cancels a call whose request message did not come in time.
func (c *call) expire() {
	if !c.state.CompareAndSwap(0, 2) {
		return // it came just now
	}
	c.s.calls.timeouts.Add(1)
	c.cancel(errRequestTimeout)
	c.s.calls.throttle.Warn(c.s.calls.log.WithFields(logrus.Fields{"request_timeout": c.s.calls.timeout}),
		"a gRPC call sent its headers but not its request message in time (SLUICE_GRPC_REQUEST_TIMEOUT): cancelled", nil)
}

// received stops the call's request timer: its message has arrived.
func (c *call) received() {
	c.state.CompareAndSwap(0, 1)
	if c.timer != nil {
		c.timer.Stop()
	}
}

// release gives back the call's slots and stops its timer. A call that
// ends before its request message came, and was not cancelled for it,
// was reset by its client (or lost its connection): counted against the
// connection's MaxEarlyResetsPerSecond.
func (c *call) release() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.from != nil && c.state.Load() == 0 {
		c.s.earlyReset(c.from)
	}
	if c.conn != nil {
		c.conn.n.Add(-1)
	}
	if c.counted {
		c.s.inflight.release()
	}
}

// callOf is the admission the tap made for the call of ctx, or nil.
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// end, deferred by unary, gives a unary call's slots back as soon as its
// handler returns, instead of at the end of its context, where the
// release runs in a goroutine of its own (context.AfterFunc): one
// goroutine less per call. It runs after the panic recovery, so a handler
// that panics gives its slot back too.
func (c *call) end() {
	if c.stopEnd() {
		c.release()
	}
}

// streamReceived is the stream interceptor with a RequestTimeout: a
// streaming call (health's Watch) has its request timer stopped when its
// first message arrives, not when its handler starts.
func (s *Server) streamReceived(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c := callOf(ss.Context())
	if c == nil || c.timer == nil {
		return handler(srv, ss)
	}
	return handler(srv, &receivedStream{ServerStream: ss, c: c})
}

// receivedStream stops its call's request timer at its first message.
type receivedStream struct {
	grpc.ServerStream
	c *call
}

// RecvMsg receives a message, and stops the request timer once one came.
func (r *receivedStream) RecvMsg(m any) error {
	err := r.ServerStream.RecvMsg(m)
	if err == nil {
		r.c.received()
	}
	return err
}

// connCalls counts the calls one connection holds. The gRPC listener's
// connections carry it in their remote address (connAddr), which gRPC
// puts in every call's context as its peer: the tap, which sees only the
// context, finds the connection's count there, at no cost per call.
type connCalls struct {
	n atomic.Int64
	// second and resets count the calls ended before their request, in
	// the current second (Unix time); conn is closed when they pass the
	// bound.
	second, resets atomic.Int64
	conn           net.Conn
}

// earlyReset counts a call of cc's connection that ended before its
// request message came, and closes the connection when such calls pass
// MaxEarlyResetsPerSecond within one second: HTTP/2's rapid reset (a
// client opening streams and resetting them at once, each costing the
// server its headers' decoding and a call's setting up, about a fifth of
// an answered call, and nothing for the client) is then bounded to that
// many per connection and second, and a connection.
func (s *Server) earlyReset(cc *connCalls) {
	now := time.Now().Unix()
	if sec := cc.second.Load(); sec != now && cc.second.CompareAndSwap(sec, now) {
		cc.resets.Store(0)
	}
	if cc.resets.Add(1) != s.calls.maxResets+1 || cc.conn == nil {
		return
	}
	s.calls.resetCloses.Add(1)
	s.calls.throttle.Warn(s.calls.log.WithFields(logrus.Fields{"max_early_resets_per_second": s.calls.maxResets, "remote": cc.conn.RemoteAddr().String()}),
		"a gRPC connection reset more calls before their request than allowed (SLUICE_GRPC_MAX_EARLY_RESETS_PER_SECOND): closing it", nil)
	cc.conn.Close()
}

// connAddr is a connection's remote address with its call count.
type connAddr struct {
	addr  net.Addr // the connection's own, possibly nil (a unix socket's peer)
	calls connCalls
}

// Network implements net.Addr.
func (a *connAddr) Network() string {
	if a.addr == nil {
		return ""
	}
	return a.addr.Network()
}

// String implements net.Addr.
func (a *connAddr) String() string {
	if a.addr == nil {
		return ""
	}
	return a.addr.String()
}

// Unwrap is the connection's own remote address.
func (a *connAddr) Unwrap() net.Addr { return a.addr }

// connCallsOf is the call count of the connection of ctx's call, or nil.
func connCallsOf(ctx context.Context) *connCalls {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	if a, ok := p.Addr.(*connAddr); ok {
		return &a.calls
	}
	return nil
}
