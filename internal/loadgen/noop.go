package loadgen

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// Noop is a RateLimitService that answers OK, with one OK status per
// descriptor, and does no other work: no matching, no store. Served with
// the same gRPC stack as sluice, it is the ceiling a real server's
// throughput is compared with. It is safe for concurrent use.
type Noop struct {
	rlsv3.UnimplementedRateLimitServiceServer
	answers [17]*rlsv3.RateLimitResponse // by descriptor count, shared (never modified)
}

// NewNoop returns a Noop.
func NewNoop() *Noop {
	n := &Noop{}
	for i := range n.answers {
		n.answers[i] = okResponse(i)
	}
	return n
}

func okResponse(descriptors int) *rlsv3.RateLimitResponse {
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, descriptors)}
	for i := range r.Statuses {
		r.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return r
}

// ShouldRateLimit answers OK.
func (n *Noop) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if k := len(req.GetDescriptors()); k < len(n.answers) {
		return n.answers[k], nil
	}
	return okResponse(len(req.GetDescriptors())), nil
}

// NewNoopServer returns a gRPC server with a Noop registered, ready to
// Serve, with ServerWindows before opts.
func NewNoopServer(opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append(ServerWindows(), opts...)...)
	rlsv3.RegisterRateLimitServiceServer(s, NewNoop())
	return s
}

// ServerWindows are the fixed HTTP/2 flow-control windows sluice's gRPC
// listener has by default (a stream's and the connection's at 1 MiB, so
// the server sends no bandwidth-estimation PINGs): the no-op servers use
// them too, so that the ceiling pays no HTTP/2 cost sluice does not.
func ServerWindows() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(1 << 20), grpc.StaticConnWindowSize(1 << 20)}
}

// envoyWindow is the flow-control window of Envoy's HTTP/2 client, for a
// stream and for a connection, by default (Http2ProtocolOptions'
// initial_stream_window_size and initial_connection_window_size): fixed,
// so Envoy sends no bandwidth-estimation PINGs, and the load generator,
// calling as Envoy does, sends none either.
const envoyWindow = 256 << 20

// clientWindows are the load generator's dial options for envoyWindow.
func clientWindows() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(envoyWindow), grpc.WithStaticConnWindowSize(envoyWindow)}
}
