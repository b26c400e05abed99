package denycache

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// BenchmarkDecide compares a hit (a known denial answered locally) with a
// miss (an admitted check that goes through to the memory backend) and
// with the memory backend alone, for one rule and for three.
func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	sets := map[string][]limit.Rule{
		"1rule":  {{Unit: limit.Second, Limit: 1 << 40}},
		"3rules": {{Unit: limit.Second, Limit: 1 << 40}, {Unit: limit.Minute, Limit: 1 << 41}, {Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 1 << 42}},
	}
	for _, name := range []string{"1rule", "3rules"} {
		rules := sets[name]
		denied := make([]limit.Rule, len(rules))
		copy(denied, rules)
		denied[0].Limit = 0 // denies every cost, until the second ends
		clock := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
		b.Run(name+"/hit", func(b *testing.B) {
			c := New(memory.New(memory.Options{Now: clock, SweepInterval: -1}), Options{Clock: elapsed(clock)})
			defer c.Close()
			checks := []backend.Check{{Identity: "api|remote_address=10.0.0.1", Rules: denied, Cost: limit.Cost{N: 1}}}
			c.Decide(ctx, checks)
			b.ReportAllocs()
			for b.Loop() {
				c.Decide(ctx, checks)
			}
			if st := c.Stats(); st.Hits < uint64(b.N) {
				b.Fatalf("%d hits for %d calls", st.Hits, b.N)
			}
		})
		b.Run(name+"/miss", func(b *testing.B) {
			c := New(memory.New(memory.Options{Now: clock, SweepInterval: -1}), Options{Clock: elapsed(clock)})
			defer c.Close()
			benchmarkAdmitted(b, c, rules)
		})
		b.Run(name+"/memory", func(b *testing.B) {
			m := memory.New(memory.Options{Now: clock, SweepInterval: -1})
			defer m.Close()
			benchmarkAdmitted(b, m, rules)
		})
	}
	b.Run("1rule/hit-parallel", func(b *testing.B) {
		c := New(memory.New(memory.Options{SweepInterval: -1}), Options{})
		defer c.Close()
		rules := []limit.Rule{{Unit: limit.Hour, Limit: 0}}
		ids := make([]string, 64)
		for i := range ids {
			ids[i] = "api|remote_address=10.0.0." + strconv.Itoa(i)
			c.Decide(ctx, []backend.Check{{Identity: ids[i], Rules: rules, Cost: limit.Cost{N: 1}}})
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				c.Decide(ctx, []backend.Check{{Identity: ids[i%len(ids)], Rules: rules, Cost: limit.Cost{N: 1}}})
				i++
			}
		})
	})
}

// benchmarkAdmitted decides admitted checks over 1024 identities.
func benchmarkAdmitted(b *testing.B, be backend.Backend, rules []limit.Rule) {
	ctx := context.Background()
	checks := make([][]backend.Check, 1024)
	for i := range checks {
		checks[i] = []backend.Check{{Identity: "api|remote_address=10.0." + strconv.Itoa(i), Rules: rules, Cost: limit.Cost{N: 1}}}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if res := be.Decide(ctx, checks[i%len(checks)]); !res[0].Allowed {
			b.Fatal("denied")
		}
		i++
	}
}
