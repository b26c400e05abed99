package service

import (
	"testing"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestOverrideUnitMultiplierIgnored: with IgnoreOverrideUnitMultiplier
// (SLUICE_OVERRIDE_UNIT_MULTIPLIER=false) a request limit override's
// unit_multiplier is ignored, as envoyproxy/ratelimit ignores it: the
// period is one unit, and a multiplier that would make it longer than
// 100 years does not make the descriptor invalid.
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
		{"ignored beyond 100 years", true, 1000, typev3.RateLimitUnit_YEAR, "OK 3/YEAR rem=2 reset="},
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
