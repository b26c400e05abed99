package xds

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type okService struct{ calls int }

func (s *okService) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.calls++
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestGate answers Unavailable, without calling the service, until opened.
func TestGate(t *testing.T) {
	svc := &okService{}
	g := NewGate(svc)
	_, err := g.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d"})
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != NoConfigMessage || svc.calls != 0 {
		t.Fatalf("closed gate: %v (service called %d times), want Unavailable %q", err, svc.calls, NoConfigMessage)
	}
	if g.IsOpen() {
		t.Fatal("IsOpen before Open")
	}
	g.Open()
	resp, err := g.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d"})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || svc.calls != 1 || !g.IsOpen() {
		t.Fatalf("open gate: %v, %v (service called %d times)", resp, err, svc.calls)
	}
}
