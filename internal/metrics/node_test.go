package metrics

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/service"
)

// TestNodeMetrics: every config node with rules gets the reference's
// per-descriptor stats (total_hits, over_limit, near_limit, within_limit,
// shadow_mode) in units of cost, labelled by the node's path (not the
// request's values); a share_threshold node is named by its pattern, also
// in the detailed descriptor label.
func TestNodeMetrics(t *testing.T) {
	const yaml = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: s
    value: "/api/*"
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: sh
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: p
    value: v
    descriptors:
      - key: q
        rate_limit: {unit: hour, requests_per_unit: 5}
`
	h := newHarness(t, Options{}, service.Options{}, yaml)
	for _, r := range []struct {
		cost uint64
		kv   []string
	}{
		{7, []string{"k", "a"}}, // within 7 (used 7 of 10, near threshold 8)
		{2, []string{"k", "a"}}, // within 2, used 9: 1 above 8 is near
		{5, []string{"k", "a"}}, // denied: over 5
		{1, []string{"k", "b"}}, // another value, its own counter: within 1
		{0, []string{"k", "a"}}, // a peek: within 0
		{1, []string{"s", "/api/x"}},
		{1, []string{"s", "/api/y"}}, // shared count 2 of 2: near 1 (threshold 1)
		{1, []string{"s", "/api/z"}}, // over 1
		{1, []string{"sh", "1"}},     // within 1, near 1 (threshold 0)
		{1, []string{"sh", "1"}},     // denied, shadowed: over 1, shadow_mode 1
		{1, []string{"p", "v", "q", "1"}},
		{1, []string{"z", "1"}}, // no node: no series
	} {
		if _, err := h.call(t, rq("d", cost(r.cost, d(r.kv...)))); err != nil {
			t.Fatal(err)
		}
	}
	f := scrape(t, h.reg)
	node := func(path, key1, key2 string) string {
		return "descriptor=" + path + ",domain=d,key1=" + key1 + ",key2=" + key2
	}
	var wants []want
	for _, n := range []struct {
		labels                              string
		total, over, near, within, shadowed float64
	}{
		{node("k", "k", ""), 15, 5, 1, 10, 0},
		{node("s_/api/*", "s_/api/*", ""), 3, 1, 1, 2, 0},
		{node("sh", "sh", ""), 2, 1, 1, 1, 1},
		{node("p_v.q", "p_v", "q"), 1, 0, 0, 1, 0},
	} {
		wants = append(wants,
			want{"sluice_rate_limit_total_hits_total", n.labels, n.total},
			want{"sluice_rate_limit_over_limit_total", n.labels, n.over},
			want{"sluice_rate_limit_near_limit_total", n.labels, n.near},
			want{"sluice_rate_limit_within_limit_total", n.labels, n.within},
			want{"sluice_rate_limit_shadow_mode_total", n.labels, n.shadowed},
		)
	}
	wants = append(wants, want{"sluice_descriptor_hits_total", "descriptor=s_/api/*,domain=d", 3})
	f.check(t, wants)
	if got := f.series("sluice_rate_limit_total_hits_total"); len(got) != 4 {
		t.Errorf("series %q, want one per node with rules", got)
	}
	if got := f.series("sluice_descriptor_hits_total"); len(got) != 1 {
		t.Errorf("detailed series %q, want only the share_threshold pattern", got)
	}
}

// TestIncumbentNames: with IncumbentNames (USE_PROMETHEUS=true, which
// Envoy Gateway sets) the per-node counters are also served under the
// names and labels envoyproxy/ratelimit's default statsd mapping gives its
// stats: ratelimit_service_rate_limit_<stat>{domain, key1, key2}, where
// key1 and key2 are the first two dot-separated parts of the stats key
// ratelimit.service.rate_limit.<domain>.<path>.<stat> (the two-part rule
// gives no key2; deeper nodes are summed into their first two parts).
// Envoy Gateway's Grafana dashboard and users' alerts query these. The
// config is the shape Envoy Gateway generates: a route level, then the
// rule's level, and a CIDR rule whose value holds dots.
func TestIncumbentNames(t *testing.T) {
	const yaml = `
domain: default/eg/http
descriptors:
  - key: httproute/default/backend/rule/0/match/0/*
    value: httproute/default/backend/rule/0/match/0/*
    descriptors:
      - key: rule-0-match-0
        rate_limit: {unit: hour, requests_per_unit: 2}
      - key: masked_remote_address
        value: 192.168.0.0/16
        descriptors:
          - key: remote_address
            rate_limit: {unit: hour, requests_per_unit: 10}
  - key: k
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	route := "httproute/default/backend/rule/0/match/0/*"
	calls := [][]string{
		{route, route, "rule-0-match-0", "alice"},
		{route, route, "rule-0-match-0", "alice"},
		{route, route, "rule-0-match-0", "alice"}, // over
		{route, route, "masked_remote_address", "192.168.0.0/16", "remote_address", "192.168.1.1"},
		{"k", "1"},
		{"k", "1"}, // over, shadowed
	}
	for _, tc := range []struct {
		name string
		on   bool
	}{{"USE_PROMETHEUS=true", true}, {"off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{IncumbentNames: tc.on}, service.Options{}, yaml)
			for _, kv := range calls {
				if _, err := h.call(t, rq("default/eg/http", d(kv...))); err != nil {
					t.Fatal(err)
				}
			}
			f := scrape(t, h.reg)
			if !tc.on {
				if got := f.series("ratelimit_service_rate_limit_total_hits"); len(got) != 0 {
					t.Fatalf("series %q without IncumbentNames", got)
				}
				return
			}
			labels := func(key1, key2 string) string {
				return "domain=default/eg/http,key1=" + key1 + ",key2=" + key2
			}
			rule, cidr, k := labels(route+"_"+route, "rule-0-match-0"), labels(route+"_"+route, "masked_remote_address_192"), labels("k", "")
			f.check(t, []want{
				{"ratelimit_service_rate_limit_total_hits", rule, 3},
				{"ratelimit_service_rate_limit_within_limit", rule, 2},
				{"ratelimit_service_rate_limit_over_limit", rule, 1},
				{"ratelimit_service_rate_limit_near_limit", rule, 1},
				{"ratelimit_service_rate_limit_shadow_mode", rule, 0},
				{"ratelimit_service_rate_limit_total_hits", cidr, 1},
				{"ratelimit_service_rate_limit_within_limit", cidr, 1},
				{"ratelimit_service_rate_limit_total_hits", k, 2},
				{"ratelimit_service_rate_limit_over_limit", k, 1},
				{"ratelimit_service_rate_limit_shadow_mode", k, 1},
			})
			if got := f.series("ratelimit_service_rate_limit_total_hits"); len(got) != 3 {
				t.Errorf("series %q, want one per first two levels", got)
			}
		})
	}
}
