package h2test

import (
	"context"
	"net"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

type okService struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (okService) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

func request() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
}

// Call sees what gRPC's server sends: with its dynamic windows a PING
// (bandwidth estimation) and a WINDOW_UPDATE on the first data, with fixed
// windows their sizes and no PING.
func TestCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []grpc.ServerOption
		want Seen
	}{
		{"dynamic windows", nil, Seen{InitialWindow: 65535, ConnIncrement: 0, Pings: 1}},
		{"fixed windows", []grpc.ServerOption{grpc.StaticStreamWindowSize(1 << 20), grpc.StaticConnWindowSize(4 << 20)},
			Seen{InitialWindow: 1 << 20, ConnIncrement: 4<<20 - 65535}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpc.NewServer(tc.opts...)
			rlsv3.RegisterRateLimitServiceServer(srv, okService{})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(ln)
			defer srv.Stop()
			got, err := Call(ln.Addr().String(), method, request())
			if err != nil {
				t.Fatal(err)
			}
			// With dynamic windows gRPC also returns the first data's bytes
			// to the connection window; only the PING matters here.
			if tc.opts == nil {
				got.ConnIncrement = 0
			}
			if got != tc.want {
				t.Errorf("saw %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Serve answers a real gRPC client's calls and sees its pings: one after
// the first answer with gRPC's dynamic windows (before the next call),
// none with fixed windows.
func TestServe(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []grpc.DialOption
		window    uint32
		withPings bool
	}{
		{"dynamic windows", nil, 65535, true},
		{"fixed windows", []grpc.DialOption{grpc.WithStaticStreamWindowSize(8 << 20), grpc.WithStaticConnWindowSize(8 << 20)}, 8 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Serve(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT})
			if err != nil {
				t.Fatal(err)
			}
			cc, err := grpc.NewClient(s.Addr(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			client := rlsv3.NewRateLimitServiceClient(cc)
			for range 3 {
				resp, err := client.ShouldRateLimit(ctx, request())
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("call: %v, %v", resp, err)
				}
			}
			cc.Close()
			conns, calls, err := s.Close()
			if err != nil || calls != 3 || len(conns) != 1 {
				t.Fatalf("served %d calls on %d connections: %v", calls, len(conns), err)
			}
			if got := conns[0]; got.InitialWindow != tc.window || (got.Pings > 0) != tc.withPings {
				t.Errorf("saw %+v, want window %d, pings %v", got, tc.window, tc.withPings)
			}
		})
	}
}
