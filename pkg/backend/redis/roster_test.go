package redis

import (
	"context"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
)

// TestRoster: instances sharing a Redis (standalone, and a Cluster, where
// the roster is one key) list each other's admin listeners; an entry that
// lapsed is not listed and is dropped at the next announcement; Run
// removes its own entry when it stops.
func TestRoster(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(t *testing.T) Options
	}{
		{"standalone", func(t *testing.T) Options { return Options{URL: redistest.Standalone(t).Addr()} }},
		{"cluster", func(t *testing.T) Options { return clusterOptions(cluster.Get(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts(t)
			opts.KeyPrefix = "roster-" + tc.name + "_"
			a, b := newBackend(t, opts), newBackend(t, opts)
			ctx := context.Background()
			ra, rb := a.NewRoster("10.0.0.1:6070"), b.NewRoster("10.0.0.2:6070")
			for _, r := range []*Roster{ra, rb} {
				if err := r.announce(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// An instance that died 31 s ago without removing itself.
			now, err := ra.now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			c := goredis.NewUniversalClient(&goredis.UniversalOptions{Addrs: []string{firstAddr(opts.URL)}, IsClusterMode: opts.Type == TypeCluster})
			defer c.Close()
			if err := c.ZAdd(ctx, ra.key, goredis.Z{Score: float64(now - 1000), Member: "10.0.0.9:6070"}).Err(); err != nil {
				t.Fatal(err)
			}
			got, err := rb.Instances(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"10.0.0.1:6070", "10.0.0.2:6070"}; !slices.Equal(got, want) {
				t.Fatalf("instances %q, want %q", got, want)
			}
			if err := ra.announce(ctx); err != nil {
				t.Fatal(err)
			}
			if n := c.ZCard(ctx, ra.key).Val(); n != 2 {
				t.Errorf("the lapsed entry was not dropped: %d entries", n)
			}
			if ttl := c.PTTL(ctx, ra.key).Val(); ttl <= 0 || ttl > rosterTTL {
				t.Errorf("the roster key's TTL is %v, want (0, %v]", ttl, rosterTTL)
			}

			// Run announces at once and removes its entry when stopped.
			rc := a.NewRoster("10.0.0.3:6070")
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { rc.Run(rctx); close(done) }()
			testenv.Until(t, 10*time.Second, "Run's first announcement", func() bool {
				got, _ := ra.Instances(ctx)
				return slices.Contains(got, "10.0.0.3:6070")
			})
			cancel()
			<-done
			if got, _ = ra.Instances(ctx); slices.Contains(got, "10.0.0.3:6070") {
				t.Errorf("a stopped Run's entry is still listed: %q", got)
			}
			// A roster that announces nothing only reads.
			if got, err := b.NewRoster("").Instances(ctx); err != nil || len(got) != 2 {
				t.Errorf("reader: %q, %v", got, err)
			}
		})
	}
}

// firstAddr is the first address of a comma-separated URL list.
func firstAddr(url string) string {
	for i := range len(url) {
		if url[i] == ',' {
			return url[:i]
		}
	}
	return url
}
