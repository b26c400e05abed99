package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// UnaryServerInterceptor returns a gRPC interceptor that records each unary
// call's duration in sluice_request_duration_seconds, labelled by full
// method name. The server routes only registered methods to interceptors,
// so the label is bounded by the services served. A nil m returns an
// interceptor that only calls the handler.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	if m == nil {
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			return next(ctx, req)
		}
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		start := m.now()
		resp, err := next(ctx, req)
		m.method(info.FullMethod).Observe(m.now().Sub(start).Seconds())
		return resp, err
	}
}

// method returns the duration histogram of the named gRPC method.
func (m *Metrics) method(name string) prometheus.Observer {
	if o, ok := m.methods.load(name); ok {
		return o
	}
	m.methods.mu.Lock()
	defer m.methods.mu.Unlock()
	if o, ok := m.methods.load(name); ok {
		return o
	}
	o := m.duration.WithLabelValues(labelValue(name, MaxDescriptorLabelLen))
	m.methods.storeLocked(name, o)
	return o
}
