package service

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// envoyGatewayRules is the configuration Envoy Gateway generates for one
// route with n global rules without client selectors, each 1 per second:
// rule i is the chain route -> rule-i-match--1.
func envoyGatewayRules(n int) string {
	var b strings.Builder
	b.WriteString("domain: default/eg/http\ndescriptors:\n  - key: httproute/default/backend/rule/0/match/0/*\n    value: httproute/default/backend/rule/0/match/0/*\n    descriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "      - key: rule-%d-match--1\n        value: rule-%d-match--1\n        rate_limit: {unit: second, requests_per_unit: 1}\n", i, i)
	}
	return b.String()
}

// envoyGatewayCall is what Envoy sends for a request matching all n rules
// of envoyGatewayRules: one descriptor per rule.
func envoyGatewayCall(n int) *rlsv3.RateLimitRequest {
	route := "httproute/default/backend/rule/0/match/0/*"
	req := &rlsv3.RateLimitRequest{Domain: "default/eg/http"}
	for i := range n {
		rule := fmt.Sprintf("rule-%d-match--1", i)
		req.Descriptors = append(req.Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: route, Value: route}, {Key: rule, Value: rule}}})
	}
	return req
}

// TestEnvoyGatewayRulesAllDecided: Envoy Gateway allows 256 global rules
// in a policy, 512 on a route whose policy is merged with its gateway's,
// and a rule whose methods are inverted sends a descriptor per matching
// method (9 methods): each a descriptor of one call. Every
// one is decided, the first call admitted and the second denied on every
// rule; none is refused, which Envoy (failure_mode_deny false) would let
// through unlimited.
func TestEnvoyGatewayRulesAllDecided(t *testing.T) {
	for _, n := range []int{65, 256, 512 * 9} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			h := newHarness(t, Options{}, envoyGatewayRules(n))
			for call, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				resp := h.call(t, envoyGatewayCall(n))
				if resp.OverallCode != want || len(resp.Statuses) != n {
					t.Fatalf("call %d: %v with %d statuses, want %v with %d", call+1, resp.OverallCode, len(resp.Statuses), want, n)
				}
				for i, st := range resp.Statuses {
					if st.Code != want || st.CurrentLimit.GetRequestsPerUnit() != 1 {
						t.Fatalf("call %d, rule %d: %v, want %v under its limit of 1", call+1, i, st, want)
					}
				}
			}
		})
	}
}

// TestBoundRefusalIsLoud: a request refused for a bound is logged as a
// warning naming the reason (throttled: the next refusals are held back
// and counted) and reported to the observer with its reason, so that an
// operator sees why limits do not apply. Malformed requests are not
// bound refusals.
func TestBoundRefusalIsLoud(t *testing.T) {
	cases := []struct {
		name   string
		bounds RequestBounds
		req    *rlsv3.RateLimitRequest
		reason string
	}{
		{"descriptors", RequestBounds{MaxDescriptors: 3}, envoyGatewayCall(4), RefusedDescriptors},
		{"rules", RequestBounds{MaxRequestRules: 3}, envoyGatewayCall(4), RefusedRules},
		{"domain bytes", RequestBounds{MaxEntryLen: 4}, envoyGatewayCall(1), RefusedDomainBytes},
		{"malformed: no descriptors", RequestBounds{}, &rlsv3.RateLimitRequest{Domain: "default/eg/http"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log, hook := logtest.NewNullLogger()
			rec := &recorder{}
			h := newHarness(t, Options{Bounds: tc.bounds, Logger: log, Observer: rec}, envoyGatewayRules(4))
			for range 3 {
				if _, err := h.svc.ShouldRateLimit(context.Background(), tc.req); status.Code(err) != codes.InvalidArgument {
					t.Fatalf("got %v, want InvalidArgument", err)
				}
			}
			if len(rec.requests) != 3 {
				t.Fatalf("%d request events, want 3", len(rec.requests))
			}
			for _, ev := range rec.requests {
				if ev.Refused != tc.reason || status.Code(ev.Err) != codes.InvalidArgument {
					t.Errorf("event %+v, want reason %q with InvalidArgument", ev, tc.reason)
				}
			}
			var warnings []*logrus.Entry
			for _, e := range hook.AllEntries() {
				if e.Level == logrus.WarnLevel {
					warnings = append(warnings, e)
				}
			}
			if tc.reason == "" {
				if len(warnings) != 0 {
					t.Errorf("malformed request logged %d warnings", len(warnings))
				}
				return
			}
			if len(warnings) != 1 {
				t.Fatalf("%d warnings for 3 refusals, want 1 (throttled)", len(warnings))
			}
			w := warnings[0]
			if w.Data["reason"] != tc.reason || w.Data["domain"] != "default/eg/http" || !strings.Contains(w.Message, "no limit") {
				t.Errorf("warning %q %v, want the reason %q, the domain and what it means", w.Message, w.Data, tc.reason)
			}
		})
	}
}

