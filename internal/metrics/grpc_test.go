package metrics

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
)

// TestUnaryServerInterceptor serves the Service over real gRPC on
// loopback and checks the duration histogram by method.
func TestUnaryServerInterceptor(t *testing.T) {
	h := newHarness(t, Options{}, service.Options{}, apiYAML)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(h.m.UnaryServerInterceptor()))
	rlsv3.RegisterRateLimitServiceServer(srv, h.svc)
	client := rlsv3.NewRateLimitServiceClient(stacktest.ServeGRPC(t, srv))
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
