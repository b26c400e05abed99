package metrics

import (
	"slices"
	"testing"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/descriptor"
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
			// sluice's own series: key1 and key2 are the node's first
			// two levels whole, the dots of a value included.
			cidrPath := route + "_" + route + ".masked_remote_address_192.168.0.0/16.remote_address"
			f.check(t, []want{
				{"sluice_rate_limit_total_hits_total", "descriptor=" + cidrPath + ",domain=default/eg/http,key1=" + route + "_" + route +
					",key2=masked_remote_address_192.168.0.0/16", 1},
				{"sluice_rate_limit_total_hits_total", "descriptor=k,domain=default/eg/http,key1=k,key2=", 2},
			})
			if !tc.on {
				if got := f.series("ratelimit_service_rate_limit_total_hits"); len(got) != 0 {
					t.Fatalf("series %q without IncumbentNames", got)
				}
				return
			}
			labels := func(key1, key2 string) string {
				return "domain=default/eg/http,key1=" + key1 + ",key2=" + key2
			}
			rule, cidr, k := labels(route+"_"+route, "rule-0-match-0"), labels(route+"_"+route, "masked_remote_address_192_168_0_0/16"), labels("k", "")
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

// TestIncumbentKeysSanitized: the reference's key1 and key2 labels are
// cut from its stat name, in which ':' and '|' became '_', and so did the
// dots of anything shaped like an IPv4 address (the first five cases were
// read from envoyproxy/ratelimit's Prometheus output; the last two follow
// its regular expression, \d{1,3} four times joined by dots).
func TestIncumbentKeysSanitized(t *testing.T) {
	for _, tc := range []struct{ path, key1, key2 string }{
		{"plain", "plain", ""},
		{"k:colon_1.2.3.4", "k_colon_1_2_3_4", ""},
		{"k:x|y_10.1.2.3", "k_x_y_10_1_2_3", ""},
		{"route_route.masked_remote_address_192.168.0.0/16.remote_address", "route_route", "masked_remote_address_192_168_0_0/16"},
		{"k.dot_v.dot", "k", "dot_v"},
		{"version_1.2.3", "version_1", "2"},
		{"a_1234.5.6.7", "a_1234_5_6_7", ""},
	} {
		k1, k2 := incumbentKeys(tc.path)
		if k1 != tc.key1 || k2 != tc.key2 {
			t.Errorf("incumbentKeys(%q) = %q, %q; want %q, %q", tc.path, k1, k2, tc.key1, tc.key2)
		}
	}
}

// TestConfigAppliedDropsRemovedNodes: a reload drops the per-node series
// of the nodes it removes (a descriptor deleted, a domain removed), in
// sluice's names and the reference's, and the per-rule series of the rule
// names it removes, and keeps those of the nodes and rules still
// configured, with their counts, and a reference series another node
// still adds to. Before, every node ever served kept its series for the
// life of the process, however often the configuration changed.
func TestConfigAppliedDropsRemovedNodes(t *testing.T) {
	// after is what the reload keeps; before adds a node beside x, a
	// top-level node and a domain.
	const after = `
domain: d
descriptors:
  - key: keep
    rate_limit: {unit: hour, requests_per_unit: 10, name: kept}
  - key: p
    value: v
    descriptors:
      - key: a
        descriptors:
          - key: x
            rate_limit: {unit: hour, requests_per_unit: 10}
`
	const before = after + `          - key: y
            rate_limit: {unit: hour, requests_per_unit: 10, name: dropped}
  - key: gone
    rate_limit: {unit: hour, requests_per_unit: 10}
---
domain: removed
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
`
	h := newHarness(t, Options{IncumbentNames: true}, service.Options{}, before)
	for _, c := range []struct {
		domain string
		kv     []string
	}{
		{"d", []string{"keep", "1"}}, {"d", []string{"gone", "1"}},
		{"d", []string{"p", "v", "a", "1", "x", "1"}}, {"d", []string{"p", "v", "a", "1", "y", "1"}},
		{"removed", []string{"k", "1"}},
	} {
		if _, err := h.call(t, rq(c.domain, d(c.kv...))); err != nil {
			t.Fatal(err)
		}
	}
	cfg := parseConfig(t, after)
	h.svc.SetConfig(cfg)
	h.m.ConfigApplied(cfg)

	f := scrape(t, h.reg)
	if got, want := f.series("sluice_rate_limit_total_hits_total"), []string{
		"descriptor=keep,domain=d,key1=keep,key2=",
		"descriptor=p_v.a.x,domain=d,key1=p_v,key2=a",
	}; !slices.Equal(got, want) {
		t.Errorf("sluice's node series after the reload:\n%q\nwant\n%q", got, want)
	}
	// The reference's names sum p_v.a.x and the removed p_v.a.y into
	// their first two parts: that series stays, with both counts.
	if got, want := f.series("ratelimit_service_rate_limit_total_hits"), []string{
		"domain=d,key1=keep,key2=",
		"domain=d,key1=p_v,key2=a",
	}; !slices.Equal(got, want) {
		t.Errorf("reference series after the reload:\n%q\nwant\n%q", got, want)
	}
	if got, want := f.series("sluice_rule_hits_total"), []string{"domain=d,rule=kept"}; !slices.Equal(got, want) {
		t.Errorf("rule series after the reload: %q, want %q", got, want)
	}
	f.check(t, []want{
		{"sluice_rate_limit_total_hits_total", "descriptor=keep,domain=d,key1=keep,key2=", 1},
		{"sluice_rule_hits_total", "domain=d,rule=kept", 1},
		{"ratelimit_service_rate_limit_total_hits", "domain=d,key1=p_v,key2=a", 2},
	})
	// A node still configured counts on from where it was.
	if _, err := h.call(t, rq("d", d("keep", "1"))); err != nil {
		t.Fatal(err)
	}
	scrape(t, h.reg).check(t, []want{{"sluice_rate_limit_total_hits_total", "descriptor=keep,domain=d,key1=keep,key2=", 2}})
}

// TestConfigAppliedConcurrent: reloads that drop series while requests
// create them race with nothing (run with -race), and once the requests
// of the removed node stop, the next reload leaves only the configured
// nodes' series.
func TestConfigAppliedConcurrent(t *testing.T) {
	const both = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n"
	const onlyA = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n"
	h := newHarness(t, Options{IncumbentNames: true}, service.Options{}, both)
	h.churn(t, []*descriptor.Config{parseConfig(t, onlyA), parseConfig(t, both)}, rq("d", d("a", "1")), rq("d", d("b", "1")))
	if got, want := scrape(t, h.reg).series("sluice_rate_limit_total_hits_total"), []string{"descriptor=a,domain=d,key1=a,key2="}; !slices.Equal(got, want) {
		t.Errorf("series %q, want %q", got, want)
	}
}
