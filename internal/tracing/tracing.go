package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// DefaultServiceName is the service.name of sluice's spans unless
// Options.ServiceName or OTEL_SERVICE_NAME says otherwise.
const DefaultServiceName = "sluice"

// Options configures Setup. The zero value is tracing off.
type Options struct {
	// Enabled turns tracing on (TRACING_ENABLED, --tracing). Even when
	// set, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it
	// off, as the OpenTelemetry specification says.
	Enabled bool
	// ServiceName is the service.name resource attribute; empty means
	// DefaultServiceName. OTEL_SERVICE_NAME and service.name in
	// OTEL_RESOURCE_ATTRIBUTES take precedence.
	ServiceName string
	// ServiceVersion is the service.version resource attribute, if set.
	ServiceVersion string
	// ServiceNamespace and ServiceInstanceID are the service.namespace and
	// service.instance.id resource attributes, if set (the reference's
	// TRACING_SERVICE_NAMESPACE and TRACING_SERVICE_INSTANCE_ID, which
	// Envoy Gateway sets to the namespace and the pod's name).
	// OTEL_RESOURCE_ATTRIBUTES takes precedence.
	ServiceNamespace, ServiceInstanceID string
	// Protocol is the OTLP protocol used when neither
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL nor OTEL_EXPORTER_OTLP_PROTOCOL
	// is set: "grpc" or "http/protobuf" ("http" is accepted for the
	// reference's TRACING_EXPORTER_PROTOCOL). Empty means http/protobuf,
	// the specification's default.
	Protocol string
	// SamplingRatio, when set, in [0,1) and OTEL_TRACES_SAMPLER is not
	// set, samples that share of new traces (parent-based: a call whose
	// caller sampled is sampled, so 0 starts no trace of its own and
	// follows sampled callers, as the reference's TRACING_SAMPLING_RATE=0
	// does). nil or ≥ 1 leaves the SDK's default, OTEL_TRACES_SAMPLER or
	// parent-based always-on.
	SamplingRatio *float64
	// Exporter, when not nil, replaces the OTLP exporter (tests use an
	// in-memory one).
	Exporter sdktrace.SpanExporter
	// Getenv reads the environment; nil means os.Getenv. The OTLP
	// exporters themselves always read the process environment for their
	// endpoint, headers, TLS and timeout settings.
	Getenv func(string) string
}

// Tracing is a configured tracer. A nil or disabled *Tracing is valid: its
// methods do nothing.
type Tracing struct {
	provider   *sdktrace.TracerProvider
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

// Setup builds tracing from opts and the OTEL_* environment. Disabled, it
// returns a Tracing that does nothing, without error. Call Shutdown before
// exiting to flush the spans still buffered.
func Setup(ctx context.Context, opts Options) (*Tracing, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if !opts.Enabled || strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return &Tracing{}, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "", "otlp":
	case "none":
		return &Tracing{}, nil
	default:
		return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q is not supported (want otlp or none)", exp)
	}
	exporter := opts.Exporter
	if exporter == nil {
		var err error
		if exporter, err = newExporter(ctx, protocol(getenv, opts.Protocol)); err != nil {
			return nil, err
		}
	}
	name := opts.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	for _, a := range []struct{ key, value string }{
		{"service.version", opts.ServiceVersion},
		{"service.namespace", opts.ServiceNamespace},
		{"service.instance.id", opts.ServiceInstanceID},
	} {
		if a.value != "" {
			attrs = append(attrs, attribute.String(a.key, a.value))
		}
	}
	// Detectors apply in order, later ones winning: the environment
	// overrides the defaults given here.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: build the resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)}
	if r := opts.SamplingRatio; getenv("OTEL_TRACES_SAMPLER") == "" && r != nil && *r < 1 {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*r))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	return &Tracing{
		provider: tp,
		tracer:   tp.Tracer("github.com/sluice-rl/sluice/internal/tracing"),
		// W3C trace context, and B3 (single or multiple headers), which
		// Envoy's Zipkin tracer sends (Istio's default), as the reference
		// reads both (decision 0065).
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, b3.New(), propagation.Baggage{}),
	}, nil
}

// protocol returns the OTLP protocol for traces: the specific variable,
// then the general one, then fallback, then http/protobuf.
func protocol(getenv func(string) string, fallback string) string {
	for _, p := range []string{getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), fallback} {
		if p = strings.TrimSpace(p); p != "" {
			return strings.ToLower(p)
		}
	}
	return "http/protobuf"
}

// newExporter builds the OTLP exporter for protocol; the exporter reads
// its endpoint, headers, TLS, compression and timeout from OTEL_EXPORTER_OTLP_*.
// It does not connect until the first export.
func newExporter(ctx context.Context, protocol string) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "http/protobuf", "http":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q is not supported (want grpc or http/protobuf)", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: create the OTLP %s exporter: %w", protocol, err)
	}
	return exp, nil
}

// Enabled reports whether t records spans.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// ServerOptions returns the gRPC server options that trace every incoming
// call except health checks, continuing the caller's trace from its W3C
// traceparent (and baggage) metadata. Disabled, it returns nil.
func (t *Tracing) ServerOptions() []grpc.ServerOption {
	if !t.Enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.provider),
		otelgrpc.WithPropagators(t.propagator),
		// Metrics come from internal/metrics; no OTel meter is wanted here.
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
	))}
}

// ForceFlush exports every span ended so far.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	return t.onProvider(ctx, "flush", (*sdktrace.TracerProvider).ForceFlush)
}

// Shutdown flushes the spans still buffered and stops the exporter. ctx
// bounds the wait.
func (t *Tracing) Shutdown(ctx context.Context) error {
	return t.onProvider(ctx, "shut down", (*sdktrace.TracerProvider).Shutdown)
}

// onProvider runs op on the tracer provider when tracing is on (and does
// nothing when it is off), naming what it did in the error.
func (t *Tracing) onProvider(ctx context.Context, what string, op func(*sdktrace.TracerProvider, context.Context) error) error {
	if !t.Enabled() {
		return nil
	}
	if err := op(t.provider, ctx); err != nil {
		return fmt.Errorf("tracing: %s: %w", what, err)
	}
	return nil
}

// ParseSamplingRatio parses a sampling ratio setting ("0.25"); it must be
// within [0,1].
func ParseSamplingRatio(s string) (float64, error) {
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || r < 0 || r > 1 {
		return 0, fmt.Errorf("tracing: sampling ratio %q: want a number from 0 to 1", s)
	}
	return r, nil
}
