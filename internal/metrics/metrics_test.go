package metrics

import (
	"context"
	"errors"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/metrics/metricstest"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

const apiYAML = `
domain: api
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 20}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {name: shadowed, unit: minute, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: multi
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 30}
      - {name: hourly, unit: hour, requests_per_unit: 5}
`

// TestDecisions sends real traffic through a Service and checks every
// family the Observer feeds, scraped over HTTP.
func TestDecisions(t *testing.T) {
	// The denied cost of 3 below consumes nothing, so the peek after it is
	// admitted: costs are all-or-nothing when SLUICE_CHARGE_OVER_LIMIT=false.
	h := newHarness(t, Options{}, service.Options{ChargeOverLimit: service.ChargeNone}, apiYAML)
	over := 0
	for range 25 {
		code, err := h.call(t, rq("api", d("user", "alice")))
		if err != nil {
			t.Fatal(err)
		}
		if code == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	if over != 5 {
		t.Fatalf("%d of 25 requests over the limit of 20, want 5", over)
	}
	for range 2 {
		h.call(t, rq("api", d("ip", "10.0.0.1")))
	}
	h.call(t, rq("api", d("shadow", "x")))
	h.call(t, rq("api", d("free", "x"), d("nothing", "here")))
	h.call(t, rq("nope", d("user", "bob")))
	// multi: 4 hits admitted (hourly 5 left → 1), then 3 denied by hourly.
	h.call(t, rq("api", cost(4, d("multi", "m"))))
	h.call(t, rq("api", cost(3, d("multi", "m"))))
	// A peek and a refund: decisions, but neither is a hit.
	h.call(t, rq("api", cost(0, d("multi", "m"))))
	refund := cost(2, d("multi", "m"))
	refund.IsNegativeHits = true
	h.call(t, rq("api", refund))
	// A malformed descriptor is answered OVER_LIMIT, not decided.
	h.call(t, rq("api", d("", "x")))
	if _, err := h.call(t, rq("")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty domain: %v", err)
	}

	f := scrape(t, h.reg)
	f.check(t, []want{
		{"sluice_decisions_total", "domain=api,outcome=ok", 20 + 1 + 1 + 1 + 1}, // user, ip, multi ×3
		{"sluice_decisions_total", "domain=api,outcome=over_limit", 5 + 1 + 1},
		{"sluice_decisions_total", "domain=api,outcome=shadow_over_limit", 1},
		{"sluice_decisions_total", "domain=api,outcome=unlimited", 1},
		{"sluice_decisions_total", "domain=api,outcome=no_limit", 1},
		{"sluice_decisions_total", "domain=nope,outcome=unknown_domain", 1},
		{"sluice_decisions_total", "domain=api,outcome=invalid", 1},
		// Limit 20: near when used > 16, i.e. remaining 3, 2, 1, 0. Limit
		// 1 (ip): near at remaining 0. Multi's hourly rule (5) binds with
		// used 4, not above floor(4.0).
		{"sluice_decisions_near_limit_total", "domain=api", 4 + 1},
		{"sluice_rule_hits_total", "domain=api,rule=per_user", 25},
		{"sluice_rule_over_limit_total", "domain=api,rule=per_user", 5},
		{"sluice_rule_hits_total", "domain=api,rule=shadowed", 1},
		{"sluice_rule_over_limit_total", "domain=api,rule=shadowed", 1},
		{"sluice_rule_hits_total", "domain=api,rule=burst", 4 + 3},
		{"sluice_rule_over_limit_total", "domain=api,rule=burst", 0},
		{"sluice_rule_hits_total", "domain=api,rule=hourly", 4 + 3},
		{"sluice_rule_over_limit_total", "domain=api,rule=hourly", 3},
		{"sluice_requests_total", "code=OK", 25 + 2 + 1 + 1 + 1 + 4 + 1},
		{"sluice_requests_total", "code=InvalidArgument", 1},
		{"sluice_requests_over_limit_total", "", 5 + 1 + 1 + 1},
		{"sluice_requests_shadow_forced_total", "", 0},
		{"sluice_backend_checks_total", "", 25 + 2 + 1 + 4},
		{"sluice_backend_decide_duration_seconds", "", 25 + 2 + 1 + 4},
		{"sluice_config_reloads_total", "result=success", 1},
		{"sluice_config_reloads_total", "result=failure", 0},
		{"sluice_config_domains", "", 1},
		{"sluice_config_last_reload_success_timestamp_seconds", "", float64(t0.Unix())},
	})
	// The unnamed rule of ip has no rule series; no descriptor value is a
	// label anywhere.
	for _, s := range f.series("sluice_rule_hits_total") {
		if strings.Contains(s, "rule=,") || strings.HasSuffix(s, "rule=") {
			t.Errorf("a rule series for an unnamed rule: %s", s)
		}
	}
	for name, fam := range f {
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if v := l.GetValue(); v == "alice" || v == "10.0.0.1" || v == "bob" {
					t.Errorf("%s has a descriptor value as a label: %s", name, metricstest.LabelKey(m.Label))
				}
			}
		}
	}
	if _, ok := f.value("sluice_decisions_total", "domain=,outcome=error"); ok {
		t.Errorf("an invalid request counted as an error decision")
	}
}

