package integration

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// sharedConfig limits one descriptor per algorithm to 100. The windows are
// long (a year, an hour) and the bucket refills one token a year, so
// nothing is given back while the test runs: exactly 100 may pass.
const sharedConfig = `domain: shared
descriptors:
  - key: fixed
    rate_limits:
      - {algorithm: fixed_window, unit: year, requests_per_unit: 100}
  - key: bucket
    rate_limits:
      - {algorithm: token_bucket, unit: year, requests_per_unit: 1, burst: 100}
  - key: log
    rate_limits:
      - {algorithm: sliding_log, unit: hour, requests_per_unit: 100}
`

// TestTwoInstancesShareTheLimit runs two sluice processes on the cluster
// with the same key prefix and drives both at once from concurrent
// clients: together they admit exactly the limit, never more, never less.
func TestTwoInstancesShareTheLimit(t *testing.T) {
	env := clusterEnv(t, cluster.Get(t))
	dir := configDir(t, map[string]string{"shared.yaml": sharedConfig})
	procs := []*sluicetest.Process{
		sluicetest.Start(t, sluicetest.Options{ConfigDir: dir, Env: env}),
		sluicetest.Start(t, sluicetest.Options{ConfigDir: dir, Env: env}),
	}
	// The fixed window is an epoch-aligned 365-day year.
	sluicetest.AwayFromEdge(t, 365*24*time.Hour, 0, time.Minute)

	const (
		limit          = 100
		attempts       = 3 * limit
		clientsPerProc = 4
	)
	for _, key := range []string{"fixed", "bucket", "log"} {
		t.Run(key, func(t *testing.T) {
			d := entries(key, sluicetest.Unique(key))
			ctx := ctxFor(t, 30*time.Second)
			var next, admitted, denied atomic.Int64
			var mu sync.Mutex
			var errs []error
			var wg sync.WaitGroup
			for _, p := range procs {
				for range clientsPerProc {
					wg.Go(func() {
						for next.Add(1) <= attempts {
							resp, err := p.ShouldRateLimit(ctx, "shared", 0, d)
							switch {
							case err != nil:
								mu.Lock()
								errs = append(errs, fmt.Errorf("pid %d: %w", p.PID(), err))
								mu.Unlock()
							case resp.OverallCode == ok:
								admitted.Add(1)
							case resp.OverallCode == over:
								denied.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("%d calls failed; first: %v", len(errs), errs[0])
			}
			if admitted.Load() != limit || denied.Load() != attempts-limit {
				t.Errorf("%s: %d admitted, %d denied of %d calls on two instances; want exactly %d admitted",
					key, admitted.Load(), denied.Load(), attempts, limit)
			}
			// Each instance sees the shared state: a peek on either shows 0 left.
			for _, p := range procs {
				if st := peek(t, p, "shared", d); st.LimitRemaining != 0 {
					t.Errorf("%s: peek on pid %d: remaining %d, want 0", key, p.PID(), st.LimitRemaining)
				}
			}
		})
	}
}
