package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Defaults for the zero values of Options.
const (
	// DefaultMaxRequestBytes bounds a gRPC request message and a /json
	// body: gRPC's own default, which envoyproxy/ratelimit keeps. A
	// request is a domain and its descriptors, whose values Envoy copies
	// from headers (up to 8 MiB of them when a listener allows it): a
	// refused call is one Envoy passes unlimited, so the bound is not set
	// below what the service it replaces accepts.
	DefaultMaxRequestBytes = 4 << 20
	// DefaultShutdownTimeout bounds how long Serve waits for in-flight
	// calls once shutdown starts; calls still running then are cut.
	DefaultShutdownTimeout = 10 * time.Second
)

// RateLimitServiceName is the gRPC service name of the rate-limit service,
// also reported by the health service.
const RateLimitServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// HealthServiceNames are the service names the gRPC health service answers
// for, all with the same status: "" (the server), "ratelimit" (the name
// envoyproxy/ratelimit reports, which probes written for it ask) and
// RateLimitServiceName.
var HealthServiceNames = []string{"", "ratelimit", RateLimitServiceName}

// Options configure a Server. Service is required.
type Options struct {
	// GRPCAddr and HTTPAddr are the listen addresses, "host:port". Port 0
	// picks a free port (see Server.GRPCAddr and Server.HTTPAddr).
	GRPCAddr, HTTPAddr string
	// GRPCUnixSocket, when not empty, is a unix socket path gRPC listens on
	// instead of GRPCAddr (GRPC_UDS). A stale socket file that nothing
	// listens on is replaced; any other existing file is an error.
	GRPCUnixSocket string
	// Service answers ShouldRateLimit, over gRPC and over /json.
	Service rlsv3.RateLimitServiceServer
	// TLS, when not nil, serves gRPC over TLS (and HTTP too with
	// Access.HTTPTLS).
	TLS *TLSFiles
	// Access says who may reach a decision over HTTP and who may send
	// refunds and limit overrides.
	Access Access
	// MaxConnectionAge and MaxConnectionAgeGrace bound a gRPC connection's
	// life, so that clients re-resolve and rebalance (0: no limit). The
	// grace is how long in-flight calls may run after the age is reached.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// MaxRequestBytes bounds a gRPC request message and a /json body;
	// 0 means DefaultMaxRequestBytes. A larger one is refused
	// (ResourceExhausted, 413), logged (throttled), counted in
	// Load().TooLarge and reported to OnRequestTooLarge.
	MaxRequestBytes int
	// OnRequestTooLarge, if not nil, is called for every call refused
	// for being larger than MaxRequestBytes (a metric, say).
	OnRequestTooLarge func()
	// HTTPLimits bound the HTTP listener's connections: read, write and
	// idle timeouts and the most open connections.
	HTTPLimits HTTPLimits
	// GRPCLimits bound the gRPC listener's connections, the streams of
	// each and the calls open at once (zero fields: no bound).
	GRPCLimits GRPCLimits
	// DrainDelay is how long Serve keeps both servers up, failing health,
	// after shutdown starts and before it stops accepting connections, so
	// load balancers see the failure first. 0 stops at once.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the wait for in-flight calls, for each server
	// in turn (gRPC, then HTTP); 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// UnaryInterceptors run around every unary gRPC call, after the
	// server's own panic recovery (for metrics, say).
	UnaryInterceptors []grpc.UnaryServerInterceptor
	// GRPCOptions are added to the gRPC server's own options (a tracing
	// stats handler, say).
	GRPCOptions []grpc.ServerOption
	// Services register more gRPC services beside ShouldRateLimit and
	// health (the Rate Limit Quota Service), on the same listener, TLS
	// and bounds.
	Services []func(grpc.ServiceRegistrar)
	// Logger receives lifecycle and error lines; nil means logrus'
	// standard logger.
	Logger logrus.FieldLogger
}

