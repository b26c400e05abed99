package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/pkg/backend"
)

// BackendSpanName is the name of the span around a backend Decide call.
const BackendSpanName = "sluice.backend.Decide"

// Attribute keys of the backend span.
const (
	// AttrChecks is the number of checks (descriptors) in the call.
	AttrChecks = attribute.Key("sluice.backend.checks")
	// AttrErrors is the number of checks the backend could not decide.
	AttrErrors = attribute.Key("sluice.backend.errors")
	// AttrTogetherDeclined is set on the span of a call that asked the
	// backend to decide a request's checks as one and was declined (they
	// are then decided one by one, in another span).
	AttrTogetherDeclined = attribute.Key("sluice.backend.together_declined")
)

// InstrumentBackend returns b decorated to record a span around each
// Decide call, a child of the span in the call's context (the gRPC server
// span), with the number of checks and of failed checks; a call with
// failures has status Error and the first error as its description.
// Disabled, it returns b unchanged.
func (t *Tracing) InstrumentBackend(b backend.Backend) backend.Backend {
	if !t.Enabled() || b == nil {
		return b
	}
	return &traced{next: b, tracer: t.tracer}
}

// traced is the backend decorator.
type traced struct {
	next   backend.Backend
	tracer trace.Tracer
}

// Decide calls the wrapped backend inside a span.
func (b *traced) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	return b.span(ctx, checks, b.next.Decide)
}

// DecideTogether calls the wrapped backend's inside a span when it has one
// (backend.TogetherDecider), and declines otherwise. A call the wrapped
// backend declines decided nothing; its span says so in
// AttrTogetherDeclined.
func (b *traced) DecideTogether(ctx context.Context, checks []backend.Check) ([]backend.Result, bool) {
	td, ok := b.next.(backend.TogetherDecider)
	if !ok {
		return nil, false
	}
	declined := false
	res := b.span(ctx, checks, func(ctx context.Context, checks []backend.Check) []backend.Result {
		res, ok := td.DecideTogether(ctx, checks)
		declined = !ok
		if declined {
			trace.SpanFromContext(ctx).SetAttributes(AttrTogetherDeclined.Bool(true))
		}
		return res
	})
	return res, !declined
}

// span runs decide inside a span.
func (b *traced) span(ctx context.Context, checks []backend.Check, decide func(context.Context, []backend.Check) []backend.Result) []backend.Result {
	ctx, span := b.tracer.Start(ctx, BackendSpanName, trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	res := decide(ctx, checks)
	if !span.IsRecording() {
		return res
	}
	failed := 0
	var first error
	for i := range res {
		if res[i].Err != nil {
			if first == nil {
				first = res[i].Err
			}
			failed++
		}
	}
	span.SetAttributes(AttrChecks.Int(len(checks)), AttrErrors.Int(failed))
	if first != nil {
		span.SetStatus(codes.Error, first.Error())
	}
	return res
}

// Ping calls the wrapped backend.
func (b *traced) Ping(ctx context.Context) error { return b.next.Ping(ctx) }

// Close closes the wrapped backend.
func (b *traced) Close() error { return b.next.Close() }

// Unwrap returns the wrapped backend.
func (b *traced) Unwrap() backend.Backend { return b.next }
