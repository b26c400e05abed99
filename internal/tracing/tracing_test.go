package tracing

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
)

const cfgYAML = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// env is a fake environment.
type env map[string]string

func (e env) get(k string) string { return e[k] }

// serve starts the Service behind a real gRPC server on loopback with the
// tracer's server options and the traced backend b, and returns a client
// connection.
func serve(t *testing.T, tr *Tracing, b backend.Backend) *grpc.ClientConn {
	t.Helper()
	svc := service.New(service.Options{Backend: tr.InstrumentBackend(b), Logger: stacktest.QuietLogger()})
	svc.SetConfig(stacktest.ParseConfig(t, cfgYAML))
	srv := grpc.NewServer(tr.ServerOptions()...)
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return stacktest.ServeGRPC(t, srv)
}

// inMemory sets up tracing enabled with opts (and an empty environment)
// exporting to a new in-memory exporter; it shuts down when t ends.
func inMemory(t *testing.T, opts Options) (*Tracing, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	opts.Enabled, opts.Exporter, opts.Getenv = true, exp, env{}.get
	tr, err := Setup(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr, exp
}

// newMemory is a memory backend without a sweeper, closed when t ends.
func newMemory(t *testing.T) *memory.Backend {
	mem := memory.New(memory.Options{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	return mem
}

func request() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
	}}
}

// TestServerSpanContinuesTrace sends a call carrying a W3C traceparent and
// checks that the server span belongs to that trace, is a child of the
// caller's span, and has the backend span as its child.
func TestServerSpanContinuesTrace(t *testing.T) {
	tr, exp := inMemory(t, Options{ServiceName: "sluice-test"})
	mem := newMemory(t)
	conn := serve(t, tr, mem)

	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"traceparent", "00-"+traceID+"-"+spanID+"-01", "baggage", "tenant=acme")
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request()); err != nil {
		t.Fatal(err)
	}
	// Health checks are not traced.
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	spans := flushSpans(t, tr, exp, 2)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the server span and the backend span: %v", len(spans), names(spans))
	}
	var server, back tracetest.SpanStub
	for _, s := range spans {
		switch s.Name {
		case "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit":
			server = s
		case BackendSpanName:
			back = s
		}
	}
	if server.Name == "" || back.Name == "" {
		t.Fatalf("spans %v, want the ShouldRateLimit server span and %s", names(spans), BackendSpanName)
	}
	if got := server.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("server span trace %s, want the caller's %s", got, traceID)
	}
	if got := server.Parent.SpanID().String(); got != spanID || !server.Parent.IsRemote() {
		t.Errorf("server span parent %s (remote %v), want the caller's span %s", got, server.Parent.IsRemote(), spanID)
	}
	if server.SpanKind != trace.SpanKindServer {
		t.Errorf("server span kind %v", server.SpanKind)
	}
	if back.SpanContext.TraceID() != server.SpanContext.TraceID() || back.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("backend span %s/%s parent %s, want a child of the server span %s",
			back.SpanContext.TraceID(), back.SpanContext.SpanID(), back.Parent.SpanID(), server.SpanContext.SpanID())
	}
	attrs := map[string]string{}
	for _, a := range back.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs[string(AttrChecks)] != "1" || attrs[string(AttrErrors)] != "0" {
		t.Errorf("backend span attributes %v", attrs)
	}
	if v, ok := server.Resource.Set().Value("service.name"); !ok || v.AsString() != "sluice-test" {
		t.Errorf("service.name %v", v.Emit())
	}
}

// TestResourceAttributes: the reference's TRACING_SERVICE_NAMESPACE and
// TRACING_SERVICE_INSTANCE_ID (Envoy Gateway sets them) become the spans'
// service.namespace and service.instance.id.
func TestResourceAttributes(t *testing.T) {
	tr, exp := inMemory(t, Options{ServiceNamespace: "envoy-gateway-system", ServiceInstanceID: "envoy-ratelimit-5d8f7c9b4-abcde"})
	conn := serve(t, tr, newMemory(t))
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), request()); err != nil {
		t.Fatal(err)
	}
	spans := flushSpans(t, tr, exp, 1)
	if len(spans) == 0 {
		t.Fatal("no span")
	}
	for key, want := range map[string]string{
		"service.name": DefaultServiceName, "service.namespace": "envoy-gateway-system", "service.instance.id": "envoy-ratelimit-5d8f7c9b4-abcde",
	} {
		if v, ok := spans[0].Resource.Set().Value(attribute.Key(key)); !ok || v.AsString() != want {
			t.Errorf("%s = %q (set %v), want %q", key, v.Emit(), ok, want)
		}
	}
}

func TestBackendSpanRecordsErrors(t *testing.T) {
	tr, exp := inMemory(t, Options{})
	down := fmt.Errorf("redis down: %w", backend.ErrUnavailable)
	b := tr.InstrumentBackend(stacktest.FailingBackend{Err: down})
	b.Decide(context.Background(), make([]backend.Check, 3))
	tr.ForceFlush(context.Background())
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("spans %v", names(spans))
	}
	s := spans[0]
	if s.Status.Code != otelcodes.Error || !strings.Contains(s.Status.Description, "redis down") {
		t.Errorf("status %+v", s.Status)
	}
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs[string(AttrChecks)] != "3" || attrs[string(AttrErrors)] != "3" {
		t.Errorf("attributes %v", attrs)
	}
	if u, ok := b.(interface{ Unwrap() backend.Backend }); !ok || u.Unwrap() != (stacktest.FailingBackend{Err: down}) {
		t.Errorf("Unwrap")
	}
}

