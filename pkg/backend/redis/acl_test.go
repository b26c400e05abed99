package redis

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// TestNoExpireNoKeyWithoutTTL: a Redis user that may not run EXPIREAT,
// PEXPIREAT or PEXPIRE never leaves a key without a TTL: a counter key is
// written with SET ... PX (value and TTL in one command), so its calls
// succeed and it expires; a sliding log's call fails before the log gains
// an entry, naming NOPERM, and leaves no key.
func TestNoExpireNoKeyWithoutTTL(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "noexpire", "on", ">pw", "~*", "+@all", "-expireat", "-pexpireat", "-pexpire", "-expire").Err(); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, Options{URL: srv.Addr(), Auth: "noexpire:pw", KeyPrefix: "ne:", DisableCoalescing: true})
	counters := []limit.Rule{{Unit: limit.Hour, Limit: 5}, {Algorithm: limit.TokenBucket, Unit: limit.Hour, Limit: 5}}
	if r := b.Decide(ctx, []backend.Check{{Identity: "c", Rules: counters, Cost: limit.Cost{N: 1}}})[0]; r.Err != nil || !r.Allowed {
		t.Fatalf("counters: %+v", r)
	}
	log := []limit.Rule{{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: 5}}
	if r := b.Decide(ctx, []backend.Check{{Identity: "l", Rules: log, Cost: limit.Cost{N: 1}}})[0]; r.Err == nil || !strings.Contains(r.Err.Error(), "NOPERM") {
		t.Fatalf("sliding log: %+v, want an error naming NOPERM", r)
	}
	keys, err := admin.Keys(ctx, "ne:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "ne:{c}" {
		t.Fatalf("keys %q, want the counter key of c alone", keys)
	}
	if ttl := admin.PTTL(ctx, "ne:{c}").Val(); ttl <= 0 {
		t.Fatalf("ne:{c} PTTL %v, want a TTL", ttl)
	}
}
