package service

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestUnchargedDebitWarns: the check-then-debit flow on a node that does
// not charge never binds, silently unless sluice says so. A denied
// descriptor hits_addend on a node that does not say charge_over_limit is
// logged as a warning; a node that says it either way, the global setting,
// a quota node, and a plain denial of a request without its own
// hits_addend are not.
func TestUnchargedDebitWarns(t *testing.T) {
	tests := []struct {
		service string
		global  bool
		addend  bool // the debit is the descriptor's own hits_addend (as Envoy sends it)
		warn    bool
	}{
		{"plain", false, true, true},
		{"plain", true, true, false},            // SLUICE_CHARGE_OVER_LIMIT charges it
		{"charged", false, true, false},         // charge_over_limit: true
		{"quota_uncharged", false, true, false}, // charge_over_limit: false says it is meant
		{"service_2", false, true, false},       // quota_mode charges
		{"plain", false, false, false},          // a request-level cost of 1, denied as any request is
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/global=%v/addend=%v", tt.service, tt.global, tt.addend), func(t *testing.T) {
			log, hook := logtest.NewNullLogger()
			h := newHarness(t, Options{ChargeOverLimit: tt.global, Logger: log}, tokenQuotaConfig)
			for range 4 { // 2 per minute: the third debit or request does not fit
				if tt.addend {
					h.call(t, rq("rl", addend(d("service", tt.service), 0)))
					h.call(t, rq("rl", addend(d("service", tt.service), 1)))
				} else {
					h.call(t, rq("rl", d("service", tt.service)))
				}
			}
			var warned []string
			for _, e := range hook.AllEntries() {
				if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "charge_over_limit") {
					warned = append(warned, fmt.Sprintf("%s %v", e.Message, e.Data))
				}
			}
			if tt.warn && (len(warned) != 1 || !strings.Contains(warned[0], "descriptor:service_plain")) {
				t.Errorf("warnings %q, want one naming the descriptor", warned)
			}
			if !tt.warn && len(warned) > 0 {
				t.Errorf("warnings %q, want none", warned)
			}
		})
	}
}
