package server

import (
	"context"
	"runtime/debug"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// newGRPC builds the gRPC server with the rate-limit and health services,
// and sets s.health. Reflection is served by the admin listener, not here:
// it describes the service to anyone who can connect.
func (s *Server) newGRPC() (*grpc.Server, error) {
	s.inner = s.innerInterceptors()
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.opts.MaxRequestBytes),
		grpc.ForceServerCodecV2(newCodec()), // descriptor values need not be UTF-8 (codec.go)
		grpc.UnaryInterceptor(s.unary),
		// Envoy clusters often send HTTP/2 keepalive pings (every 30 s or
		// so, idle or not). grpc-go's default policy closes a connection
		// that pings more often than every 5 minutes with "too_many_pings";
		// accept pings down to 10 s instead.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if s.opts.MaxConnectionAge > 0 || s.opts.MaxConnectionAgeGrace > 0 || s.opts.GRPCLimits.MaxConnectionIdle > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      s.opts.MaxConnectionAge,
			MaxConnectionAgeGrace: s.opts.MaxConnectionAgeGrace,
			MaxConnectionIdle:     s.opts.GRPCLimits.MaxConnectionIdle,
		}))
	}
	if s.opts.TLS != nil {
		cfg, err := newServerTLS(*s.opts.TLS, s.log)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(newHandshakeLog(credentials.NewTLS(cfg), s.log)))
	}
	opts = append(opts, s.grpcLimitOptions(s.opts.GRPCLimits)...)
	opts = append(opts, s.opts.GRPCOptions...)
	g := grpc.NewServer(opts...)
	g.RegisterService(s.rateLimitService(), s.opts.Service)
	for _, register := range s.opts.Services {
		register(g)
	}
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(g, s.health)
	return g, nil
}

// unary is the one unary interceptor gRPC runs. In order: the stop of the
// call's request timer (its message has been read) and the release of its
// in-flight slots, panic recovery, the
// caller's interceptors, then the refusal of privileged calls (innermost,
// so that the caller's metrics count refused calls). The first two are
// written out here, and the others are called without a chain when there
// is one of them (the binary's metrics): gRPC's chain of interceptors
// makes a closure per level on every call.
func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
	if s.tracksCalls() {
		if c := callOf(ctx); c != nil {
			c.received()
			defer c.end()
		}
	}
	defer s.recoverPanic(info, &resp, &err)
	switch len(s.inner) {
	case 0:
		return next(ctx, req)
	case 1:
		return s.inner[0](ctx, req, info, next)
	default:
		return chainUnary(s.inner)(ctx, req, info, next)
	}
}

// innerInterceptors are the interceptors unary runs inside its own work:
// the caller's, then the refusal of privileged calls.
func (s *Server) innerInterceptors() []grpc.UnaryServerInterceptor {
	in := slices.Clone(s.opts.UnaryInterceptors)
	if s.access.Privileged != PrivilegedAny {
		in = append(in, s.privilegedUnary)
	}
	return in
}

// chainUnary runs in as one interceptor, the first outermost.
func chainUnary(in []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		h := next
		for i := len(in) - 1; i >= 0; i-- {
			i, inner := i, h
			h = func(ctx context.Context, req any) (any, error) { return in[i](ctx, req, info, inner) }
		}
		return h(ctx, req)
	}
}

// recoverPanic, deferred by unary, turns a panic in a handler into an
// Internal error instead of a crashed process, and logs it with its stack.
func (s *Server) recoverPanic(info *grpc.UnaryServerInfo, resp *any, err *error) {
	if r := recover(); r != nil {
		s.log.WithField("method", info.FullMethod).WithField("stack", string(debug.Stack())).
			Errorf("panic in gRPC handler: %v", r)
		*resp, *err = nil, status.Error(codes.Internal, "internal error")
	}
}
