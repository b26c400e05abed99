package stacktest

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-rl/sluice/pkg/backend"
)

// deciderFunc is a backend.TogetherDecider from a function.
type deciderFunc func(context.Context, []backend.Check) ([]backend.Result, bool)

func (f deciderFunc) DecideTogether(ctx context.Context, checks []backend.Check) ([]backend.Result, bool) {
	return f(ctx, checks)
}

// TestTogether: every call is counted; a declined call decides nothing;
// otherwise Decider answers, or Backend's Decide where Decider is nil.
func TestTogether(t *testing.T) {
	errDecider := errors.New("from the decider")
	decider := deciderFunc(func(_ context.Context, checks []backend.Check) ([]backend.Result, bool) {
		res := make([]backend.Result, len(checks))
		for i := range res {
			res[i].Err = errDecider
		}
		return res, true
	})
	tests := []struct {
		name    string
		decider backend.TogetherDecider
		decline bool
		wantOK  bool
		wantErr error // every result's error; nil with wantOK false: no results
	}{
		{name: "declined", decider: decider, decline: true},
		{name: "the decider answers", decider: decider, wantOK: true, wantErr: errDecider},
		{name: "Decide answers without a decider", wantOK: true, wantErr: ErrRedisDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &Together{Backend: FailingBackend{Err: ErrRedisDown}, Decider: tt.decider, Decline: tt.decline}
			for call := 1; call <= 2; call++ {
				res, ok := b.DecideTogether(context.Background(), make([]backend.Check, 2))
				if ok != tt.wantOK || b.Calls != call {
					t.Fatalf("call %d: ok %v, Calls %d; want ok %v, Calls %d", call, ok, b.Calls, tt.wantOK, call)
				}
				if !ok {
					if res != nil {
						t.Fatalf("a declined call returned %d results", len(res))
					}
					continue
				}
				if len(res) != 2 || res[0].Err != tt.wantErr || res[1].Err != tt.wantErr {
					t.Fatalf("call %d: results %+v, want 2 with error %v", call, res, tt.wantErr)
				}
			}
		})
	}
}
