package service

import (
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/pkg/limit"
)

func TestUnitMapping(t *testing.T) {
	want := map[int32]rlsv3.RateLimitResponse_RateLimit_Unit{
		1: rlsv3.RateLimitResponse_RateLimit_SECOND, 2: rlsv3.RateLimitResponse_RateLimit_MINUTE,
		3: rlsv3.RateLimitResponse_RateLimit_HOUR, 4: rlsv3.RateLimitResponse_RateLimit_DAY,
		5: rlsv3.RateLimitResponse_RateLimit_MONTH, 6: rlsv3.RateLimitResponse_RateLimit_YEAR,
		7: rlsv3.RateLimitResponse_RateLimit_WEEK,
	}
	for in := int32(-1); in <= 9; in++ {
		u, ok := unitFromEnvoy(in)
		w, listed := want[in]
		if ok != listed {
			t.Fatalf("unitFromEnvoy(%d) ok=%v", in, ok)
		}
		if ok && unitToEnvoy(u) != w {
			t.Fatalf("unit %d maps back to %s, want %s", in, unitToEnvoy(u), w)
		}
	}
	if got := unitToEnvoy(limit.UnitUnknown); got != rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
		t.Fatalf("unknown unit maps to %s", got)
	}
}

func TestClampsAndRounding(t *testing.T) {
	if clamp32(math.MaxUint32+1) != math.MaxUint32 || clamp32(7) != 7 {
		t.Fatal("clamp32")
	}
	for _, tt := range []struct {
		in   time.Duration
		want int64
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}} {
		if got := ceilSeconds(tt.in); got != tt.want {
			t.Errorf("ceilSeconds(%s) = %d, want %d", tt.in, got, tt.want)
		}
	}
	if Outcome(99).String() != "outcome(?)" || OutcomeOverLimit.String() != "over_limit" {
		t.Fatal("Outcome.String")
	}
}
