package compat

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// TestLimitOverrideMultiplier: the incumbent builds a request limit
// override's rule from requests_per_unit and unit alone (its proto has no
// unit_multiplier, so gRPC drops the field; checked against its binary),
// so 1 per 1000 years is 1 per year there. sluice honours the multiplier
// (the migration guide's override-multiplier), but decides an override
// longer than a year as per YEAR, so this one answers as the incumbent's
// with either SLUICE_OVERRIDE_UNIT_MULTIPLIER.
func TestLimitOverrideMultiplier(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"default", nil},
		{"SLUICE_OVERRIDE_UNIT_MULTIPLIER=false", map[string]string{"SLUICE_OVERRIDE_UNIT_MULTIPLIER": "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, memory, tc.env, runtimeConfig...)
			x := d("key1", sluicetest.Unique("override"))
			x.d.Limit = &corev3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR,
				UnitMultiplier: wrapperspb.UInt32(1000)}
			expect(t, "1 per 1000 years", answerOf(s.ask(t, rq("basic", x))), ans(ok, limited(ok, 1, "YEAR", 0)))
		})
	}
}