// TestFailureModes checks the outcome of descriptors answered by a
// failure mode, the "error" outcome of calls that failed, and the backend
// decorator's error kind, on a backend that is down.
func TestFailureModes(t *testing.T) {
	var yaml strings.Builder
	for _, mode := range []string{"allow", "deny", "local", "error"} {
		yaml.WriteString("---\ndomain: " + mode + "\nfailure_mode: " + mode + `
descriptors:
  - key: k
    rate_limit: {name: r, unit: minute, requests_per_unit: 1}
`)
	}
	clock := testenv.NewClock(t0)
	local := memory.New(memory.Options{Now: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { local.Close() })
	h := newHarness(t, Options{}, service.Options{Backend: stacktest.FailingBackend{Err: stacktest.ErrRedisDown}, Local: local}, yaml.String())
	for _, dom := range []string{"allow", "deny", "local", "error"} {
		for range 2 {
			_, err := h.call(t, rq(dom, d("k", "v")))
			if (err != nil) != (dom == "error") {
				t.Fatalf("domain %s: err %v", dom, err)
			}
		}
	}
	f := scrape(t, h.reg)
	f.check(t, []want{
		{"sluice_decisions_total", "domain=allow,outcome=failure_allow", 2},
		{"sluice_decisions_total", "domain=deny,outcome=failure_deny", 2},
		{"sluice_decisions_total", "domain=local,outcome=failure_local", 2},
		{"sluice_decisions_total", "domain=error,outcome=error", 2},
		{"sluice_requests_total", "code=OK", 6},
		{"sluice_requests_total", "code=Unavailable", 2},
		{"sluice_requests_over_limit_total", "", 2 + 1}, // deny twice; local admits 1 of 2
		{"sluice_backend_errors_total", "kind=unavailable", 8},
		{"sluice_backend_errors_total", "kind=timeout", 0},
		{"sluice_backend_checks_total", "", 8},
	})
	// Failure answers are not rule decisions.
	if s := f.series("sluice_rule_hits_total"); len(s) != 0 {
		t.Errorf("rule series from failure answers: %q", s)
	}
}

// TestDetailedMetric checks descriptor labels of detailed_metric and
// value_to_metric nodes and the per-domain bound.
func TestDetailedMetric(t *testing.T) {
	const yaml = `
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: plain
    rate_limit: {name: p, unit: minute, requests_per_unit: 10}
`
	h := newHarness(t, Options{MaxDetailedDescriptors: 3}, service.Options{}, yaml)
	for _, u := range []string{"a", "a", "b", "c", "d", "e"} {
		h.call(t, rq("d", d("user", u)))
	}
	h.call(t, rq("d", d("plain", "x")))
	f := scrape(t, h.reg)
	f.check(t, []want{
		{"sluice_descriptor_hits_total", "descriptor=user_a,domain=d", 2},
		{"sluice_descriptor_over_limit_total", "descriptor=user_a,domain=d", 1},
		{"sluice_descriptor_hits_total", "descriptor=user_b,domain=d", 1},
		{"sluice_descriptor_hits_total", "descriptor=user_c,domain=d", 1},
		{"sluice_descriptor_hits_total", "descriptor=_other,domain=d", 2},
		{"sluice_descriptor_over_limit_total", "descriptor=_other,domain=d", 0},
	})
	if got := len(f.series("sluice_descriptor_hits_total")); got != 4 {
		t.Errorf("%d descriptor series, want 3 and _other: %q", got, f.series("sluice_descriptor_hits_total"))
	}

	// value_to_metric puts the request's value only at its own level; a
	// fresh domain has its own bound.
	h2 := newHarness(t, Options{MaxDetailedDescriptors: 3}, service.Options{}, strings.Replace(yaml, "domain: d", "domain: v", 1))
	h2.call(t, rq("v", d("route", "/a", "method", "GET")))
	h2.call(t, rq("v", d("route", "/a", "method", "POST")))
	f = scrape(t, h2.reg)
	f.check(t, []want{
		{"sluice_descriptor_hits_total", "descriptor=route_/a.method,domain=v", 2},
	})
}

// TestUnknownDomainBound checks that unconfigured domains fold into
// _other past the bound, while configured domains never do.
func TestUnknownDomainBound(t *testing.T) {
	h := newHarness(t, Options{MaxUnknownDomains: 2}, service.Options{}, apiYAML)
	for _, dom := range []string{"x1", "x2", "x3", "x4", "x1"} {
		h.call(t, rq(dom, d("user", "u")))
	}
	h.call(t, rq("api", d("user", "u")))
	f := scrape(t, h.reg)
	f.check(t, []want{
		{"sluice_decisions_total", "domain=x1,outcome=unknown_domain", 2},
		{"sluice_decisions_total", "domain=x2,outcome=unknown_domain", 1},
		{"sluice_decisions_total", "domain=_other,outcome=unknown_domain", 2},
		{"sluice_decisions_total", "domain=api,outcome=ok", 1},
	})
}

// TestLabelValues checks that label values are valid UTF-8 and bounded.
func TestLabelValues(t *testing.T) {
	m, reg := newRegistered(t, Options{})
	node := &descriptor.Node{Key: "k", Depth: 1, DetailedMetric: true}
	long := strings.Repeat("é", MaxDescriptorLabelLen) // 2 bytes each
	rules := []limit.Rule{{Unit: limit.Minute, Limit: 5}}
	dec := limit.Decision{Allowed: true, Outcomes: []limit.Outcome{{Allowed: true, Remaining: 4}}}
	for _, v := range []string{"bad\xffvalue", long} {
		m.Descriptor(service.DescriptorEvent{
			Domain: "dom\xfe", Entries: []descriptor.Entry{{Key: "k", Value: v}}, Node: node,
			Outcome: service.OutcomeOK, Cost: limit.Cost{N: 1}, Rules: rules, Decision: dec,
		})
	}
	f := scrape(t, reg)
	got := f.series("sluice_descriptor_hits_total")
	if len(got) != 2 {
		t.Fatalf("series %q, want 2", got)
	}
	var longLabel string
	for _, m := range f["sluice_descriptor_hits_total"].Metric {
		for _, l := range m.Label {
			if l.GetName() == "descriptor" && strings.HasPrefix(l.GetValue(), "k_é") {
				longLabel = l.GetValue()
			}
		}
	}
	// "k_" and 127 two-byte characters fit in 256 bytes; the 128th does not.
	if want := "k_" + strings.Repeat("é", (MaxDescriptorLabelLen-2)/2); longLabel != want {
		t.Errorf("long label is %d bytes (valid UTF-8: %v), want %d", len(longLabel), utf8.ValidString(longLabel), len(want))
	}
	f.check(t, []want{{"sluice_descriptor_hits_total", "descriptor=k_bad\uFFFDvalue,domain=dom\uFFFD", 1}})
}

// TestNewTwice checks that a second Metrics on one registry is refused.
func TestNewTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Options{}); err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if _, err := New(reg, Options{}); !errors.As(err, &are) {
		t.Fatalf("second New: %v, want AlreadyRegisteredError", err)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// TestNil checks that a nil *Metrics accepts every call.
func TestNil(t *testing.T) {
	var m *Metrics
	m.Descriptor(service.DescriptorEvent{Outcome: service.OutcomeOK})
	m.Request(service.RequestEvent{})
	m.ConfigLoaded(3)
	m.ConfigLoadFailed()
	m.ObserveBatch(4)
	if err := m.RegisterDenyCache(func() (uint64, uint64, uint64) { return 0, 0, 0 }); err != nil {
		t.Fatal(err)
	}
	b := stacktest.FailingBackend{Err: stacktest.ErrRedisDown}
	if got := m.InstrumentBackend(b); got != b {
		t.Fatalf("nil Metrics wrapped the backend")
	}
	resp, err := m.UnaryServerInterceptor()(context.Background(), "req", nil, func(_ context.Context, req any) (any, error) { return req, nil })
	if resp != "req" || err != nil {
		t.Fatalf("interceptor: %v, %v", resp, err)
	}
}
