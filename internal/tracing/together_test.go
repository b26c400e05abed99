package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-rl/sluice/internal/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// The traced backend forwards DecideTogether to a backend that has it,
// inside a span, and declines for one that does not.
func TestBackendForwardsTogether(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr, err := Setup(context.Background(), Options{Enabled: true, Exporter: exp, Getenv: env{}.get})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	mem := memory.New(memory.Options{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
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
