package service

import (
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
// quota never binds.
func TestCheckThenDebit(t *testing.T) {
	tests := []struct {
		service string
		global  bool
		passed  int // requests admitted before the first OVER_LIMIT (6 = never)
	}{
		{"service_2", false, 3},      // quota_mode charges by default
		{"charged", false, 3},        // charge_over_limit: true
		{"plain", true, 3},           // SLUICE_CHARGE_OVER_LIMIT
		{"plain", false, 6},          // the default: a denial consumes nothing
		{"quota_uncharged", true, 6}, // the node's false wins over the global setting
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
