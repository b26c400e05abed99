package redis

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// TestDecideSplitsBigBatches: a Decide of many checks on one node is sent
// as batch calls of at most maxBatchWeight (a rule weighs 1, a sliding log
// backend.SlidingLogWeight, 64), each check decided once; a Decide decided together stays one call.
func TestDecideSplitsBigBatches(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	ctx := context.Background()
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "split:", DisableCoalescing: true})
	fixed := []limit.Rule{{Unit: limit.Hour, Limit: 5}}
	log := []limit.Rule{{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 5}}
	for _, tc := range []struct {
		name      string
		rules     []limit.Rule
		n         int
		together  bool
		wantCalls int
	}{
		{"1200 fixed windows", fixed, 1200, false, 3}, // 512 + 512 + 176
		{"100 sliding logs", log, 100, false, 13},     // 12 x 8 + 4
		{"1200 fixed windows together", fixed, 1200, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := rc.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			checks := make([]backend.Check, tc.n)
			for i := range checks {
				checks[i] = backend.Check{Identity: fmt.Sprintf("%s|%d", tc.name, i), Rules: tc.rules, Cost: limit.Cost{N: 1}}
			}
			var res []backend.Result
			if tc.together {
				var ok bool
				if res, ok = b.DecideTogether(ctx, checks); !ok {
					t.Fatal("declined")
				}
			} else {
				res = b.Decide(ctx, checks)
			}
			for i, r := range res {
				if r.Err != nil || !r.Allowed || r.Outcomes[0].Remaining != 4 {
					t.Fatalf("check %d: %+v, want admitted with 4 left", i, r)
				}
			}
			stats := redistest.CommandCalls(t, rc)
			if got := stats["evalsha"] + stats["eval"] + stats["fcall"]; got != tc.wantCalls {
				t.Errorf("%d script calls (%v), want %d", got, stats, tc.wantCalls)
			}
		})
	}
}
