package backendtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluice-rl/sluice/pkg/backend"
)

// QuotaFactory builds a fresh backend.QuotaStore and returns it with the
// function naming one rule's key for one bucket in it.
type QuotaFactory func(t *testing.T) (backend.QuotaStore, func(bucket, rule string) string)

// quotaNow is the suite's fake instant, in µs: 2031-01-01.
const quotaNow = int64(1924992000) * 1_000_000

// quotaSecond is one second in µs.
const quotaSecond = int64(1_000_000)

// RunQuota runs the behaviour every Rate Limit Quota Service store must
// show against stores built by f: fair shares that sum to at most the
// limit, window usage, stale and leaving members.
func RunQuota(t *testing.T, f QuotaFactory) {
	run := fmt.Sprintf("%016x", rand.Uint64())
	type report struct {
		member string
		at     int64 // seconds after quotaNow
		demand float64
		used   uint64
		window int64 // seconds after quotaNow; -1 for a rate rule
		leave  bool
		want   backend.QuotaShare
	}
	const stale = 10 * quotaSecond
	cases := []struct {
		name  string
		limit uint64
		steps []report
	}{
		{"AloneGetsTheLimit", 60, []report{
			{member: "a", demand: 1, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 1}},
		}},
		{"EqualDemandsConverge", 60, []report{
			{member: "a", demand: 30, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 30}},
			// b's fair target is 30, but a holds all 60 until it reports.
			{member: "b", demand: 30, window: -1, want: backend.QuotaShare{Share: 0, Members: 2, Demand: 60}},
			{member: "a", at: 1, demand: 30, window: -1, want: backend.QuotaShare{Share: 30, Members: 2, Demand: 60}},
			{member: "b", at: 1, demand: 30, window: -1, want: backend.QuotaShare{Share: 30, Members: 2, Demand: 60}},
		}},
		{"SkewedDemandsFillFromTheSmallest", 60, []report{
			{member: "a", demand: 10, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 10}},
			{member: "a", demand: 10, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 10}},
			{member: "b", demand: 100, window: -1, want: backend.QuotaShare{Share: 0, Members: 2, Demand: 110}},
			// a: 10 + 0 left over; b: 50.
			{member: "a", at: 1, demand: 10, window: -1, want: backend.QuotaShare{Share: 10, Members: 2, Demand: 110}},
			{member: "b", at: 1, demand: 100, window: -1, want: backend.QuotaShare{Share: 50, Members: 2, Demand: 110}},
		}},
		{"SurplusSplitEqually", 60, []report{
			{member: "a", demand: 5, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 5}},
			{member: "a", demand: 5, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 5}},
			{member: "b", demand: 15, window: -1, want: backend.QuotaShare{Share: 0, Members: 2, Demand: 20}},
			// 40 left over: 20 each.
			{member: "a", at: 1, demand: 5, window: -1, want: backend.QuotaShare{Share: 25, Members: 2, Demand: 20}},
			{member: "b", at: 1, demand: 15, window: -1, want: backend.QuotaShare{Share: 35, Members: 2, Demand: 20}},
		}},
		{"WindowUsage", 60, []report{
			{member: "a", demand: 1, used: 1, window: 0, want: backend.QuotaShare{Share: 60, Used: 1, Mine: 1, Members: 1, Demand: 1}},
			{member: "b", demand: 1, used: 20, window: 0, want: backend.QuotaShare{Share: 0, Used: 21, Mine: 20, Members: 2, Demand: 2}},
			{member: "a", at: 9, demand: 1, used: 5, window: 0, want: backend.QuotaShare{Share: 30, Used: 26, Mine: 6, Members: 2, Demand: 2}},
			// A new window starts from the report's usage.
			{member: "b", at: 10, demand: 1, used: 7, window: 10, want: backend.QuotaShare{Share: 30, Used: 7, Mine: 7, Members: 2, Demand: 2}},
			{member: "a", at: 10, demand: 1, used: 2, window: 10, want: backend.QuotaShare{Share: 30, Used: 9, Mine: 2, Members: 2, Demand: 2}},
		}},
		{"StaleMemberDropped", 60, []report{
			{member: "a", demand: 30, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 30}},
			{member: "b", at: 5, demand: 30, window: -1, want: backend.QuotaShare{Share: 0, Members: 2, Demand: 60}},
			// a last reported 11 s ago: gone, its share freed.
			{member: "b", at: 11, demand: 30, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 30}},
		}},
		{"LeaveFreesTheShare", 60, []report{
			{member: "a", demand: 30, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 30}},
			{member: "a", leave: true},
			{member: "b", demand: 30, window: -1, want: backend.QuotaShare{Share: 60, Members: 1, Demand: 30}},
		}},
		{"ZeroLimit", 0, []report{
			{member: "a", demand: 30, window: -1, want: backend.QuotaShare{Share: 0, Members: 1, Demand: 30}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, key := f(t)
			k := key(run+"/"+t.Name(), "r1")
			ctx := context.Background()
			for i, s := range tc.steps {
				if s.leave {
					if err := store.Leave(ctx, s.member, []string{k}); err != nil {
						t.Fatalf("step %d: Leave: %v", i, err)
					}
					continue
				}
				now := quotaNow + s.at*quotaSecond
				r := backend.QuotaRule{Key: k, Demand: s.demand, Limit: tc.limit, Used: s.used, Keep: now + 120*quotaSecond}
				if s.window >= 0 {
					r.Window = quotaNow + s.window*quotaSecond
				}
				got, err := store.Share(ctx, backend.QuotaRequest{Member: s.member, Now: now, Stale: stale, Rules: []backend.QuotaRule{r}})
				if err != nil {
					t.Fatalf("step %d: Share: %v", i, err)
				}
				if len(got) != 1 || got[0] != s.want {
					t.Fatalf("step %d (%s at +%ds): got %+v, want %+v", i, s.member, s.at, got, s.want)
				}
			}
		})
	}
	t.Run("SeveralRulesOneCall", func(t *testing.T) {
		store, key := f(t)
		b := run + "/" + t.Name()
		got, err := store.Share(context.Background(), backend.QuotaRequest{Member: "a", Now: quotaNow, Stale: stale, Rules: []backend.QuotaRule{
			{Key: key(b, "r1"), Demand: 5, Limit: 10, Keep: quotaNow + stale},
			{Key: key(b, "r2"), Demand: 5, Limit: 1000, Window: quotaNow, Used: 3, Keep: quotaNow + stale},
		}})
		if err != nil {
			t.Fatal(err)
		}
		want := []backend.QuotaShare{{Share: 10, Members: 1, Demand: 5}, {Share: 1000, Used: 3, Mine: 3, Members: 1, Demand: 5}}
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})
}
