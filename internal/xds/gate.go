package xds

import (
	"context"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NoConfigMessage is the reason a Gate gives while it is closed.
const NoConfigMessage = "no rate limit configuration loaded yet: waiting for the xDS management server"

// Gate answers every ShouldRateLimit with Unavailable until Open is called,
// then passes calls to the service it wraps. It stands in front of a
// service whose configuration comes over xDS: before the first
// configuration arrives sluice cannot know what to enforce, so it says so
// and Envoy's failure_mode_deny decides, as with envoyproxy/ratelimit,
// which answers an error then too.
type Gate struct {
	next rlsv3.RateLimitServiceServer
	open atomic.Bool
}

// NewGate returns a closed Gate in front of next.
func NewGate(next rlsv3.RateLimitServiceServer) *Gate { return &Gate{next: next} }

// Open lets calls through from now on. It is safe to call more than once.
func (g *Gate) Open() { g.open.Store(true) }

// IsOpen reports whether Open was called.
func (g *Gate) IsOpen() bool { return g.open.Load() }

// ShouldRateLimit answers Unavailable while the gate is closed, and
// otherwise is the wrapped service's.
func (g *Gate) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if !g.open.Load() {
		return nil, status.Error(codes.Unavailable, NoConfigMessage)
	}
	return g.next.ShouldRateLimit(ctx, req)
}
