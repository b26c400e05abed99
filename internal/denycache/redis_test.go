package denycache

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/backendtest"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// The contract suite on a cached Redis backend: cached answers equal the
// Lua script's, field by field.
func TestContractRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Backend {
		inner, err := redis.New(context.Background(), redis.Options{URL: srv.Addr(), KeyPrefix: "denycache:", FakeRedisClock: now, Logger: stacktest.QuietLogger()})
		if err != nil {
			t.Fatalf("redis.New: %v", err)
		}
		return New(inner, Options{Clock: elapsed(now)})
	})
}

// TestDifferentialRedis is TestDifferential on a real redis-server: a
// cached and an uncached Redis backend (two key prefixes, one clock) get
// the same random traffic, decided check by check and together
// (all-or-nothing), and answer alike, field by field.
func TestDifferentialRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, together := range []bool{false, true} {
		name := "Decide"
		if together {
			name = "DecideTogether"
		}
		t.Run(name, func(t *testing.T) {
			run := 0
			hits := differential(t, 2, 1500, together, func(t *testing.T, now func() time.Time) (*Backend, backend.Backend) {
				run++
				open := func(prefix string) backend.Backend {
					b, err := redis.New(context.Background(), redis.Options{URL: srv.Addr(), KeyPrefix: prefix, FakeRedisClock: now, Logger: stacktest.QuietLogger()})
					if err != nil {
						t.Fatalf("redis.New: %v", err)
					}
					return b
				}
				tag := name + strconv.Itoa(run)
				return New(open("cached"+tag+":"), Options{Clock: elapsed(now), Size: 4, Shards: 1}), open("model" + tag + ":")
			})
			if hits < 200 {
				t.Errorf("only %d answers came from the cache: the comparison proves little", hits)
			}
		})
	}
}

// BenchmarkAttackRedis decides an attack mix against a real redis-server,
// with and without the cache: 30% of checks on 4 hot keys far over a
// limit of 50 per second, 70% spread over 10000 keys. It reports the share
// of attack denials answered locally and the Redis calls per check.
func BenchmarkAttackRedis(b *testing.B) {
	srv := redistest.Standalone(b)
	for _, cached := range []bool{false, true} {
		name := "cache-off"
		if cached {
			name = "cache-on"
		}
		b.Run(name, func(b *testing.B) {
			inner, err := redis.New(context.Background(), redis.Options{URL: srv.Addr(), KeyPrefix: "bench" + name + ":", Logger: stacktest.QuietLogger(), PoolSize: 64})
			if err != nil {
				b.Fatal(err)
			}
			counted := &counting{Backend: inner}
			var be backend.Backend = counted
			var c *Backend
			if cached {
				c = New(counted, Options{})
				be = c
			}
			defer be.Close()
			rules := []limit.Rule{{Unit: limit.Second, Limit: 50}}
			var attacks, attackDenied atomic.Int64
			var seed atomic.Uint64
			b.SetParallelism(32) // 64 callers on 2 cores, like the load runs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 1))
				ctx := context.Background()
				for pb.Next() {
					attack := rng.Float64() < 0.3
					id := "bench|remote_address=" + strconv.Itoa(rng.IntN(10000))
					if attack {
						id = "bench|remote_address=attack" + strconv.Itoa(rng.IntN(4))
					}
					res := be.Decide(ctx, []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: 1}}})
					if res[0].Err != nil {
						b.Error(res[0].Err)
						return
					}
					if attack {
						attacks.Add(1)
						if !res[0].Allowed {
							attackDenied.Add(1)
						}
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(counted.checks.Load())/float64(b.N), "redis-calls/op")
			if c != nil && attackDenied.Load() > 0 {
				b.ReportMetric(100*float64(c.Stats().Hits)/float64(attackDenied.Load()), "%denials-local")
			}
		})
	}
}
