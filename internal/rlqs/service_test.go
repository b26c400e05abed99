package rlqs

import (
	"sync/atomic"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-rl/sluice/internal/testkit/envoyquota"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// strategyOf describes an assignment's strategy: "allow_all", "deny_all",
// "token_bucket N/Ss max M", or "none".
func strategyOf(e *envoyquota.Envoy, bucket map[string]string) (string, int64) {
	a := e.Assignment(bucket).GetQuotaAssignmentAction()
	if a == nil {
		return "none", 0
	}
	s := a.GetRateLimitStrategy()
	ttl := a.GetAssignmentTimeToLive().GetSeconds()
	if tb := s.GetTokenBucket(); tb != nil {
		return "token_bucket " + itoa(int64(tb.GetTokensPerFill().GetValue())) + "/" + itoa(tb.GetFillInterval().GetSeconds()) + "s max " + itoa(int64(tb.GetMaxTokens())), ttl
	}
	if s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
		return "deny_all", ttl
	}
	return "allow_all", ttl
}

func itoa(n int64) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestAssignments: what one Envoy is assigned for each kind of bucket,
// on its first report.
func TestAssignments(t *testing.T) {
	cases := []struct {
		name    string
		bucket  map[string]string
		want    string
		wantTTL int64
	}{
		{"window rule: the limit less the first request", map[string]string{"api": "orders"}, "token_bucket 60/60s max 59", 10},
		{"rate rule: the rate, the burst", map[string]string{"api": "search"}, "token_bucket 10/1s max 20", 10},
		{"two rules: the slower rate binds, the smaller capacity", map[string]string{"api": "both"}, "token_bucket 60/60s max 20", 10},
		{"unlimited", map[string]string{"api": "free"}, "allow_all", 10},
		{"unmatched", map[string]string{"api": "nope"}, "allow_all", 10},
		{"unmatched, other key", map[string]string{"x": "y"}, "allow_all", 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := testenv.NewClock(simStart)
			cfg := parseConfig(t, simConfig)
			in := startInstance(t, memory.NewQuotaStore(), func() *descriptor.Config { return cfg }, clock.Now, Options{})
			e := envoyquota.New(envoyquota.Config{Domain: "rlqs", ReportingInterval: time.Second}, in.conn, clock.Now)
			defer e.Close()
			e.Request(tc.bucket)
			if got, ttl := strategyOf(e, tc.bucket); got != tc.want || ttl != tc.wantTTL {
				t.Errorf("assignment %q ttl %d, want %q ttl %d", got, ttl, tc.want, tc.wantTTL)
			}
		})
	}
}

// TestWindowUsedUpDeniesUntilItsEnd: once a window rule's window is used
// up, the assignment is DENY_ALL living until the window's end.
func TestWindowUsedUpDeniesUntilItsEnd(t *testing.T) {
	clock := testenv.NewClock(simStart)
	cfg := parseConfig(t, simConfig)
	in := startInstance(t, memory.NewQuotaStore(), func() *descriptor.Config { return cfg }, clock.Now, Options{})
	e := envoyquota.New(envoyquota.Config{Domain: "rlqs", ReportingInterval: time.Second}, in.conn, clock.Now)
	defer e.Close()
	b := map[string]string{"api": "orders"}
	admitted := 0
	for i := 0; i < 100; i++ {
		if e.Request(b) {
			admitted++
		}
	}
	clock.Advance(time.Second)
	e.Tick()
	if got, ttl := strategyOf(e, b); got != "deny_all" || ttl != 59 {
		t.Errorf("after %d admitted: %q ttl %d, want deny_all ttl 59", admitted, got, ttl)
	}
	if admitted != 60 {
		t.Errorf("admitted %d in the first second, want 60", admitted)
	}
	clock.Advance(59 * time.Second)
	e.Tick()
	if got, _ := strategyOf(e, b); got != "token_bucket 60/60s max 60" {
		t.Errorf("in the next window: %q", got)
	}
}

