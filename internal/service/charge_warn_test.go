package service

import (
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestUnchargedDebitWarns: the check-then-debit flow left uncharged never
// binds, silently unless sluice says so. By default a descriptor's own
// hits_addend is charged, so only SLUICE_CHARGE_OVER_LIMIT=false can leave
// it uncharged: then a denied one on a node that does not say
// charge_over_limit, or on a limit override, is logged as a warning naming
// the descriptor. The default, the global true, a node that says it either
// way, a quota node, and a plain denial of a request without its own
// hits_addend are not.
func TestUnchargedDebitWarns(t *testing.T) {
	tests := []struct {
		service  string
		global   Charging
		addend   bool // the debit is the descriptor's own hits_addend (as Envoy sends it)
		override bool // the descriptor carries a limit override (Envoy Gateway's limit from metadata)
		warn     string
	}{
		{"plain", ChargeNone, true, false, "descriptor:service_plain"},
		{"plain", ChargeNone, true, true, "descriptor:limit override on service"},
		{"plain", ChargeDebits, true, false, ""},           // the default charges it
		{"plain", ChargeDebits, true, true, ""},            // on an override too
		{"plain", ChargeAll, true, false, ""},              // SLUICE_CHARGE_OVER_LIMIT=true charges it
		{"charged", ChargeNone, true, false, ""},           // charge_over_limit: true
		{"quota_uncharged", ChargeNone, true, false, ""},   // charge_over_limit: false says it is meant
		{"quota_uncharged", ChargeDebits, true, false, ""}, // as it does under the default
		{"service_2", ChargeNone, true, false, ""},         // quota_mode charges
		{"plain", ChargeNone, false, false, ""},            // a request-level cost of 1, denied as any request is
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/global=%v/addend=%v/override=%v", tt.service, tt.global, tt.addend, tt.override), func(t *testing.T) {
			log, hook := logtest.NewNullLogger()
			h := newHarness(t, Options{ChargeOverLimit: tt.global, Logger: log}, tokenQuotaConfig)
			desc := func(n uint64) *rlv3.RateLimitDescriptor {
				x := d("service", tt.service)
				if tt.addend {
					x = addend(x, n)
				}
				if tt.override {
					x.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
				}
				return x
			}
			for range 4 { // 2 per minute: the third debit or request does not fit
				if tt.addend {
					h.call(t, rq("rl", desc(0)))
				}
				h.call(t, rq("rl", desc(1)))
			}
			var warned []string
			for _, e := range hook.AllEntries() {
				if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "charge_over_limit") {
					warned = append(warned, fmt.Sprintf("%s %v", e.Message, e.Data))
				}
			}
			if tt.warn != "" && (len(warned) != 1 || !strings.Contains(warned[0], tt.warn)) {
				t.Errorf("warnings %q, want one naming %q", warned, tt.warn)
			}
			if tt.warn == "" && len(warned) > 0 {
				t.Errorf("warnings %q, want none", warned)
			}
		})
	}
}