// TestRequestRulesBound: the weight of the rules a request's descriptors
// ask to decide is bounded (SLUICE_MAX_REQUEST_RULES), counting each
// matched descriptor's rules, 1 each and 64 per sliding log; unlimited,
// unknown and invalid descriptors ask for none. Beyond the bound the
// request is refused before the backend is called: naming the same
// sliding log 129 times is refused by default, 128 is decided.
func TestRequestRulesBound(t *testing.T) {
	const yaml = `
domain: r
descriptors:
  - key: one
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: four
    rate_limits:
      - {unit: second, requests_per_unit: 100}
      - {unit: minute, requests_per_unit: 100}
      - {unit: hour, requests_per_unit: 100}
      - {unit: day, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
  - key: log
    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 100}
  - key: mixed
    rate_limits:
      - {algorithm: sliding_log, unit: minute, requests_per_unit: 100}
      - {unit: hour, requests_per_unit: 100}
`
	desc := func(key string, n int) []*rlv3.RateLimitDescriptor {
		out := make([]*rlv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = d(key, fmt.Sprint(i))
		}
		return out
	}
	same := func(key string, n int) []*rlv3.RateLimitDescriptor {
		out := make([]*rlv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = d(key, "same")
		}
		return out
	}
	cases := []struct {
		name    string
		bound   int
		descs   []*rlv3.RateLimitDescriptor
		refused string // the message; "" when decided
	}{
		{"at the bound: 2 x 4 rules", 8, desc("four", 2), ""},
		{"over: 2 x 4 + 1", 8, append(desc("four", 2), d("one", "x")), "rate limit request asks for 9 rules, more than the limit of 8 (SLUICE_MAX_REQUEST_RULES)"},
		{"unlimited, unknown and invalid descriptors ask for none", 8,
			append(append(desc("four", 2), desc("free", 20)...), append(desc("nope", 20), &rlv3.RateLimitDescriptor{})...), ""},
		{"the default bound: 2048 x 4", 0, desc("four", 2048), ""},
		{"over the default bound: 2049 x 4", 0, desc("four", 2049), "rate limit request asks for 8196 rules, more than the limit of 8192 (SLUICE_MAX_REQUEST_RULES)"},
		{"no bound", -1, desc("four", 3000), ""},
		{"sliding logs at the bound: 64 + 64 + 1", 129, append(desc("log", 2), d("one", "x")), ""},
		{"sliding logs over: 2 x (64 + 1)", 129, desc("mixed", 2),
			"rate limit request asks for 4 rules weighing 130 (a sliding log weighs 64), more than the limit of 129 (SLUICE_MAX_REQUEST_RULES)"},
		{"the default bound: one sliding log 128 times", 0, same("log", 128), ""},
		{"over the default bound: one sliding log 129 times", 0, same("log", 129),
			"rate limit request asks for 129 rules weighing 8256 (a sliding log weighs 64), more than the limit of 8192 (SLUICE_MAX_REQUEST_RULES)"},
		{"no bound: one sliding log 5000 times", -1, same("log", 5000), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{Bounds: RequestBounds{MaxRequestRules: tc.bound}}, yaml)
			resp, err := h.svc.ShouldRateLimit(context.Background(), rq("r", tc.descs...))
			if tc.refused == "" {
				if err != nil || len(resp.Statuses) != len(tc.descs) {
					t.Fatalf("%v, want %d statuses", err, len(tc.descs))
				}
				return
			}
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != tc.refused {
				t.Fatalf("%v, want InvalidArgument %q", err, tc.refused)
			}
			if n := h.mem.calls.Load(); n != 0 {
				t.Errorf("backend called %d times for a refused request", n)
			}
		})
	}
}
