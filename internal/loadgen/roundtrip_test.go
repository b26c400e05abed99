package loadgen

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
)

func oneDescriptor() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "d", Descriptors: make([]*rlcommon.RateLimitDescriptor, 1)}
}

// waitUntil yields until cond holds, failing the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		runtime.Gosched()
	}
}

// TestRoundTripSharesRoundTrips: calls that arrive while every lane waits
// for Redis share the next round trip, and each is answered only after
// Redis answered one sent after it arrived.
func TestRoundTripSharesRoundTrips(t *testing.T) {
	srv := redistest.Standalone(t)
	client := srv.Client()
	before := redistest.CommandCalls(t, client)["echo"]
	rt := NewRoundTrip(srv.Addr(), 2, time.Minute)
	defer rt.Close()

	srv.Pause() // every round trip now waits for Redis
	const calls = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answered int
	var errs []error
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := rt.ShouldRateLimit(context.Background(), oneDescriptor())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 1 {
				t.Errorf("answer %v", resp)
			}
			answered++
		}()
	}
	// Every call is either in a round trip Redis has not answered or
	// waiting for the next one.
	waitUntil(t, "every call is queued or sent", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.taken+len(rt.waiting) == calls
	})
	mu.Lock()
	early := answered + len(errs)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("%d calls answered while Redis was paused", early)
	}
	srv.Resume()
	wg.Wait()
	if len(errs) > 0 || answered != calls {
		t.Fatalf("answered %d of %d, errors %v", answered, calls, errs)
	}
	// The lanes' first round trips (one or two) and one for the rest.
	if n := redistest.CommandCalls(t, client)["echo"] - before; n < 2 || n > 3 {
		t.Errorf("%d calls took %d ECHO round trips, want 2 or 3", calls, n)
	}
}

// TestRoundTripRedisDown: without Redis a call fails with Unavailable
// instead of hanging, and once Redis is back the lanes dial again.
func TestRoundTripRedisDown(t *testing.T) {
	srv := redistest.Standalone(t)
	rt := NewRoundTrip(srv.Addr(), 2, time.Minute)
	defer rt.Close()
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		do   func()
		want codes.Code
	}{
		{"up", func() {}, codes.OK},
		{"killed", srv.Kill, codes.Unavailable},
		{"restarted", func() {
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
		}, codes.OK},
	} {
		tt.do()
		// Both lanes: the second call may go to the other lane.
		for i := range 2 {
			_, err := rt.ShouldRateLimit(ctx, oneDescriptor())
			if got := status.Code(err); got != tt.want {
				t.Errorf("%s, call %d: %v, want %v", tt.name, i, err, tt.want)
			}
		}
	}
}

// TestRoundTripNoRedis: a Redis address nobody listens on fails every call
// with Unavailable, and Close answers what still waits.
func TestRoundTripNoRedis(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	rt := NewRoundTrip(addr, 1, time.Minute)
	if _, err := rt.ShouldRateLimit(context.Background(), oneDescriptor()); status.Code(err) != codes.Unavailable {
		t.Errorf("no Redis: %v, want Unavailable", err)
	}
	rt.Close()
	if _, err := rt.ShouldRateLimit(context.Background(), oneDescriptor()); status.Code(err) != codes.Unavailable {
		t.Errorf("closed: %v, want Unavailable", err)
	}
}
