package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/sluicetest"
)

// ttlConfig has one descriptor per algorithm, each 5 a second.
const ttlConfig = `domain: ttl
descriptors:
  - {key: fixed_window,   rate_limits: [{algorithm: fixed_window,   unit: second, requests_per_unit: 5}]}
  - {key: sliding_window, rate_limits: [{algorithm: sliding_window, unit: second, requests_per_unit: 5}]}
  - {key: sliding_log,    rate_limits: [{algorithm: sliding_log,    unit: second, requests_per_unit: 5}]}
  - {key: token_bucket,   rate_limits: [{algorithm: token_bucket,   unit: second, requests_per_unit: 5}]}
  - {key: leaky_bucket,   rate_limits: [{algorithm: leaky_bucket,   unit: second, requests_per_unit: 5}]}
  - {key: gcra,           rate_limits: [{algorithm: gcra,           unit: second, requests_per_unit: 5}]}
`

// TestKeysExpireWhenIdle: every key sluice writes carries a TTL no longer
// than its rule needs (here rules of one second), so an idle descriptor
// leaves nothing behind in Redis.
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
	resp := call(t, p, sluicetest.Request("ttl", 0, descs...))
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
		// The longest any algorithm needs here is the sliding window's: the
		// current window's count still weighs on the next one.
		if ttl <= 0 || ttl > 2*time.Second {
			t.Errorf("key %q: PTTL %v, want within (0, 2s] for one-second rules", k, ttl)
		}
		report = append(report, k+" "+ttl.String())
	}
	t.Logf("keys after one call, with their PTTL:\n%s", strings.Join(report, "\n"))
	waitUntil(t, 10*time.Second, "every key to expire", func() bool {
		n, err := rc.DBSize(context.Background()).Result()
		return err == nil && n == 0
	})
}