// TestDisabled checks that tracing off adds nothing.
func TestDisabled(t *testing.T) {
	mem := newMemory(t)
	for _, tt := range []struct {
		name string
		opts Options
	}{
		{"not enabled", Options{}},
		{"OTEL_SDK_DISABLED", Options{Enabled: true, Getenv: env{"OTEL_SDK_DISABLED": "true"}.get}},
		{"OTEL_TRACES_EXPORTER=none", Options{Enabled: true, Getenv: env{"OTEL_TRACES_EXPORTER": "none"}.get}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := Setup(context.Background(), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Enabled() || tr.ServerOptions() != nil || tr.InstrumentBackend(mem) != backend.Backend(mem) {
				t.Fatal("disabled tracing adds options or wraps the backend")
			}
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
	var nilTr *Tracing
	if nilTr.Enabled() || nilTr.ServerOptions() != nil || nilTr.ForceFlush(context.Background()) != nil {
		t.Fatal("nil Tracing is not inert")
	}
}

// TestExporterFromEnv builds the real OTLP exporters from the environment
// (they connect lazily, so no collector is needed) and refuses unknown
// protocols and exporters.
func TestExporterFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     env
		opts    Options
		wantErr string
	}{
		{"default http/protobuf", env{}, Options{}, ""},
		{"grpc", env{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, Options{}, ""},
		{"traces protocol wins", env{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "bogus"}, Options{}, ""},
		{"reference http", env{}, Options{Protocol: "http"}, ""},
		{"env beats option", env{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, Options{Protocol: "grpc"}, `"http/json" is not supported`},
		{"unknown exporter", env{"OTEL_TRACES_EXPORTER": "zipkin"}, Options{}, `"zipkin" is not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The exporters read the process environment for the endpoint.
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			tt.opts.Enabled, tt.opts.Getenv = true, tt.env.get
			tr, err := Setup(context.Background(), tt.opts)
			if !testenv.WantErr(t, err, tt.wantErr) {
				return
			}
			if !tr.Enabled() || len(tr.ServerOptions()) != 1 {
				t.Fatal("enabled tracing has no server option")
			}
			// Nothing was recorded, so shutting down exports nothing.
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSamplingRatio(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want float64
		ok   bool
	}{{"0.25", 0.25, true}, {"1", 1, true}, {"0", 0, true}, {"1.5", 0, false}, {"-1", 0, false}, {"x", 0, false}} {
		got, err := ParseSamplingRatio(tt.s)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseSamplingRatio(%q) = %v, %v", tt.s, got, err)
		}
	}
	// A ratio below 1 applies to new traces; a sampled parent is followed.
	// 0 (the reference's TRACING_SAMPLING_RATE=0) starts no trace at all.
	for _, ratio := range []float64{1e-9, 0} {
		t.Run(fmt.Sprint(ratio), func(t *testing.T) {
			tr, exp := inMemory(t, Options{SamplingRatio: &ratio})
			mem := newMemory(t)
			conn := serve(t, tr, mem)
			client := rlsv3.NewRateLimitServiceClient(conn)
			for range 20 {
				client.ShouldRateLimit(context.Background(), request()) // new traces: (almost) never sampled
			}
			ctx := metadata.AppendToOutgoingContext(context.Background(),
				"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			client.ShouldRateLimit(ctx, request())
			if spans := flushSpans(t, tr, exp, 2); len(spans) != 2 {
				t.Fatalf("%d spans (%v), want only the sampled caller's server and backend spans", len(spans), names(spans))
			}
		})
	}
}

// TestServerSpanContinuesB3Trace: a call carrying Zipkin's B3 headers, as
// Envoy's Zipkin tracer (Istio's default) sends them, multiple or single,
// continues the caller's trace, as the reference's does.
func TestServerSpanContinuesB3Trace(t *testing.T) {
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	for _, tc := range []struct {
		name string
		md   []string
	}{
		{"multiple headers", []string{"x-b3-traceid", traceID, "x-b3-spanid", spanID, "x-b3-sampled", "1"}},
		{"single header", []string{"b3", traceID + "-" + spanID + "-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, exp := inMemory(t, Options{})
			conn := serve(t, tr, newMemory(t))
			ctx := metadata.AppendToOutgoingContext(context.Background(), tc.md...)
			if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request()); err != nil {
				t.Fatal(err)
			}
			spans := flushSpans(t, tr, exp, 2)
			var found bool
			for _, s := range spans {
				if s.SpanKind != trace.SpanKindServer {
					continue
				}
				found = true
				if got := s.SpanContext.TraceID().String(); got != traceID {
					t.Errorf("server span trace %s, want the caller's %s", got, traceID)
				}
				if got := s.Parent.SpanID().String(); got != spanID || !s.Parent.IsRemote() {
					t.Errorf("server span parent %s (remote %v), want the caller's span %s", got, s.Parent.IsRemote(), spanID)
				}
			}
			if !found {
				t.Fatalf("no server span among %v", names(spans))
			}
		})
	}
}

// flushSpans flushes tr until exp holds at least n spans, or 10 s passed,
// and returns them. The server span ends after the client has its answer
// (otelgrpc ends it once the status is written), so one flush right after
// the call may come before it.
func flushSpans(t *testing.T, tr *Tracing, exp *tracetest.InMemoryExporter, n int) tracetest.SpanStubs {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := tr.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if spans := exp.GetSpans(); len(spans) >= n || time.Now().After(deadline) {
			return spans
		}
		time.Sleep(time.Millisecond)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