// TestAbandon: a bucket that reports no request for AbandonAfter, or
// whose rules leave the config, is abandoned; Envoy forgets it and
// subscribes again at its next request.
func TestAbandon(t *testing.T) {
	clock := testenv.NewClock(simStart)
	var cfg atomic.Pointer[descriptor.Config]
	cfg.Store(parseConfig(t, simConfig))
	in := startInstance(t, memory.NewQuotaStore(), cfg.Load, clock.Now, Options{AbandonAfter: 30 * time.Second})
	e := envoyquota.New(envoyquota.Config{Domain: "rlqs", ReportingInterval: time.Second}, in.conn, clock.Now)
	defer e.Close()
	e.Request(map[string]string{"api": "orders"})
	e.Request(map[string]string{"api": "search"})
	for range 29 {
		clock.Advance(time.Second)
		e.Request(map[string]string{"api": "search"})
	}
	if e.Buckets() != 2 {
		t.Fatalf("%d buckets after 29 s, want 2", e.Buckets())
	}
	clock.Advance(time.Second)
	e.Request(map[string]string{"api": "search"})
	if e.Buckets() != 1 || e.Assignment(map[string]string{"api": "orders"}) != nil {
		t.Fatalf("after 30 s without a request the idle bucket is still cached (%d buckets)", e.Buckets())
	}
	// The search rule leaves the config.
	cfg.Store(parseConfig(t, "domain: rlqs\ndescriptors:\n  - key: api\n    value: orders\n    rate_limit: {unit: minute, requests_per_unit: 60}\n"))
	clock.Advance(time.Second)
	e.Tick()
	if e.Buckets() != 0 {
		t.Fatalf("a bucket whose rule left the config is still cached")
	}
	// Its next request subscribes anew and is unmatched now.
	if !e.Request(map[string]string{"api": "search"}) {
		t.Fatal("unmatched request denied")
	}
	if got, _ := strategyOf(e, map[string]string{"api": "search"}); got != "allow_all" {
		t.Errorf("re-subscribed bucket: %q, want allow_all", got)
	}
}

// TestLostServerExpires: when sluice is gone, Envoy's assignment expires
// after its TTL and the expired_assignment_behavior applies, not a frozen
// share; a new sluice instance takes over at the next report.
func TestLostServerExpires(t *testing.T) {
	clock := testenv.NewClock(simStart)
	cfg := parseConfig(t, simConfig)
	store := memory.NewQuotaStore()
	in := startInstance(t, store, func() *descriptor.Config { return cfg }, clock.Now, Options{AssignmentTTL: 3 * time.Second})
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	e := envoyquota.New(envoyquota.Config{Domain: "rlqs", ReportingInterval: time.Second, Fallback: deny, FallbackTTL: time.Hour, Wait: 2 * time.Second}, in.conn, clock.Now)
	defer e.Close()
	b := map[string]string{"api": "search"}
	e.Request(b)
	in.stop()
	for range 2 {
		clock.Advance(time.Second)
		e.Tick()
	}
	if got, _ := strategyOf(e, b); got != "token_bucket 10/1s max 20" {
		t.Fatalf("2 s after the server left: %q, want the last assignment", got)
	}
	clock.Advance(time.Second)
	e.Tick()
	if got, _ := strategyOf(e, b); got != "deny_all" {
		t.Fatalf("3 s after the server left: %q, want the fallback deny_all", got)
	}
	if e.Lost == 0 {
		t.Error("no report was lost while the server was gone")
	}
	next := startInstance(t, store, func() *descriptor.Config { return cfg }, clock.Now, Options{AssignmentTTL: 3 * time.Second})
	e.SetConn(next.conn)
	clock.Advance(time.Second)
	e.Tick()
	if got, _ := strategyOf(e, b); got != "token_bucket 10/1s max 20" {
		t.Errorf("after a new server answered: %q", got)
	}
}

// TestSnapshot: the admin view lists each stream's buckets with their
// node, shares and last assignment.
func TestSnapshot(t *testing.T) {
	clock := testenv.NewClock(simStart)
	cfg := parseConfig(t, simConfig)
	in := startInstance(t, memory.NewQuotaStore(), func() *descriptor.Config { return cfg }, clock.Now, Options{})
	e := envoyquota.New(envoyquota.Config{Domain: "rlqs", ReportingInterval: time.Second}, in.conn, clock.Now)
	defer e.Close()
	e.Request(map[string]string{"api": "orders"})
	e.Request(map[string]string{"api": "nope"})
	got := in.svc.Snapshot()
	if len(got) != 2 {
		t.Fatalf("%d buckets, want 2: %+v", len(got), got)
	}
	want := []struct{ bucket, desc, assignment string }{
		{"api=nope", "", "allow_all"},
		{"api=orders", "api_orders", "token_bucket 60 per 60s, max 59"},
	}
	for i, w := range want {
		if got[i].Bucket != w.bucket || got[i].Descriptor != w.desc || got[i].Assignment != w.assignment {
			t.Errorf("bucket %d: %+v, want %+v", i, got[i], w)
		}
	}
	if r := got[1].Rules; len(r) != 1 || r[0].Share != 60 || r[0].Members != 1 || r[0].Used != 1 || r[0].Limit != 60 {
		t.Errorf("rules of api=orders: %+v", r)
	}
}
