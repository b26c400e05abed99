package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// egRoute is the route of the Envoy Gateway configurations below.
const egRoute = "httproute/default/backend/rule/0/match/0/*"

// envoyGatewayRules is the RateLimitConfig Envoy Gateway generates for one
// route with n global rules: rule i is the chain route -> key(i), 1 per
// second; a rule without client selectors has key and value
// rule-i-match--1, a per-value header rule (type Distinct) has the key
// rule-i-match-0 and no value.
func envoyGatewayRules(n int, distinct bool) *rlsconfv3.RateLimitConfig {
	route := &rlsconfv3.RateLimitDescriptor{Key: egRoute, Value: egRoute}
	for i := range n {
		d := &rlsconfv3.RateLimitDescriptor{RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}
		if distinct {
			d.Key = fmt.Sprintf("rule-%d-match-0", i)
		} else {
			d.Key = fmt.Sprintf("rule-%d-match--1", i)
			d.Value = d.Key
		}
		route.Descriptors = append(route.Descriptors, d)
	}
	return &rlsconfv3.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http", Descriptors: []*rlsconfv3.RateLimitDescriptor{route}}
}

// envoyGatewayCall is what Envoy sends when a request matches all n rules:
// a descriptor per rule, the header's value (header) under each key of a
// per-value rule.
func envoyGatewayCall(n int, header string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "default/eg/http"}
	for i := range n {
		key, value := fmt.Sprintf("rule-%d-match--1", i), ""
		if header != "" {
			key, value = fmt.Sprintf("rule-%d-match-0", i), header
		} else {
			value = key
		}
		req.Descriptors = append(req.Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: egRoute, Value: egRoute}, {Key: key, Value: value}}})
	}
	return req
}

// TestEnvoyGatewayRequestBounds: with Envoy Gateway's environment, calls
// Envoy Gateway can legitimately send are decided, not refused (a refused
// call is one Envoy, with Envoy Gateway's default failClosed: false, lets
// through with no limit): 65 rules of a route matching one request (it
// allows 256), and 18 per-value header rules copying a 60 KiB header
// (1,108,069 bytes, over 1 MiB and within the incumbent's 4 MiB). With
// the bounds lowered below those calls (SLUICE_MAX_DESCRIPTORS,
// SLUICE_MAX_REQUEST_BYTES), the refusal is loud: a warning naming the
// setting and sluice_requests_refused_total counting it by reason.
func TestEnvoyGatewayRequestBounds(t *testing.T) {
	header := strings.Repeat("h", 61440)
	cases := []struct {
		name   string
		extra  map[string]string
		conf   *rlsconfv3.RateLimitConfig
		req    *rlsv3.RateLimitRequest
		code   codes.Code // OK: decided
		reason string     // the refusal's reason label
		status string     // what the status says
		log    string     // what the warning names
	}{
		{"65 rules", nil, envoyGatewayRules(65, false), envoyGatewayCall(65, ""), codes.OK, "", "", ""},
		{"256 rules", nil, envoyGatewayRules(256, false), envoyGatewayCall(256, ""), codes.OK, "", "", ""},
		{"18 rules copying a 60 KiB header", nil, envoyGatewayRules(18, true), envoyGatewayCall(18, header), codes.OK, "", "", ""},
		{"65 rules, SLUICE_MAX_DESCRIPTORS=64", map[string]string{"SLUICE_MAX_DESCRIPTORS": "64"},
			envoyGatewayRules(65, false), envoyGatewayCall(65, ""), codes.InvalidArgument, "descriptors",
			"rate limit request has 65 descriptors, more than the limit of 64 (SLUICE_MAX_DESCRIPTORS)", "SLUICE_MAX_DESCRIPTORS"},
		{"18 rules copying a 60 KiB header, SLUICE_MAX_REQUEST_BYTES=1048576", map[string]string{"SLUICE_MAX_REQUEST_BYTES": "1048576"},
			envoyGatewayRules(18, true), envoyGatewayCall(18, header), codes.ResourceExhausted, "request_bytes",
			"received message larger than max (1108069 vs. 1048576)", "SLUICE_MAX_REQUEST_BYTES"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "18 rules copying a 60 KiB header" {
				if n := proto.Size(tc.req); n != 1_108_069 {
					t.Fatalf("the request is %d bytes, want the reproduction's 1,108,069", n)
				}
			}
			p, srv, client := startAsEnvoyGateway(t, tc.extra)
			srv.Set(t, "envoy-ratelimit", "1", tc.conf)
			srv.WaitACK(t, "1")
			ctx := context.Background()
			eventually(t, "the config in use", func() (bool, string) {
				probe := envoyGatewayCall(1, "")
				if tc.conf.Descriptors[0].Descriptors[0].Value == "" { // per-value rules
					probe = envoyGatewayCall(1, "probe")
				}
				_, err := client.ShouldRateLimit(ctx, probe)
				return err == nil, fmt.Sprint(err)
			})
			resp, err := client.ShouldRateLimit(ctx, tc.req)
			if tc.code == codes.OK {
				if err != nil || len(resp.GetStatuses()) != len(tc.req.Descriptors) {
					t.Fatalf("%v, want all %d descriptors decided", err, len(tc.req.Descriptors))
				}
				for i, st := range resp.Statuses {
					if st.GetCurrentLimit().GetRequestsPerUnit() != 1 {
						t.Fatalf("descriptor %d: %v, want it decided under its rule's limit of 1 per second", i, st)
					}
				}
				for _, reason := range []string{"descriptors", "request_bytes"} {
					if ok, got := metricLine(p, `sluice_requests_refused_total\{reason="`+reason+`"\} 0`)(); !ok {
						t.Errorf("no refusal counted at 0 for %s: %s", reason, got)
					}
				}
				return
			}
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.status) {
				t.Fatalf("%v, want %v saying %q", err, tc.code, tc.status)
			}
			eventually(t, "the refusal counted", metricLine(p, `sluice_requests_refused_total\{reason="`+tc.reason+`"\} 1`))
			eventually(t, "the refusal logged", func() (bool, string) {
				for _, l := range strings.Split(p.Logs(), "\n") {
					if strings.Contains(l, "refused") && strings.Contains(l, tc.log) && strings.Contains(l, "no limit") {
						return true, l
					}
				}
				return false, "no warning naming " + tc.log
			})
		})
	}
}
