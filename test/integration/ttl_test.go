package integration

import (
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// ttlConfig has one descriptor per algorithm, each 5 per 2 seconds.
const ttlConfig = `domain: ttl
descriptors:
  - {key: fixed_window,   rate_limits: [{algorithm: fixed_window,   unit: second, unit_multiplier: 2, requests_per_unit: 5}]}
  - {key: sliding_window, rate_limits: [{algorithm: sliding_window, unit: second, unit_multiplier: 2, requests_per_unit: 5}]}
  - {key: sliding_log,    rate_limits: [{algorithm: sliding_log,    unit: second, unit_multiplier: 2, requests_per_unit: 5}]}
  - {key: token_bucket,   rate_limits: [{algorithm: token_bucket,   unit: second, unit_multiplier: 2, requests_per_unit: 5}]}
  - {key: leaky_bucket,   rate_limits: [{algorithm: leaky_bucket,   unit: second, unit_multiplier: 2, requests_per_unit: 5}]}
  - {key: gcra,           rate_limits: [{algorithm: gcra,           unit: second, unit_multiplier: 2, requests_per_unit: 5}]}
`

// ttlPeriod is the period of ttlConfig's rules.
const ttlPeriod = 2 * time.Second

// TestKeysExpireWhenIdle: every key sluice writes carries a TTL no longer
// than its rule needs (here rules of 2 seconds), so an idle descriptor
// leaves nothing behind in Redis. Each descriptor takes its whole limit, so
// every key lives at least until the end of its window or period (the
// fixed window is kept a second from its edge), long enough to be seen.
func TestKeysExpireWhenIdle(t *testing.T) {
	rs := redistest.Standalone(t)
	p := sluicetest.Start(t, sluicetest.Options{
		ConfigDir: configDir(t, map[string]string{"ttl.yaml": ttlConfig}),
		Env:       standaloneEnv(rs),
	})
	algs := []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "gcra"}
	var descs [][]sluicetest.Entry
	for _, a := range algs {
		descs = append(descs, entries(a, "x"))
	}
	sluicetest.AwayFromEdge(t, ttlPeriod, 0, time.Second)
	resp := call(t, p, withCost(sluicetest.Request("ttl", 0, descs...), 5, false))
	if resp.OverallCode != ok {
		t.Fatalf("first call: %v", resp)
	}

	ctx := ctxFor(t, 20*time.Second)
	rc := rs.Client()
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(algs) {
		t.Fatalf("%d keys %q after one call of %d one-rule descriptors, want one each", len(keys), keys, len(algs))
	}
	var report []string
	for _, k := range keys {
		ttl, err := rc.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The sliding window's count still weighs on the next window; every
		// other state is over within one period.
		most := ttlPeriod
		if strings.Contains(k, "sliding_window") {
			most = 2 * ttlPeriod
		}
		if !strings.Contains(k, "sliding_log") {
			// Counters are written with SET ... PX and may live up to
			// two ms past their expiry (pkg/scripts/CONTRACT.md says why); logs use
			// PEXPIREAT.
			most += 2 * time.Millisecond
		}
		if ttl <= 0 || ttl > most {
			t.Errorf("key %q: PTTL %v, want within (0, %v]", k, ttl, most)
		}
		report = append(report, k+" "+ttl.String())
	}
	t.Logf("keys after one call, with their PTTL:\n%s", strings.Join(report, "\n"))
	testenv.Until(t, 10*time.Second, "every key to expire", func() bool {
		n, err := rc.DBSize(context.Background()).Result()
		return err == nil && n == 0
	})
}
