package integration

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// oneYear is the longest period a limit override is decided with.
const oneYear = 365 * 24 * time.Hour

// TestOverrideKeysLiveAtMostAYear: a request limit override of any period
// writes a Redis key that lives at most a year. Overrides longer than a
// year are decided, and echoed, as requests_per_unit per YEAR; a year
// exactly (365 days) keeps its unit.
func TestOverrideKeysLiveAtMostAYear(t *testing.T) {
	rs := redistest.Standalone(t)
	p := sluicetest.Start(t, sluicetest.Options{
		ConfigDir: configDir(t, map[string]string{"ttl.yaml": ttlConfig}),
		Env:       standaloneEnv(rs),
	})
	for _, tc := range []struct {
		unit     typev3.RateLimitUnit
		mult     uint32
		wantUnit rlsv3.RateLimitResponse_RateLimit_Unit
		wantMult uint32
	}{
		{typev3.RateLimitUnit_SECOND, 3_000_000_000, rlsv3.RateLimitResponse_RateLimit_YEAR, 0},
		{typev3.RateLimitUnit_MINUTE, 1<<32 - 1, rlsv3.RateLimitResponse_RateLimit_YEAR, 0},
		{typev3.RateLimitUnit_YEAR, 1000, rlsv3.RateLimitResponse_RateLimit_YEAR, 0},
		{typev3.RateLimitUnit_DAY, 366, rlsv3.RateLimitResponse_RateLimit_YEAR, 0},
		{typev3.RateLimitUnit_DAY, 365, rlsv3.RateLimitResponse_RateLimit_DAY, 365},
		{typev3.RateLimitUnit_MONTH, 12, rlsv3.RateLimitResponse_RateLimit_MONTH, 12},
	} {
		x := descriptor("fixed_window", sluicetest.Unique("override"))
		x.Limit = &corev3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: tc.unit, UnitMultiplier: wrapperspb.UInt32(tc.mult)}
		resp := call(t, p, &rlsv3.RateLimitRequest{Domain: "ttl", Descriptors: []*corev3.RateLimitDescriptor{x}})
		st := resp.Statuses[0]
		if cl := st.CurrentLimit; st.Code != ok || cl.GetUnit() != tc.wantUnit || cl.GetUnitMultiplier().GetValue() != tc.wantMult {
			t.Errorf("3 per %d×%s: %v, want OK, 3 per %d×%s", tc.mult, tc.unit, st, tc.wantMult, tc.wantUnit)
		}
	}
	ctx := ctxFor(t, 20*time.Second)
	rc := rs.Client()
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 6 {
		t.Fatalf("%d keys %q after six overrides, want one each", len(keys), keys)
	}
	for _, k := range keys {
		// Counters are written with SET ... PX and may live up to two ms
		// past their expiry (pkg/scripts/CONTRACT.md says why).
		if ttl, err := rc.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > oneYear+2*time.Millisecond {
			t.Errorf("key %q: PTTL (%v, %v), want within (0, 365 days]", k, ttl, err)
		}
	}
}
