package server

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unaryServer is a Server with only what unary needs: the caller's
// interceptors, a log, and MaxInFlight's count when bounded.
func unaryServer(in []grpc.UnaryServerInterceptor, bounded bool, log logrus.FieldLogger) *Server {
	s := &Server{opts: Options{UnaryInterceptors: in}, log: log}
	if bounded {
		s.inflight.max = 10
	}
	s.inner = s.innerInterceptors()
	return s
}

// recording is an interceptor that appends its name to *got before and
// after the rest of the call.
func recording(name string, got *[]string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		*got = append(*got, name)
		resp, err := next(ctx, req)
		*got = append(*got, "/"+name)
		return resp, err
	}
}

// The caller's interceptors run in their order around the handler, however
// many there are, with or without the in-flight bound.
func TestUnaryRunsTheCallersInterceptorsInOrder(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3} {
		for _, bounded := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d interceptors, bounded %v", n, bounded), func(t *testing.T) {
				var got []string
				var in []grpc.UnaryServerInterceptor
				var want []string
				for i := range n {
					in = append(in, recording(fmt.Sprint(i), &got))
					want = append(want, fmt.Sprint(i))
				}
				want = append(want, "handler")
				for i := n - 1; i >= 0; i-- {
					want = append(want, fmt.Sprintf("/%d", i))
				}
				s := unaryServer(in, bounded, logrus.New())
				resp, err := s.unary(context.Background(), "req", &grpc.UnaryServerInfo{FullMethod: "/m"},
					func(_ context.Context, req any) (any, error) {
						got = append(got, "handler")
						return req.(string) + " answered", nil
					})
				if err != nil || resp != "req answered" {
					t.Fatalf("unary = %v, %v; want the handler's answer", resp, err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("ran %v, want %v", got, want)
				}
			})
		}
	}
}

// A panic in the handler or in a caller's interceptor is answered Internal
// and logged with the method, and the call's in-flight slot is given back.
func TestUnaryRecoversPanics(t *testing.T) {
	panicking := func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		panic("in the interceptor")
	}
	for _, tc := range []struct {
		name    string
		in      []grpc.UnaryServerInterceptor
		handler grpc.UnaryHandler
		want    string
	}{
		{"handler", nil, func(context.Context, any) (any, error) { panic("in the handler") }, "in the handler"},
		{"interceptor", []grpc.UnaryServerInterceptor{panicking}, func(context.Context, any) (any, error) { return "ok", nil }, "in the interceptor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testenv.SyncBuffer
			log := logrus.New()
			log.SetOutput(&logs)
			s := unaryServer(tc.in, true, log)
			if !s.inflight.acquire(0) {
				t.Fatal("no slot")
			}
			stopped := false
			c := &call{s: s, counted: true, stopEnd: func() bool { stopped = true; return true }}
			ctx := context.WithValue(context.Background(), callKey{}, c)
			resp, err := s.unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/Method"}, tc.handler)
			if resp != nil || status.Code(err) != codes.Internal {
				t.Fatalf("unary = %v, %v; want Internal", resp, err)
			}
			if !strings.Contains(logs.String(), tc.want) || !strings.Contains(logs.String(), "/svc/Method") {
				t.Fatalf("log %q does not say what panicked where", logs.String())
			}
			if n := s.inflight.n.Load(); n != 0 || !stopped {
				t.Fatalf("%d slots held (release stopped: %v) after the panic, want 0", n, stopped)
			}
		})
	}
}

// unary makes nothing per call around one caller's interceptor: gRPC's
// chain of interceptors made a closure per level on every call.
func TestUnaryAllocatesNothing(t *testing.T) {
	pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		return next(ctx, req)
	}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/m"}
	for _, bounded := range []bool{false, true} {
		s := unaryServer([]grpc.UnaryServerInterceptor{pass}, bounded, logrus.New())
		ctx := context.Background()
		if n := testing.AllocsPerRun(100, func() { s.unary(ctx, nil, info, handler) }); n != 0 {
			t.Errorf("bounded %v: %v allocations per call, want 0", bounded, n)
		}
	}
}

// answering is a rate-limit service answering OVER_LIMIT to the domain
// "over" and OK to any other.
type answering struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (answering) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	code := rlsv3.RateLimitResponse_OK
	if r.Domain == "over" {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: code}, nil
}

// ShouldRateLimit's method handler decodes the request, runs the
// interceptor with the method's info and a handler asking the service (or
// asks it directly without an interceptor), notes a request refused for
// its size, and makes nothing per call but the request.
func TestShouldRateLimitHandler(t *testing.T) {
	svc := answering{}
	s := &Server{opts: Options{Service: svc}, log: logrus.New()}
	s.tooLarge.log = logrus.New()
	s.tooLarge.log.(*logrus.Logger).SetOutput(io.Discard)
	desc := s.rateLimitService()
	var h func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error)
	for _, m := range desc.Methods {
		if m.MethodName == "ShouldRateLimit" {
			h = m.Handler
		}
	}
	if h == nil {
		t.Fatal("no ShouldRateLimit method")
	}
	decode := func(domain string) func(any) error {
		return func(v any) error { v.(*rlsv3.RateLimitRequest).Domain = domain; return nil }
	}
	var seen *grpc.UnaryServerInfo
	intercept := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		seen = info
		return next(ctx, req)
	}
	for _, tc := range []struct {
		domain string
		in     grpc.UnaryServerInterceptor
		want   rlsv3.RateLimitResponse_Code
	}{
		{"over", intercept, rlsv3.RateLimitResponse_OVER_LIMIT},
		{"ok", intercept, rlsv3.RateLimitResponse_OK},
		{"over", nil, rlsv3.RateLimitResponse_OVER_LIMIT},
	} {
		seen = nil
		resp, err := h(svc, context.Background(), decode(tc.domain), tc.in)
		if err != nil || resp.(*rlsv3.RateLimitResponse).OverallCode != tc.want {
			t.Fatalf("%s, interceptor %v: %v, %v; want %v", tc.domain, tc.in != nil, resp, err, tc.want)
		}
		if tc.in != nil && (seen == nil || seen.FullMethod != shouldRateLimit || seen.Server != svc) {
			t.Fatalf("interceptor saw %+v, want the method's name and the service", seen)
		}
	}

	tooBig := status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
	if _, err := h(svc, context.Background(), func(any) error { return tooBig }, intercept); err != tooBig {
		t.Fatalf("refused decode: %v, want the decoder's error", err)
	}
	if _, err := h(svc, context.Background(), func(any) error { return status.Error(codes.Internal, "x") }, intercept); status.Code(err) != codes.Internal {
		t.Fatalf("failed decode: %v, want the decoder's error", err)
	}
	if n := s.tooLarge.n.Load(); n != 1 {
		t.Fatalf("%d requests noted too large, want 1", n)
	}

	pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		return next(ctx, req)
	}
	noop := &noopService{}
	s = &Server{opts: Options{Service: noop}}
	h = s.rateLimitService().Methods[0].Handler
	dec := func(any) error { return nil }
	if n := testing.AllocsPerRun(100, func() { h(noop, context.Background(), dec, pass) }); n > 1 {
		t.Errorf("%v allocations per call, want 1 (the request)", n)
	}
}

// noopService answers every call with the same response.
type noopService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	resp rlsv3.RateLimitResponse
}

func (n *noopService) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &n.resp, nil
}
