package redis

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/identity"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// allRules is one rule of every algorithm, plus a calendar window.
func allRules(t *testing.T) []limit.Rule {
	t.Helper()
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	return []limit.Rule{
		{Unit: limit.Minute, Limit: 5},
		{Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 5},
		{Algorithm: limit.SlidingWindow, Unit: limit.Minute, Limit: 5},
		{Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 3, Burst: 5},
		{Algorithm: limit.LeakyBucket, Unit: limit.Minute, Multiplier: 2, Limit: 7},
		{Algorithm: limit.GCRA, Unit: limit.Hour, Limit: 100, Burst: 10},
		{Unit: limit.Day, Limit: 50, Location: sh},
	}
}

func TestKeyFormat(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		prefix, identity string
		rule             limit.Rule
		want             string
	}{
		{"", "api|user=alice", limit.Rule{Unit: limit.Second, Limit: 10}, "{api|user=alice}"},
		{"rl:", "api|user=alice", limit.Rule{Algorithm: limit.TokenBucket, Unit: limit.Minute, Multiplier: 5, Limit: 10}, "rl:{api|user=alice}"},
		{"rl:", "d", limit.Rule{Unit: limit.Day, Limit: 1, Location: ny}, "rl:{d}"},
		{"rl:", "d", limit.Rule{Algorithm: limit.SlidingLog, Unit: limit.UnitUnknown, Limit: 1}, "rl:{d}"}, // no period: no state of its own
		{"x", "d|k=%7Bv%7D", limit.Rule{Algorithm: limit.SlidingLog, Unit: limit.Month, Limit: 1}, "x{d|k=%7Bv%7D}:sl.1mo"},
	}
	for _, tt := range tests {
		if got := Key(tt.prefix, tt.identity, tt.rule); got != tt.want {
			t.Errorf("Key(%q, %q, %v) = %q, want %q", tt.prefix, tt.identity, tt.rule, got, tt.want)
		}
	}
}

func TestBadChecks(t *testing.T) {
	srv := redistest.Standalone(t)
	b := newBackend(t, Options{URL: srv.Addr()})
	rule := []limit.Rule{{Unit: limit.Second, Limit: 1}}
	checks := []backend.Check{
		{Identity: "", Rules: rule, Cost: limit.Cost{N: 1}},
		{Identity: "a{b", Rules: rule, Cost: limit.Cost{N: 1}},
		{Identity: "ok", Rules: []limit.Rule{{Algorithm: 42, Unit: limit.Second}}, Cost: limit.Cost{N: 1}},
		{Identity: "ok", Rules: rule, Cost: limit.Cost{N: 1}},
	}
	res := b.Decide(context.Background(), checks)
	for i := range 3 {
		if res[i].Err == nil || errors.Is(res[i].Err, backend.ErrUnavailable) {
			t.Errorf("check %d: err %v, want a non-ErrUnavailable error", i, res[i].Err)
		}
	}
	if res[3].Err != nil || !res[3].Allowed {
		t.Errorf("the good check beside bad ones: %+v", res[3])
	}
}

// TestKeysShareOneSlot checks, on a real cluster, that every rule of a
// descriptor lands in the slot of its identity, whatever the identity
// holds, and that deciding them in one script works there.
func TestKeysShareOneSlot(t *testing.T) {
	c := cluster.Get(t)
	opts := clusterOptions(c)
	opts.KeyPrefix = "slots:"
	b := newBackend(t, opts)
	rules := allRules(t)
	ids := []string{
		identity.Encode("api", []identity.Entry{{Key: "user", Value: "alice"}}),
		identity.Encode("api", []identity.Entry{{Key: "path", Value: "/a{b}c"}, {Key: "x", Value: "}{"}}),
		identity.Encode("api", []identity.Entry{{Key: "blob", Value: strings.Repeat("z", 500)}}), // hashed
		identity.Encode("d", nil),
	}
	for _, id := range ids {
		want, err := c.KeySlot(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			k := Key(opts.KeyPrefix, id, r)
			got, err := c.KeySlot(k)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: slot %d, identity %q has slot %d", k, got, id, want)
			}
		}
		res := b.Decide(context.Background(), []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: 1}}})
		if res[0].Err != nil || !res[0].Allowed {
			t.Errorf("identity %q: %+v", id, res[0])
		}
	}
}

