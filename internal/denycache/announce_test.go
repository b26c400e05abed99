package denycache

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// Reset passes a reset on to the counted backend.
func (c *counting) Reset(ctx context.Context, identity string, rules []limit.Rule) error {
	return c.Backend.(backend.Resetter).Reset(ctx, identity, rules)
}

// instance is one sluice's Redis backend, denial cache and announcer.
type instance struct {
	inner      *counting
	cache      *Backend
	ann        *redis.Announcer
	forgot     chan string   // identities forgotten on another's announcement
	subscribed chan struct{} // each (re)subscription
}

func newInstance(t *testing.T, ctx context.Context, addr string) *instance {
	t.Helper()
	r, err := redis.New(ctx, redis.Options{URL: addr, KeyPrefix: "two:", Logger: stacktest.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{inner: &counting{Backend: r}, ann: r.NewAnnouncer(), forgot: make(chan string, 16), subscribed: make(chan struct{}, 16)}
	in.cache = New(in.inner, Options{Announce: in.ann.Announce, MaxAge: -1})
	t.Cleanup(func() { in.cache.Close() })
	go in.ann.Run(ctx,
		func(id string) { in.cache.Forget(id); in.forgot <- id },
		func() { in.cache.ForgetAll(); in.subscribed <- struct{}{} })
	in.wait(t, in.subscribed, "subscription")
	return in
}

func (in *instance) wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
	}
}

func (in *instance) waitForgot(t *testing.T, id string) {
	t.Helper()
	select {
	case got := <-in.forgot:
		if got != id {
			t.Fatalf("forgot %q, want %q", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%q not forgotten within 10s of the announcement", id)
	}
}

// decide asks one check and reports the decision and whether it was
// answered from the cache.
func (in *instance) decide(t *testing.T, id string, rules []limit.Rule, n uint64, refund bool) (bool, bool) {
	t.Helper()
	before := in.inner.checks.Load()
	res := in.cache.Decide(context.Background(), []backend.Check{{Identity: id, Rules: rules, Cost: limit.Cost{N: n, Refund: refund}}})
	if res[0].Err != nil {
		t.Fatalf("Decide: %v", res[0].Err)
	}
	return res[0].Decision.Allowed, in.inner.checks.Load() == before
}

// Two instances on one real redis-server: a refund or a reset on B ends
// the denial A has cached, within the pub/sub delivery time, instead of
// at the end of the window (an hour here).
func TestRefundElsewhereEndsCachedDenial(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := newInstance(t, ctx, srv.Addr()), newInstance(t, ctx, srv.Addr())
	hourly := []limit.Rule{{Name: "hourly", Unit: limit.Hour, Limit: 2}}

	tests := []struct {
		name   string
		change func(id string) // B's change behind A's cache
	}{
		{"refund", func(id string) {
			if ok, _ := b.decide(t, id, hourly, 1, true); !ok {
				t.Fatal("refund on B not accepted")
			}
		}},
		{"reset", func(id string) {
			if err := b.cache.Reset(context.Background(), id, hourly); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "api\x00user\x00" + tt.name
			for range 2 {
				if ok, _ := a.decide(t, id, hourly, 1, false); !ok {
					t.Fatal("within the limit: denied")
				}
			}
			if ok, cached := a.decide(t, id, hourly, 1, false); ok || cached {
				t.Fatalf("over the limit: allowed %v cached %v, want Redis's denial", ok, cached)
			}
			if ok, cached := a.decide(t, id, hourly, 1, false); ok || !cached {
				t.Fatalf("again: allowed %v cached %v, want the cached denial", ok, cached)
			}
			tt.change(id)
			a.waitForgot(t, id)
			if ok, cached := a.decide(t, id, hourly, 1, false); !ok || cached {
				t.Fatalf("after B's %s: allowed %v cached %v, want Redis's admission", tt.name, ok, cached)
			}
		})
	}
	// A may hear an announcement before B's PUBLISH has returned and been
	// counted: wait for B's count to settle before judging it.
	st := settledStats(t, b.ann, 2)
	if st.Published != 2 || st.Failed != 0 {
		t.Errorf("B's announcer: %+v, want 2 published", st)
	}
	if st := a.ann.Stats(); st.Published != 0 || st.Received != 2 {
		t.Errorf("A's announcer: %+v, want 2 received and nothing published", st)
	}
}

// A lost subscription may have missed announcements: once it is back,
// everything cached is forgotten.
func TestResubscribeForgetsEverything(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newInstance(t, ctx, srv.Addr())
	perHour := []limit.Rule{{Unit: limit.Hour, Limit: 1}}
	a.decide(t, "k", perHour, 1, false)
	a.decide(t, "k", perHour, 1, false) // denied: cached
	if a.cache.Len() != 1 {
		t.Fatalf("cache holds %d identities, want 1", a.cache.Len())
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	a.wait(t, a.subscribed, "resubscription")
	if a.cache.Len() != 0 {
		t.Fatalf("after resubscribing the cache holds %d identities, want 0", a.cache.Len())
	}
}

// settledStats waits (at most 10 s) until ann has published, failed or
// dropped n announcements, and returns its counters then.
func settledStats(t *testing.T, ann *redis.Announcer, n uint64) redis.AnnouncerStats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := ann.Stats()
		if st.Published+st.Failed+st.Dropped >= n || time.Now().After(deadline) {
			return st
		}
		<-time.After(time.Millisecond) // poll for an event, bounded by the deadline
	}
}
