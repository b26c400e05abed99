package xds_test

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/internal/testkit/xdstest"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
)

// Shorthands for the resources Envoy Gateway generates.
type (
	rlc = rlsconfv3.RateLimitConfig
	rld = rlsconfv3.RateLimitDescriptor
)

// perUnit is a RateLimitPolicy of n per unit.
func perUnit(n uint32, u rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitPolicy {
	return &rlsconfv3.RateLimitPolicy{RequestsPerUnit: n, Unit: u}
}

// routeLevel is Envoy Gateway's first level for a route's own (not
// shared) rules: the route name as key and value, the rule chains below.
func routeLevel(route string, rules ...*rld) *rld {
	return &rld{Key: route, Value: route, Descriptors: rules}
}

// TestEnvoyGatewayGeneratedConfigs pushes, through a go-control-plane
// management server over TLS 1.3 with client certificates (as Envoy
// Gateway's serves them), one snapshot of RateLimitConfig resources in
// every shape Envoy Gateway's translator generates (BuildRateLimitServiceConfig;
// the shapes of its translator test data, testdata/out/ratelimit-config),
// then sends what Envoy sends for each rule (the route's generic key, then
// the rule's actions in Envoy Gateway's order) and wants the limit to
// apply: limit requests admitted, the next denied, with current_limit the
// rule's. A shape that were NACKed, or matched nothing, would fail here.
func TestEnvoyGatewayGeneratedConfigs(t *testing.T) {
	const listener = "default/eg/http"
	route := "httproute/default/backend/rule/0/match/0/*" // Envoy Gateway's route names end with the hostname, "*" for any
	second := rlsconfv3.RateLimitUnit_SECOND
	cases := []struct {
		name    string
		rule    *rld     // the rule's chain under the route level
		entries []string // what Envoy sends after the route's entry, key value pairs
		limit   uint32
		unit    rlsconfv3.RateLimitUnit
		shadow  bool
	}{
		{"no match (all traffic)", &rld{Key: "rule-0-match--1", Value: "rule-0-match--1", RateLimit: perUnit(3, second)},
			[]string{"rule-0-match--1", "rule-0-match--1"}, 3, second, false},
		{"distinct header", &rld{Key: "rule-1-match-0", RateLimit: perUnit(3, second)},
			[]string{"rule-1-match-0", "alice"}, 3, second, false},
		{"header value match", &rld{Key: "rule-2-match-0", Value: "rule-2-match-0", RateLimit: perUnit(3, second)},
			[]string{"rule-2-match-0", "rule-2-match-0"}, 3, second, false},
		{"headers, method, path", &rld{Key: "rule-3-match-0", Value: "rule-3-match-0", Descriptors: []*rld{{
			Key: "rule-3-method", Value: "rule-3-method", Descriptors: []*rld{{
				Key: "rule-3-path", Value: "rule-3-path", RateLimit: perUnit(3, second)}}}}},
			[]string{"rule-3-match-0", "rule-3-match-0", "rule-3-method", "rule-3-method", "rule-3-path", "rule-3-path"}, 3, second, false},
		{"source CIDR", &rld{Key: "masked_remote_address", Value: "10.0.0.0/8", RateLimit: perUnit(3, second)},
			[]string{"masked_remote_address", "10.0.0.0/8"}, 3, second, false},
		{"distinct source IP", &rld{Key: "masked_remote_address", Value: "192.168.0.0/16", Descriptors: []*rld{{
			Key: "remote_address", RateLimit: perUnit(3, second)}}},
			[]string{"masked_remote_address", "192.168.0.0/16", "remote_address", "192.168.1.1"}, 3, second, false},
		{"inverted CIDR", &rld{Key: "masked_remote_address", Value: "invert:172.16.0.0/12", RateLimit: perUnit(3, second)},
			[]string{"masked_remote_address", "invert:172.16.0.0/12"}, 3, second, false},
		{"query parameters", &rld{Key: "rule-7-match-0", Value: "rule-7-match-0", Descriptors: []*rld{{
			Key: "rule-7-match-1", RateLimit: perUnit(3, second)}}},
			[]string{"rule-7-match-0", "rule-7-match-0", "rule-7-match-1", "v"}, 3, second, false},
		{"month", &rld{Key: "rule-8-match--1", Value: "rule-8-match--1", RateLimit: perUnit(2, rlsconfv3.RateLimitUnit_MONTH)},
			[]string{"rule-8-match--1", "rule-8-match--1"}, 2, rlsconfv3.RateLimitUnit_MONTH, false},
		{"year", &rld{Key: "rule-9-match--1", Value: "rule-9-match--1", RateLimit: perUnit(1, rlsconfv3.RateLimitUnit_YEAR)},
			[]string{"rule-9-match--1", "rule-9-match--1"}, 1, rlsconfv3.RateLimitUnit_YEAR, false},
		{"shadow mode", &rld{Key: "rule-10-match-0", Value: "rule-10-match-0", ShadowMode: true, Descriptors: []*rld{{
			Key: "masked_remote_address", Value: "0.0.0.0/0", ShadowMode: true, RateLimit: perUnit(2, second)}}},
			[]string{"rule-10-match-0", "rule-10-match-0", "masked_remote_address", "0.0.0.0/0"}, 2, second, true},
	}
	var rules []*rld
	for _, tc := range cases {
		rules = append(rules, tc.rule)
	}
	// A shared policy's rules get a domain of their own, the policy's
	// name, and a first level named after the rule.
	const policy = "test-namespace/test-policy-1"
	shared := &rlc{Name: policy, Domain: policy, Descriptors: []*rld{{
		Key: policy + "/rule/0", Value: policy + "/rule/0",
		Descriptors: []*rld{{Key: "rule-0-match-0", RateLimit: perUnit(3, second)}}}}}

	certs := xdstest.NewCerts(t, "envoy-gateway", "127.0.0.1")
	srv := xdstest.Start(t, xdstest.Options{TLS: certs.ServerTLS()}) // TLS 1.3 only, as Envoy Gateway's
	s := settingsFor(srv.Addr())
	s.UseTLS, s.ClientCert, s.ClientKey, s.ServerCACert = true, certs.Cert, certs.Key, certs.CACert
	rec := &recorder{}
	startClient(t, s, rec, newWaits(), io.Discard)
	srv.Set(t, node, "1", &rlc{Name: listener, Domain: listener, Descriptors: []*rld{routeLevel(route, rules...)}}, shared)
	srv.WaitACK(t, "1")

	clock := testenv.NewClock(time.Date(2027, 1, 4, 10, 0, 0, 0, time.UTC))
	svc := service.New(service.Options{Backend: stacktest.Memory(t, memory.Options{Now: clock.Now}), Logger: stacktest.QuietLogger()})
	rec.mu.Lock()
	svc.SetConfig(rec.cfg)
	rec.mu.Unlock()

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			decideUpTo(t, svc, listener, append([]string{route, route}, tc.entries...), tc.limit, tc.unit, tc.shadow)
		})
	}
	t.Run("shared policy", func(t *testing.T) {
		decideUpTo(t, svc, policy, []string{policy + "/rule/0", policy + "/rule/0", "rule-0-match-0", "bob"}, 3, second, false)
	})
	t.Run("limit from metadata", func(t *testing.T) {
		// A rule whose limit comes from dynamic metadata: Envoy sends the
		// rule's descriptor with a limit override, which replaces the
		// configured 3 per second.
		req := &rlsv3.RateLimitRequest{Domain: listener, Descriptors: []*rlv3.RateLimitDescriptor{
			stacktest.Descriptor(route, route, "rule-1-match-0", "carol")}}
		req.Descriptors[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
		for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.GetOverallCode() != want {
				t.Fatalf("call %d: %v %v, want %v", i+1, resp.GetOverallCode(), err, want)
			}
		}
	})
	rec.mu.Lock()
	got := fmt.Sprint(rec.rejected)
	rec.mu.Unlock()
	if got != "[]" {
		t.Errorf("NACKed versions %s", got)
	}
}

