package loadgen

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluice-rl/sluice/internal/testkit/h2test"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
)

// The load generator calls as Envoy does: fixed 256 MiB flow-control
// windows, so it sends no bandwidth-estimation PINGs, which gRPC's client
// would send after the first answer, before the next call.
func TestRunSendsNoPings(t *testing.T) {
	s, err := h2test.Serve(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, Config{Target: s.Addr(), Descriptors: templates(t, "k={id}"), Workers: 1, Conns: 1, Requests: 3,
		Keys: Keys{Count: 10}, Seed: 1, Timeout: 10 * time.Second})
	if err != nil || r.OK != 3 {
		t.Fatalf("run: %v, %+v", err, r)
	}
	conns, calls, err := s.Close()
	if err != nil || calls != 3 || len(conns) != 1 {
		t.Fatalf("served %d calls on %d connections: %v", calls, len(conns), err)
	}
	if got := conns[0]; got.InitialWindow != envoyWindow || got.Pings != 0 {
		t.Errorf("the load generator sent %+v, want window %d and no PING", got, envoyWindow)
	}
}

// The no-op servers (the ceiling and the round-trip reference) have the
// fixed windows sluice's listener has by default: no PING with their
// answer.
func TestNoopServersSendNoPings(t *testing.T) {
	rt := NewRoundTrip("127.0.0.1:1", 1, time.Second) // never asked: the call below fails before it
	defer rt.Close()
	for _, tc := range []struct {
		name string
		addr string
	}{
		{"no-op", stacktest.ServeGRPCAddr(t, NewNoopServer())},
		{"round-trip reference", stacktest.ServeGRPCAddr(t, NewRoundTripServer(rt))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h2test.Call(tc.addr, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &rlsv3.RateLimitRequest{Domain: "d"})
			if err != nil {
				t.Fatal(err)
			}
			if got.InitialWindow != 1<<20 || got.Pings != 0 {
				t.Errorf("saw %+v, want window %d and no PING", got, 1<<20)
			}
		})
	}
}