// Server is sluice's gRPC and HTTP servers. Create it with New, which binds
// the listeners, then call Serve.
type Server struct {
	opts   Options
	log    logrus.FieldLogger
	grpc   *grpc.Server
	health *health.Server
	http   *http.Server
	mux    *http.ServeMux
	access accessPolicy

	grpcLn, httpLn net.Listener
	grpcLimit      *limitListener                // counts, and bounds, the gRPC connections
	inflight       inflight                      // counts, and bounds, the calls open at once
	calls          callSlots                     // a call's share of its connection, its request timeout
	tooLarge       tooLarge                      // counts the calls refused for their size
	inner          []grpc.UnaryServerInterceptor // run by unary inside its own work

	mu       sync.Mutex // orders health updates against shutdown
	serving  bool       // the caller's view: the backend is usable
	shedding bool       // every new call is being shed (MaxInFlight reached)
	draining bool       // shutdown has started
	started  atomic.Bool
}

// New binds both listeners and builds the servers. It returns an error if
// an address cannot be bound or the TLS files cannot be loaded.
func New(o Options) (*Server, error) {
	if o.Service == nil {
		return nil, errors.New("server: Options.Service is nil")
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	s := &Server{opts: o, log: o.Logger, serving: true}
	if s.log == nil {
		s.log = logrus.StandardLogger()
	}
	s.inflight.max, s.inflight.log = int64(max(o.GRPCLimits.MaxInFlight, 0)), s.log
	s.inflight.onSaturation = s.saturationChanged
	s.calls.perConn, s.calls.timeout, s.calls.log = int64(max(o.GRPCLimits.MaxInFlightPerConnection, 0)), max(o.GRPCLimits.RequestTimeout, 0), s.log
	s.calls.maxResets = int64(max(o.GRPCLimits.MaxEarlyResetsPerSecond, 0))
	s.tooLarge.max, s.tooLarge.log, s.tooLarge.notify = o.MaxRequestBytes, s.log, o.OnRequestTooLarge

	var err error
	if s.access, err = o.Access.resolve(o.TLS, func(m string) { s.log.Warn(m) }); err != nil {
		return nil, err
	}
	grpcServer, err := s.newGRPC()
	if err != nil {
		return nil, err
	}
	s.grpc = grpcServer
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/healthcheck", s.handleHealthcheck)
	s.mux.HandleFunc("/json", s.handleJSON)
	o.HTTPLimits = o.HTTPLimits.withDefaults()
	s.opts.HTTPLimits = o.HTTPLimits
	s.http = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: o.HTTPLimits.ReadHeaderTimeout,
		ReadTimeout:       o.HTTPLimits.ReadTimeout,
		WriteTimeout:      o.HTTPLimits.WriteTimeout,
		IdleTimeout:       o.HTTPLimits.IdleTimeout,
		ErrorLog:          log.New(debugWriter{s.log}, "", 0),
	}

	if s.grpcLn, err = listenGRPC(o); err != nil {
		return nil, err
	}
	s.grpcLimit = newLimitListener(s.grpcLn, o.GRPCLimits.MaxConnections, o.GRPCLimits.MaxConnectionsPerAddress, "gRPC", s.log)
	s.grpcLn = s.grpcLimit
	if s.httpLn, err = net.Listen("tcp", o.HTTPAddr); err != nil {
		s.grpcLn.Close()
		return nil, fmt.Errorf("server: listen for HTTP on %s: %w", o.HTTPAddr, err)
	}
	s.httpLn = newLimitListener(s.httpLn, o.HTTPLimits.MaxConnections, o.HTTPLimits.MaxConnectionsPerAddress, "HTTP", s.log)
	if o.Access.HTTPTLS {
		cfg, err := newHTTPTLS(*o.TLS, s.log)
		if err != nil {
			s.grpcLn.Close()
			s.httpLn.Close()
			return nil, err
		}
		s.httpLn = tls.NewListener(s.httpLn, cfg)
	}
	s.setHealth()
	return s, nil
}

// GRPCAddr is the address the gRPC server listens on.
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// HTTPAddr is the address the HTTP server listens on.
func (s *Server) HTTPAddr() string { return s.httpLn.Addr().String() }

