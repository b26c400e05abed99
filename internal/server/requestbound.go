package server

import (
	"context"
	"strconv"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/logthrottle"
)

// tooLarge counts, and logs (throttled), the calls refused for a request
// larger than Options.MaxRequestBytes. Envoy passes a request whose
// rate-limit call fails (its default failure_mode_deny is false), so each
// one is a request no limit applied to: it must not go unseen.
type tooLarge struct {
	n        atomic.Uint64
	max      int
	log      logrus.FieldLogger
	throttle logthrottle.Log
	notify   func() // Options.OnRequestTooLarge, or nil
}

// note counts one refused call received over via ("gRPC", "/json").
func (t *tooLarge) note(via string, err error) {
	t.n.Add(1)
	if t.notify != nil {
		t.notify()
	}
	t.throttle.Warn(t.log.WithFields(logrus.Fields{"max_request_bytes": t.max, "via": via}),
		"request larger than SLUICE_MAX_REQUEST_BYTES refused; Envoy applies no limit to it (failure_mode_deny false)", err)
}

// rateLimitService is the rate-limit service's description with every
// method's request decoding watched: gRPC-Go refuses a message larger than
// MaxRecvMsgSize (ResourceExhausted) while the method's handler decodes
// it, before any interceptor runs, so the decoder is where the refusal is
// seen, counted and logged (gRPC-Go has then answered the call with its
// own status already). ShouldRateLimit's handler is written out here, its
// interceptor's info and handler made once: the generated one makes both,
// and the watch a closure, on every call.
func (s *Server) rateLimitService() *grpc.ServiceDesc {
	desc := rlsv3.RateLimitService_ServiceDesc
	desc.Methods = make([]grpc.MethodDesc, len(rlsv3.RateLimitService_ServiceDesc.Methods))
	for i, m := range rlsv3.RateLimitService_ServiceDesc.Methods {
		if m.MethodName == shouldRateLimitName {
			m.Handler = s.shouldRateLimitHandler()
		} else {
			h := m.Handler
			m.Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
				return h(srv, ctx, func(v any) error { return s.watchDecode(dec(v)) }, in)
			}
		}
		desc.Methods[i] = m
	}
	return &desc
}

// shouldRateLimitName is ShouldRateLimit's method name.
const shouldRateLimitName = "ShouldRateLimit"

// shouldRateLimitHandler is ShouldRateLimit's method handler for
// s.opts.Service: the generated one's work, with the interceptor's info
// and handler made once.
func (s *Server) shouldRateLimitHandler() func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	svc := s.opts.Service
	info := &grpc.UnaryServerInfo{Server: svc, FullMethod: shouldRateLimitMethod}
	handler := func(ctx context.Context, req any) (any, error) {
		return svc.ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	}
	return func(_ any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
		req := new(rlsv3.RateLimitRequest)
		if err := s.watchDecode(dec(req)); err != nil {
			return nil, err
		}
		if in == nil {
			return handler(ctx, req)
		}
		return in(ctx, req, info, handler)
	}
}

// watchDecode notes a request refused for its size, and returns err.
func (s *Server) watchDecode(err error) error {
	if err != nil && status.Code(err) == codes.ResourceExhausted {
		s.tooLarge.note("gRPC", err)
	}
	return err
}

// tooLargeMessage is the /json answer to a body over MaxRequestBytes.
func tooLargeMessage(limit int64) string {
	return "request body larger than " + strconv.FormatInt(limit, 10) + " bytes (SLUICE_MAX_REQUEST_BYTES)"
}
