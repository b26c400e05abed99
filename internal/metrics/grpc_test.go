package metrics

import (
	"context"
	"net"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/internal/service"
)

// TestUnaryServerInterceptor serves the Service over real gRPC on
// loopback and checks the duration histogram by method.
func TestUnaryServerInterceptor(t *testing.T) {
	h := newHarness(t, Options{}, service.Options{}, apiYAML)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(h.m.UnaryServerInterceptor()))
	rlsv3.RegisterRateLimitServiceServer(srv, h.svc)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	for range 3 {
		if _, err := client.ShouldRateLimit(context.Background(), rq("api", d("user", "u"))); err != nil {
			t.Fatal(err)
		}
	}
	scrape(t, h.reg).check(t, []want{
		{"sluice_request_duration_seconds", "method=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 3},
		{"sluice_requests_total", "code=OK", 3},
		{"sluice_decisions_total", "domain=api,outcome=ok", 3},
	})
}
