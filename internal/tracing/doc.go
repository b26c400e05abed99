// Package tracing sets up OpenTelemetry tracing for sluice: an OTLP
// exporter configured from the standard OTEL_* environment variables, W3C
// trace-context and baggage propagation, a gRPC server stats handler that
// makes each incoming call a span (a child of the caller's span when the
// call carries a traceparent), and a backend decorator that adds a span
// around each Decide call.
//
// Tracing is off by default. Disabled, Setup builds nothing: ServerOptions
// returns no option and InstrumentBackend returns the backend unchanged, so
// a disabled tracer costs nothing on the request path.
//
// The package keeps no global state: it does not set OpenTelemetry's global
// tracer provider or propagator; everything it builds hangs off the
// *Tracing that Setup returns. It knows the backend interface and gRPC
// server options; it knows nothing of Redis, configuration or metrics.
package tracing