// decideUpTo sends entries to domain limit+1 times (at most 6: a larger
// limit is checked on its first five calls) and wants each call admitted
// until the limit is spent and the next denied (admitted in shadow mode),
// with current_limit and limit_remaining the rule's.
func decideUpTo(t *testing.T, svc *service.Service, domain string, entries []string, limit uint32, unit rlsconfv3.RateLimitUnit, shadow bool) {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{stacktest.Descriptor(entries...)}}
	for i := range min(limit, 5) + 1 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		st := resp.GetStatuses()[0]
		want := rlsv3.RateLimitResponse_OK
		if i == limit && !shadow {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.GetOverallCode() != want || st.GetCode() != want {
			t.Fatalf("call %d: overall %v, status %v, want %v", i+1, resp.GetOverallCode(), st.GetCode(), want)
		}
		cl := st.GetCurrentLimit()
		if cl.GetRequestsPerUnit() != limit || cl.GetUnit().String() != unit.String() {
			t.Fatalf("call %d: current_limit %v, want %d per %v", i+1, cl, limit, unit)
		}
		if wantLeft := limit - min(i+1, limit); st.GetLimitRemaining() != wantLeft {
			t.Fatalf("call %d: limit_remaining %d, want %d", i+1, st.GetLimitRemaining(), wantLeft)
		}
	}
}
