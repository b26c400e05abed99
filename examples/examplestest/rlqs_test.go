package examplestest

import (
	"slices"
	"strings"
	"testing"

	matcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	rlqfv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	// The typed_config types of envoy-rlqs.yaml, beside envoy_test.go's.
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/sluice-rl/sluice/internal/rlqs"
)

const envoyRLQSBootstrap = "examples/envoy/envoy-rlqs.yaml"

// TestEnvoyRLQSBootstrapValidates checks envoy-rlqs.yaml against Envoy's
// protos, every typed_config unpacked and validated.
func TestEnvoyRLQSBootstrapValidates(t *testing.T) {
	_, unpacked, err := checkBootstrap(repoFile(t, envoyRLQSBootstrap))
	if err != nil {
		t.Fatalf("%s: %v", envoyRLQSBootstrap, err)
	}
	want := []string{
		"envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings", // the matcher's action
		"envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings", // on_no_match
		"envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig",
		"envoy.extensions.filters.http.router.v3.Router",
		"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
		"envoy.type.matcher.v3.HttpRequestHeaderMatchInput", // the predicate's input
		"envoy.type.matcher.v3.HttpRequestHeaderMatchInput", // the tenant's custom_value
	}
	wantList(t, "unpacked typed_configs", unpacked, want)
}

// TestEnvoyRLQSBucketsMatch: every bucket the filter's matchers build
// (a header read as "x") matches a node with rules in the example sluice
// config, in the filter's domain, as sluice maps buckets onto the tree;
// and the settings are what the filter supports (no
// requests_per_time_unit, whole-second fill intervals).
func TestEnvoyRLQSBucketsMatch(t *testing.T) {
	b, _, err := parseBootstrap(repoFile(t, envoyRLQSBootstrap))
	if err != nil {
		t.Fatal(err)
	}
	var filter *rlqfv3.RateLimitQuotaFilterConfig
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					t.Fatal(err)
				}
				for _, hf := range hcm.GetHttpFilters() {
					c := &rlqfv3.RateLimitQuotaFilterConfig{}
					if hf.GetTypedConfig().UnmarshalTo(c) == nil {
						filter = c
					}
				}
			}
		}
	}
	if filter == nil {
		t.Fatal("no rate_limit_quota filter")
	}
	cfg := loadSluiceConfig(t, "examples/envoy/rlqs")
	dom := cfg.Domain(filter.GetDomain())
	if dom == nil {
		t.Fatalf("the sluice config has no domain %q", filter.GetDomain())
	}
	var actions []*matcherv3.Matcher_OnMatch
	for _, m := range filter.GetBucketMatchers().GetMatcherList().GetMatchers() {
		actions = append(actions, m.GetOnMatch())
	}
	actions = append(actions, filter.GetBucketMatchers().GetOnNoMatch())
	var paths []string
	for _, a := range actions {
		s := &rlqfv3.RateLimitQuotaBucketSettings{}
		if err := a.GetAction().GetTypedConfig().UnmarshalTo(s); err != nil {
			t.Fatalf("action %s: %v", a.GetAction().GetName(), err)
		}
		bucket := map[string]string{}
		for k, v := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
			bucket[k] = v.GetStringValue()
			if v.GetCustomValue() != nil {
				bucket[k] = "x"
			}
		}
		node, _ := rlqs.Resolve(dom, bucket)
		if node == nil || len(node.Rules) == 0 {
			t.Errorf("bucket %v matches no node with rules", bucket)
			continue
		}
		paths = append(paths, node.Path())
		if tb := s.GetExpiredAssignmentBehavior().GetFallbackRateLimit().GetTokenBucket(); tb != nil && tb.GetFillInterval().GetNanos() != 0 {
			t.Errorf("action %s: the filter reads fill_interval in whole seconds", a.GetAction().GetName())
		}
		if s.GetExpiredAssignmentBehavior().GetFallbackRateLimit().GetRequestsPerTimeUnit() != nil ||
			s.GetNoAssignmentBehavior().GetFallbackRateLimit().GetRequestsPerTimeUnit() != nil {
			t.Errorf("action %s: the filter does not support requests_per_time_unit", a.GetAction().GetName())
		}
	}
	slices.Sort(paths)
	if want := []string{"route_orders.tenant", "route_other"}; !slices.Equal(paths, want) {
		t.Errorf("buckets reach %v, want %v", paths, want)
	}
}

// TestEnvoyRLQSBootstrapRejectsMistakes shows the validation above has
// teeth on the filter's own settings.
func TestEnvoyRLQSBootstrapRejectsMistakes(t *testing.T) {
	doc := string(repoFile(t, envoyRLQSBootstrap))
	cases := []struct{ name, old, new string }{
		{"a misspelt setting", "reporting_interval: 1s\n                                    # Until", "reporting_intervall: 1s\n                                    # Until"},
		{"a token bucket that never fills", "fill_interval: 1s", "fill_interval: 0s"},
		{"no reporting interval", "                              reporting_interval: 1s\n", ""},
		{"an unknown blanket rule", "blanket_rule: ALLOW_ALL}", "blanket_rule: ALLOW_SOME}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(doc, tc.old) {
				t.Fatalf("%s does not contain %q", envoyRLQSBootstrap, tc.old)
			}
			if _, _, err := checkBootstrap([]byte(strings.Replace(doc, tc.old, tc.new, 1))); err == nil {
				t.Error("accepted")
			}
		})
	}
}
