package service

import (
	"fmt"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tokenQuotaConfig is envoyproxy/ratelimit's example for its token-quota
// integration scripts (domain rl), with a plain node and nodes that set
// charge_over_limit either way.
const tokenQuotaConfig = `
domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: service
    value: plain
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: service
    value: charged
    charge_over_limit: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: service
    value: quota_uncharged
    quota_mode: true
    charge_over_limit: false
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// TestCheckThenDebit replays the incumbent's token-quota flow: the request
// path asks with hits_addend 0, the response path debits 1. Where costs
// that do not fit are charged, 2 per minute lets exactly three requests
// through, then OVER_LIMIT until the window ends, as envoyproxy/ratelimit
// does (integration-test/scripts/token-quota.sh); where they are not, the
// quota never binds. With no setting at all the debit, a descriptor's own
// hits_addend, is charged on every node; an explicit false, on the node or
// globally, wins.
func TestCheckThenDebit(t *testing.T) {
	tests := []struct {
		service string
		global  Charging
		passed  int // requests admitted before the first OVER_LIMIT (6 = never)
	}{
		{"plain", ChargeDebits, 3},           // the default: a descriptor's own hits_addend is charged
		{"service_2", ChargeDebits, 3},       // quota_mode charges
		{"charged", ChargeDebits, 3},         // charge_over_limit: true
		{"quota_uncharged", ChargeDebits, 6}, // the node's false wins over the default
		{"plain", ChargeAll, 3},              // SLUICE_CHARGE_OVER_LIMIT=true
		{"quota_uncharged", ChargeAll, 6},    // the node's false wins over the global true
		{"plain", ChargeNone, 6},             // SLUICE_CHARGE_OVER_LIMIT=false wins over the default
		{"service_2", ChargeNone, 3},         // quota_mode still charges
		{"charged", ChargeNone, 3},           // the node's true wins over the global false
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/global=%v", tt.service, tt.global), func(t *testing.T) {
			h := newHarness(t, Options{ChargeOverLimit: tt.global}, tokenQuotaConfig)
			passed := 0
			for range 6 {
				resp := h.call(t, rq("rl", addend(d("service", tt.service), 0)))
				if resp.OverallCode != rlsv3.RateLimitResponse_OK {
					break
				}
				passed++
				h.call(t, rq("rl", addend(d("service", tt.service), 1))) // the response path's debit
			}
			if passed != tt.passed {
				t.Errorf("passed %d requests, want %d", passed, tt.passed)
			}
			if tt.passed < 6 {
				h.clock.Advance(time.Minute)
				if resp := h.call(t, rq("rl", addend(d("service", tt.service), 0))); resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Errorf("a minute later: %v, want OK", statuses(resp))
				}
			}
		})
	}
}

// TestWhoCharges: after 8 of 10 are used, a cost of 5 is denied; whether
// it was charged shows in the next cost of 2 (admitted only if the 5
// consumed nothing). By default a descriptor's own hits_addend is charged
// and a cost from the request's hits_addend is all-or-nothing; the global
// setting, when given, decides both; a limit override (Envoy Gateway's
// limit from metadata) follows the same rule.
func TestWhoCharges(t *testing.T) {
	const cfg = `
domain: rl
descriptors:
  - key: service
    value: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	tests := []struct {
		global   Charging
		own      bool // the cost is the descriptor's hits_addend, not the request's
		override bool // the descriptor carries a limit override of 10 per minute
		charged  bool
	}{
		{ChargeDebits, true, false, true},
		{ChargeDebits, false, false, false}, // a request-path cost stays all-or-nothing
		{ChargeDebits, true, true, true},
		{ChargeDebits, false, true, false},
		{ChargeAll, true, false, true},
		{ChargeAll, false, false, true},
		{ChargeAll, false, true, true},
		{ChargeNone, true, false, false},
		{ChargeNone, false, false, false},
		{ChargeNone, true, true, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("global=%v/own=%v/override=%v", tt.global, tt.own, tt.override), func(t *testing.T) {
			h := newHarness(t, Options{ChargeOverLimit: tt.global}, cfg)
			ask := func(n uint64) *rlsv3.RateLimitResponse {
				x := d("service", "plain")
				if tt.override {
					x.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE}
				}
				req := rq("rl", x)
				if tt.own {
					x.HitsAddend = wrapperspb.UInt64(n)
				} else {
					req.HitsAddend = uint32(n)
				}
				return h.call(t, req)
			}
			if resp := ask(8); resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("8 of 10: %v", statuses(resp))
			}
			resp := ask(5)
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("5 with 2 left: %v, want OVER_LIMIT", statuses(resp))
			}
			if left := resp.Statuses[0].LimitRemaining; (left == 0) != tt.charged {
				t.Errorf("5 with 2 left reports %d remaining, want %s", left, map[bool]string{true: "0 (charged)", false: "2"}[tt.charged])
			}
			if got := ask(2).OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT; got != tt.charged {
				t.Errorf("a cost of 2 after the denied 5: OVER_LIMIT %v, want %v (the 5 charged: %v)", got, tt.charged, tt.charged)
			}
		})
	}
}

// TestDebitLargerThanLeft: a 500-token answer with 100 left is charged,
// and the quota is exhausted until the window pays it back.
func TestDebitLargerThanLeft(t *testing.T) {
	const cfg = `
domain: llm
descriptors:
  - key: user
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
`
	h := newHarness(t, Options{}, cfg)
	h.call(t, rq("llm", addend(d("user", "u"), 900)))
	if resp := h.call(t, rq("llm", addend(d("user", "u"), 0))); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("peek with 100 left: %v", statuses(resp))
	}
	h.call(t, rq("llm", addend(d("user", "u"), 500)))
	resp := h.call(t, rq("llm", addend(d("user", "u"), 0)))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("peek after a 500 debit with 100 left: %v, want OVER_LIMIT with 0 remaining", statuses(resp))
	}
}

// TestMultiserviceTokenQuota replays the incumbent's
// multiservice-tokenquota.sh: the request path peeks at service_1 (1 per
// minute) and service_2 (2 per minute) together, the request goes to the
// first service whose status is OK, and the response path debits 1 from
// it. service_1 serves 2 requests, service_2 3, then the request is
// OVER_LIMIT; a minute later service_1 serves again.
func TestMultiserviceTokenQuota(t *testing.T) {
	h := newHarness(t, Options{}, tokenQuotaConfig)
	peek := func() *rlsv3.RateLimitResponse {
		return h.call(t, rq("rl", addend(d("service", "service_1"), 0), addend(d("service", "service_2"), 0)))
	}
	var served []string
	for range 8 {
		resp := peek()
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			break
		}
		svc := "service_2"
		if resp.Statuses[0].Code == rlsv3.RateLimitResponse_OK {
			svc = "service_1"
		}
		served = append(served, svc)
		h.call(t, rq("rl", addend(d("service", svc), 1)))
	}
	want := []string{"service_1", "service_1", "service_2", "service_2", "service_2"}
	if fmt.Sprint(served) != fmt.Sprint(want) {
		t.Errorf("served %v, want %v, then OVER_LIMIT", served, want)
	}
	h.clock.Advance(time.Minute)
	if resp := peek(); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
		t.Errorf("a minute later: %v, want service_1 OK again", statuses(resp))
	}
}
