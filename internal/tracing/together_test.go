package tracing

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// The traced backend forwards DecideTogether to a backend that has it,
// inside a span, and declines for one that does not.
func TestBackendForwardsTogether(t *testing.T) {
	tr, exp := inMemory(t, Options{})
	mem := newMemory(t)
	checks := []backend.Check{{Identity: "a", Rules: []limit.Rule{{Unit: limit.Hour, Limit: 1}}, Cost: limit.Cost{N: 1}}}

	td, ok := tr.InstrumentBackend(mem).(backend.TogetherDecider)
	if !ok {
		t.Fatal("the traced backend has no DecideTogether")
	}
	if res, ok := td.DecideTogether(context.Background(), checks); !ok || len(res) != 1 || !res[0].Allowed {
		t.Fatalf("DecideTogether through tracing: ok=%v %+v", ok, res)
	}
	tr.ForceFlush(context.Background())
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].Name != BackendSpanName {
		t.Errorf("spans %v, want one backend span", names(spans))
	}

	plain := tr.InstrumentBackend(stacktest.FailingBackend{}).(backend.TogetherDecider)
	if res, ok := plain.DecideTogether(context.Background(), checks); ok || res != nil {
		t.Errorf("a backend without DecideTogether: ok=%v %+v, want declined", ok, res)
	}
}
