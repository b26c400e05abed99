package rlqs

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// newRedisStore returns the quota store of a Redis backend on addr.
func newRedisStore(t testing.TB, opts redis.Options) *redis.QuotaStore {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	opts.Logger = log
	b, err := redis.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b.QuotaStore()
}

// TestTwoInstancesOneRedis is the done-when scenario: Envoys share a 60 per
// minute rule through two sluice instances on one redis-server, under
// shifting demand; what they admit together per minute stays within
// 60 x (1 + eps), and a bucket no rule matches is never denied.
func TestTwoInstancesOneRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := parseConfig(t, simConfig)
	config := func() *descriptor.Config { return cfg }
	const eps = 0.1
	cases := []struct {
		name  string
		rates []func(time.Duration) float64
	}{
		{"2 envoys shifting", []func(time.Duration) float64{shifting(3, 0.2, 20*time.Second, 0), shifting(3, 0.2, 20*time.Second, 1)}},
		{"3 envoys steady", []func(time.Duration) float64{steady(1), steady(1), steady(1)}},
		{"3 envoys skewed", []func(time.Duration) float64{steady(5), steady(0.3), steady(0.1)}},
		{"10 envoys shifting", func() []func(time.Duration) float64 {
			var rs []func(time.Duration) float64
			for i := range 10 {
				rs = append(rs, shifting(2, 0.05, 15*time.Second, i%2))
			}
			return rs
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := testenv.NewClock(simStart)
			prefix := t.Name() + ":"
			a := startInstance(t, newRedisStore(t, redis.Options{URL: srv.Addr(), KeyPrefix: prefix}), config, clock.Now, Options{})
			b := startInstance(t, newRedisStore(t, redis.Options{URL: srv.Addr(), KeyPrefix: prefix}), config, clock.Now, Options{})
			envoys := newEnvoys(clock, []*instance{a, b}, tc.rates)
			run := simulate(clock, envoys, map[string]string{"api": "orders"}, 5*time.Minute, 50*time.Millisecond, nil)
			t.Log(describeRun(run))
			if run.unmatchedDenied > 0 {
				t.Errorf("unmatched bucket denied %d times", run.unmatchedDenied)
			}
			if m := run.maxWindow(); float64(m) > 60*(1+eps) {
				t.Errorf("a window admitted %d, more than 60 x (1 + %v)", m, eps)
			}
		})
	}
}
