package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/syncbuf"
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
	panicking := func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) { panic("in the interceptor") }
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
			var logs syncbuf.Buffer
			log := logrus.New()
			log.SetOutput(&logs)
			s := unaryServer(tc.in, true, log)
			if !s.inflight.acquire(0) {
				t.Fatal("no slot")
			}
			stopped := false
			ctx := context.WithValue(context.Background(), slotKey{}, func() bool { stopped = true; return true })
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
