package service

import (
	"testing"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-rl/sluice/pkg/backend/memory"
)

// TestOverrideUnitMultiplierIgnored: with IgnoreOverrideUnitMultiplier
// (SLUICE_OVERRIDE_UNIT_MULTIPLIER=false) a request limit override's
// unit_multiplier is ignored, as envoyproxy/ratelimit ignores it: the
// period is one unit. Honoured, a multiplier that makes the period longer
// than MaxOverridePeriod (a year) is decided, and echoed, as per YEAR, and
// a year exactly is kept.
func TestOverrideUnitMultiplierIgnored(t *testing.T) {
	for _, tt := range []struct {
		name   string
		ignore bool
		mult   uint32
		unit   typev3.RateLimitUnit
		want   string
	}{
		{"honoured by default", false, 5, typev3.RateLimitUnit_MINUTE, "OK 3/5xMINUTE rem=2 reset=5m0s"},
		{"ignored", true, 5, typev3.RateLimitUnit_MINUTE, "OK 3/MINUTE rem=2 reset=1m0s"},
		{"ignored beyond a year", true, 1000, typev3.RateLimitUnit_YEAR, "OK 3/YEAR rem=2 reset="},
		{"365 days kept", false, 365, typev3.RateLimitUnit_DAY, "OK 3/365xDAY rem=2 reset="},
		{"12 months kept", false, 12, typev3.RateLimitUnit_MONTH, "OK 3/12xMONTH rem=2 reset="},
		{"366 days per year", false, 366, typev3.RateLimitUnit_DAY, "OK 3/YEAR rem=2 reset="},
		{"53 weeks per year", false, 53, typev3.RateLimitUnit(7), "OK 3/YEAR rem=2 reset="},
		{"1000 years per year", false, 1000, typev3.RateLimitUnit_YEAR, "OK 3/YEAR rem=2 reset="},
		{"3e9 seconds per year", false, 3_000_000_000, typev3.RateLimitUnit_SECOND, "OK 3/YEAR rem=2 reset="},
		{"2^32-1 minutes per year", false, 1<<32 - 1, typev3.RateLimitUnit_MINUTE, "OK 3/YEAR rem=2 reset="},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{IgnoreOverrideUnitMultiplier: tt.ignore}, "domain: d\n")
			resp := h.call(t, rq("d", override(d("x", "1"), 3, tt.unit, tt.mult)))
			if got := statuses(resp); resp.OverallCode != OK || len(got) != 1 || len(got[0]) < len(tt.want) || got[0][:len(tt.want)] != tt.want {
				t.Errorf("got %s %q, want %s", resp.OverallCode, got, tt.want)
			}
		})
	}
}

// TestOverrideStateLivesAtMostAYear: the state of limit overrides of any
// period is gone from the memory backend MaxOverridePeriod after it was
// created (test/integration TestOverrideKeysLiveAtMostAYear checks the
// keys' PTTL on Redis), while a configured rule of ten years keeps its.
func TestOverrideStateLivesAtMostAYear(t *testing.T) {
	h := newHarness(t, Options{}, "domain: d\ndescriptors:\n  - {key: long, rate_limit: {unit: year, unit_multiplier: 10, requests_per_unit: 5}}\n")
	mem := h.mem.Backend.(*memory.Backend)
	resp := h.call(t, rq("d",
		override(d("x", "1"), 3, typev3.RateLimitUnit_SECOND, 3_000_000_000),
		override(d("x", "2"), 3, typev3.RateLimitUnit_MINUTE, 1<<32-1),
		override(d("x", "3"), 3, typev3.RateLimitUnit_YEAR, 1000),
		override(d("x", "4"), 3, typev3.RateLimitUnit_DAY, 366),
		override(d("x", "5"), 3, typev3.RateLimitUnit_DAY, 365),
		override(d("x", "6"), 3, typev3.RateLimitUnit_YEAR, 0),
		d("long", "y")))
	for i, st := range resp.Statuses {
		if r := st.DurationUntilReset.AsDuration(); st.Code != OK || r <= 0 || (i < 6 && r > MaxOverridePeriod) {
			t.Errorf("descriptor %d: %s, want OK resetting within a year", i, statusString(st))
		}
	}
	if n := mem.Len(); n != 7 {
		t.Fatalf("%d descriptors stored, want 7", n)
	}
	h.clock.Advance(MaxOverridePeriod)
	mem.Sweep()
	if n := mem.Len(); n != 1 {
		t.Errorf("%d descriptors stored a year later, want 1 (the configured ten-year rule's)", n)
	}
}
