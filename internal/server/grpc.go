package server

import (
	"context"
	"runtime/debug"
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
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.opts.MaxRequestBytes),
		grpc.ForceServerCodecV2(newCodec()), // descriptor values need not be UTF-8 (codec.go)
		grpc.ChainUnaryInterceptor(s.interceptors()...),
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
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(g, s.health)
	return g, nil
}

// interceptors are the unary interceptors in order: the release of the
// call's in-flight slot (with MaxInFlight), panic recovery, the caller's,
// then the refusal of privileged calls (innermost, so that the caller's
// metrics count refused calls).
func (s *Server) interceptors() []grpc.UnaryServerInterceptor {
	var is []grpc.UnaryServerInterceptor
	if s.inflight.max > 0 {
		is = append(is, s.releaseUnary)
	}
	is = append(is, s.recoverUnary)
	is = append(is, s.opts.UnaryInterceptors...)
	if s.access.Privileged != PrivilegedAny {
		is = append(is, s.privilegedUnary)
	}
	return is
}

// recoverUnary turns a panic in a handler into an Internal error instead
// of a crashed process, and logs it with its stack.
func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.WithField("method", info.FullMethod).WithField("stack", string(debug.Stack())).
				Errorf("panic in gRPC handler: %v", r)
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	return next(ctx, req)
}
