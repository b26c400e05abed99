package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
)

// errKind is the kind label of sluice_backend_errors_total.
type errKind uint8

// The error kinds, in the order they are tested.
const (
	kindCircuitOpen errKind = iota
	kindTimeout
	kindCanceled
	kindUnavailable
	kindOther
	numErrKinds
)

var errKindNames = [numErrKinds]string{"circuit_open", "timeout", "canceled", "unavailable", "other"}

// String returns the label value.
func (k errKind) String() string { return errKindNames[k] }

// kindOf classifies a backend error with errors.Is / errors.As. A circuit
// breaker's fast failure is backend.ErrCircuitOpen (which also wraps
// backend.ErrUnavailable, so it is tested first).
func kindOf(err error) errKind {
	var timeout interface{ Timeout() bool }
	switch {
	case errors.Is(err, backend.ErrCircuitOpen):
		return kindCircuitOpen
	case errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &timeout) && timeout.Timeout():
		return kindTimeout
	case errors.Is(err, context.Canceled):
		return kindCanceled
	case errors.Is(err, backend.ErrUnavailable):
		return kindUnavailable
	}
	return kindOther
}

// InstrumentBackend returns b decorated to record each Decide call's
// duration (sluice_backend_decide_duration_seconds), the checks it carried
// (sluice_backend_checks_total) and every check it could not decide, by
// kind (sluice_backend_errors_total). Ping and Close pass through. When b
// decides a request's checks together (backend.TogetherDecider), so does
// the result, recorded the same way. A nil m returns b unchanged.
func (m *Metrics) InstrumentBackend(b backend.Backend) backend.Backend {
	if m == nil || b == nil {
		return b
	}
	if td, ok := b.(backend.TogetherDecider); ok {
		return &instrumentedTogether{instrumented{next: b, m: m}, td}
	}
	return &instrumented{next: b, m: m}
}

// instrumentedTogether is the decorator of a backend.TogetherDecider.
type instrumentedTogether struct {
	instrumented
	together backend.TogetherDecider
}

// DecideTogether calls the wrapped backend's and records the call.
// A declined call (ok false) decided nothing and is not recorded.
func (b *instrumentedTogether) DecideTogether(ctx context.Context, checks []backend.Check) ([]backend.Result, bool) {
	start := b.m.now()
	res, ok := b.together.DecideTogether(ctx, checks)
	if ok {
		b.recordDone(checks, res, start)
	}
	return res, ok
}

// instrumented is the backend decorator.
type instrumented struct {
	next backend.Backend
	m    *Metrics
}

// Decide calls the wrapped backend and records the call.
func (b *instrumented) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	return b.record(checks, func() []backend.Result { return b.next.Decide(ctx, checks) })
}

// record runs decide, one backend call for checks, and records it.
func (b *instrumented) record(checks []backend.Check, decide func() []backend.Result) []backend.Result {
	start := b.m.now()
	res := decide()
	b.recordDone(checks, res, start)
	return res
}

// recordDone records a call that started at start and returned res.
func (b *instrumented) recordDone(checks []backend.Check, res []backend.Result, start time.Time) {
	b.m.backendTime.Observe(b.m.now().Sub(start).Seconds())
	b.m.backendChecks.Add(float64(len(checks)))
	for i := range res {
		if err := res[i].Err; err != nil {
			b.m.errKind[kindOf(err)].Inc()
		}
	}
}

// Ping calls the wrapped backend.
func (b *instrumented) Ping(ctx context.Context) error { return b.next.Ping(ctx) }

// Close closes the wrapped backend.
func (b *instrumented) Close() error { return b.next.Close() }

// Unwrap returns the wrapped backend, for callers that need its own
// methods.
func (b *instrumented) Unwrap() backend.Backend { return b.next }