// TestKeyPrefixAndTTL decides on Redis's own clock (the production path)
// and checks every key's name and absolute expiry: never before
// limit.Rule.Expiry (the state still counts until then) and not more than
// the millisecond rounding after it, plus two ms for counters (the script,
// see pkg/scripts/CONTRACT.md, writes them with SET ... PX, which counts from Redis's clock when SET
// runs, up to a millisecond boundary after the TIME the script read, or,
// on Redis 7.2+, from the script's start, up to one before it: the script
// adds one ms so that a key never expires early).
func TestKeyPrefixAndTTL(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	ctx := context.Background()
	const prefix = "ttl:"
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: prefix})
	rules := allRules(t)
	id := "ttl|user=bob"
	cost := limit.Cost{N: 2}

	t0 := redisTime(t, rc)
	res := b.Decide(ctx, []backend.Check{{Identity: id, Rules: rules, Cost: cost}})
	t1 := redisTime(t, rc)
	if res[0].Err != nil || !res[0].Allowed {
		t.Fatalf("decide: %+v", res[0])
	}

	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The counter key lives as long as its latest record.
	type span struct{ lo, hi int64 }
	expires := map[string]span{}
	for _, r := range rules {
		k := Key(prefix, id, r)
		lo, hi := expiryMillis(r, t0, cost), expiryMillis(r, t1, cost)
		if r.Algorithm != limit.SlidingLog {
			hi += 2
		}
		if e, ok := expires[k]; ok {
			lo, hi = max(lo, e.lo), max(hi, e.hi)
		}
		expires[k] = span{lo, hi}
	}
	want := slices.Sorted(maps.Keys(expires))
	if want[0] != CounterKey(prefix, id) || len(want) != 2 {
		t.Fatalf("keys %q, want the counter key and the sliding log's", want)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	for k, e := range expires {
		at, err := rc.Do(ctx, "PEXPIRETIME", k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if at < e.lo || at > e.hi {
			t.Errorf("%s expires at %d ms, want within [%d, %d] (Expiry rounded up to the ms, for now in [%d, %d] µs)", k, at, e.lo, e.hi, t0, t1)
		}
	}

	// A refund that empties the state deletes the keys.
	res = b.Decide(ctx, []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: 2, Refund: true}}})
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	if n := rc.Exists(ctx, want...).Val(); n != 0 {
		left, _ := rc.Keys(ctx, "*").Result()
		t.Fatalf("%d keys left after refunding everything: %q", n, left)
	}
}

// expiryMillis is when a key holding r's state after cost at now (µs) may
// go, as Redis stores it: limit.Rule.Expiry rounded up to the ms.
func expiryMillis(r limit.Rule, now limit.Micros, cost limit.Cost) int64 {
	st := &limit.State{}
	limit.Decide([]limit.Rule{r}, []*limit.State{st}, now, cost)
	return (r.Expiry(st, now) + 999) / 1000
}

// redisTime reads Redis's clock in µs.
func redisTime(t *testing.T, c *goredis.Client) limit.Micros {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// TestSlidingLogBounded hammers a sliding log from many goroutines, with
// refunds mixed in, and checks the sorted set never holds more members
// than the limit and that exactly the limit was admitted.
func TestSlidingLogBounded(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	ctx := context.Background()
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "log:"})
	const limitN = 25
	rule := limit.Rule{Algorithm: limit.SlidingLog, Unit: limit.Hour, Limit: limitN}
	key := Key("log:", "logs", rule)
	var mu sync.Mutex
	admitted, refunded := 0, 0
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				cost := limit.Cost{N: uint64(1 + (g+i)%3)}
				if (g+i)%7 == 0 {
					cost = limit.Cost{N: 1, Refund: true}
				}
				res := b.Decide(ctx, []backend.Check{{Identity: "logs", Rules: []limit.Rule{rule}, Cost: cost}})
				if res[0].Err != nil {
					t.Error(res[0].Err)
					return
				}
				n, err := rc.ZCard(ctx, key).Result()
				if err != nil {
					t.Error(err)
					return
				}
				if n > limitN {
					t.Errorf("sliding log holds %d members, limit %d", n, limitN)
				}
				mu.Lock()
				if cost.Refund {
					refunded++
				} else if res[0].Allowed {
					admitted += int(cost.N)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	n := rc.ZCard(ctx, key).Val()
	if n > limitN || n == 0 {
		t.Fatalf("final sliding log holds %d members, want 1..%d", n, limitN)
	}
	t.Logf("admitted %d units with %d refunds of 1; log holds %d", admitted, refunded, n)
}

// TestUnixSocket decides over a unix socket, as the reference's default
// REDIS_SOCKET_TYPE=unix does.
func TestUnixSocket(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, opts := range []Options{
		{URL: srv.SocketPath()},
		{URL: srv.SocketPath(), SocketType: "unix"},
		{URL: "unix://" + srv.SocketPath()},
	} {
		b := newBackend(t, opts)
		if r := b.Decide(context.Background(), []backend.Check{{Identity: "sock", Rules: threeRules, Cost: limit.Cost{N: 1}}})[0]; r.Err != nil || !r.Allowed {
			t.Errorf("%+v: %+v", opts, r)
		}
	}
}