// Handle mounts an extra HTTP handler (for /metrics, say). The built-in
// paths cannot be replaced.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// SetServing reports whether the service can answer usefully (its backend
// is reachable, or its failure modes do not need it). Health, over gRPC and
// /healthcheck, follows it until shutdown starts; after that health fails
// whatever SetServing says. A new Server is serving.
func (s *Server) SetServing(ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving == ok {
		return
	}
	s.serving = ok
	s.log.WithField("serving", ok).Info("health changed")
	s.setHealth()
}

// Healthy reports what /healthcheck answers: serving and not shutting down.
func (s *Server) Healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serving && !s.draining
}

// setHealth pushes the health state to the gRPC health service. Callers
// hold s.mu.
func (s *Server) setHealth() {
	if s.draining {
		return // health.Server.Shutdown has pinned NOT_SERVING
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if s.serving && !s.shedding {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range HealthServiceNames {
		s.health.SetServingStatus(name, st)
	}
}

// saturationChanged follows the in-flight bound's saturation into gRPC
// health: NOT_SERVING while new calls are being shed, so that a client or
// load balancer checking it sends its calls elsewhere. /healthcheck is
// not changed: it is the process's liveness, and a busy process is alive.
func (s *Server) saturationChanged() {
	s.mu.Lock()
	defer s.mu.Unlock()
	sat := s.inflight.saturated.Load()
	if s.shedding == sat {
		return
	}
	s.shedding = sat
	if sat {
		s.log.WithField("max_in_flight", s.inflight.max).Warn("gRPC health NOT_SERVING while new calls are shed for SLUICE_MAX_IN_FLIGHT")
	} else {
		s.log.WithField("max_in_flight", s.inflight.max).Info("calls in flight back to three quarters of their bound: gRPC health follows the backend again")
	}
	s.setHealth()
}

// Serve runs both servers until ctx is done, then shuts them down
// gracefully (see Options.DrainDelay and Options.ShutdownTimeout) and
// returns nil. If a server fails, Serve shuts the other down and returns
// the error. Serve may be called once.
func (s *Server) Serve(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("server: Serve called twice")
	}
	errc := make(chan error, 2)
	go func() {
		// ErrServerStopped: shutdown ran before this goroutine reached
		// Serve (a context cancelled right after start), not a failure.
		if err := s.grpc.Serve(s.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("server: gRPC: %w", err)
			return
		}
		errc <- nil
	}()
	go func() {
		if err := s.http.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("server: HTTP: %w", err)
			return
		}
		errc <- nil
	}()
	s.log.WithFields(logrus.Fields{"grpc": s.GRPCAddr(), "http": s.HTTPAddr(), "tls": s.opts.TLS != nil, "http_tls": s.opts.Access.HTTPTLS}).
		Info("listening")

	var failed error
	pending := 2
	select {
	case <-ctx.Done():
	case failed = <-errc:
		pending--
	}
	s.shutdown()
	for ; pending > 0; pending-- {
		if err := <-errc; err != nil && failed == nil {
			failed = err
		}
	}
	return failed
}

// shutdown fails health, waits DrainDelay, lets in-flight gRPC calls
// finish (up to ShutdownTimeout) and then stops the HTTP server the same
// way. HTTP stays up while gRPC drains, so /healthcheck keeps answering
// 500 until the end.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.draining = true
	s.health.Shutdown()
	s.mu.Unlock()
	s.log.Info("shutting down: health now failing")

	if d := s.opts.DrainDelay; d > 0 {
		s.log.WithField("delay", d).Info("waiting for load balancers to drain")
		time.Sleep(d)
	}

	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(s.opts.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		s.log.WithField("timeout", s.opts.ShutdownTimeout).Warn("gRPC calls still running at shutdown timeout; cutting them")
		s.grpc.Stop()
		<-done
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		s.log.WithError(err).Warn("HTTP requests still running at shutdown timeout; closing")
		s.http.Close()
	}
	s.log.Info("shut down")
}
