package compat

import (
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// The incumbent's service tests (test/service) feed its service a config
// and the cache's answers; the same facts hold through the binary with a
// config whose nodes give those answers (testdata/service/service.yaml: a
// limit of 0 is over on its first hit).

// over0 is the status of a node limited to 0 per minute.
var over0 = limited(over, 0, "MINUTE", 0)

// serviceCase is one request of the incumbent's service tests.
type serviceCase struct {
	name string
	req  []desc
	want answer
	alts []alt[answer]
	// metadata, if set, is the dynamic metadata's "metadata" struct as
	// sorted key=value pairs.
	metadata string
}

// serviceCases are grouped by the settings they need.
var serviceCases = []struct {
	env   map[string]string
	cases []serviceCase
}{
	{nil, []serviceCase{
		{name: "TestService: no limit", req: []desc{d("hello", "world")}, want: ans(ok, noLimit)},
		{name: "TestService: one over", req: []desc{d("blocked", "a"), d("hello", "world")}, want: ans(over, over0, noLimit)},
		{name: "TestRuleShadowMode", req: []desc{d("shadow_blocked", "a"), d("hello", "world")}, want: ans(ok, limited(ok, 0, "MINUTE", 0), noLimit)},
		{name: "TestMixedRuleShadowMode", req: []desc{d("shadow_blocked", "a"), d("blocked", "a")}, want: ans(over, limited(ok, 0, "MINUTE", 0), over0)},
		{name: "TestUnlimited", req: []desc{d("ten", sluicetest.Unique("a")), d("hello", "world"), d("unlimited", "b")},
			want: ans(ok, limited(ok, 10, "MINUTE", 9), noLimit, st{code: ok, remaining: math.MaxUint32})},
		{name: "TestServicePerDescriptorQuotaMode", req: []desc{d("blocked", "a"), d("quota_five", sluicetest.Unique("q"))},
			want: ans(over, over0, limited(ok, 5, "MINUTE", 4))},
		{name: "TestServiceMixedPerDescriptorModes", req: []desc{d("quota_five", sluicetest.Unique("q")), d("blocked", "a")},
			want: ans(over, limited(ok, 5, "MINUTE", 4), over0)},
		{name: "TestServiceMixedPerDescriptorModesUnderLimit", req: []desc{d("quota_five", sluicetest.Unique("q")), d("ten", sluicetest.Unique("t"))},
			want: ans(ok, limited(ok, 5, "MINUTE", 4), limited(ok, 10, "MINUTE", 9))},
		{name: "TestServiceQuotaModeOnlyAllOverTheLimit", req: []desc{d("quota_blocked", "a"), d("quota_blocked", "b")},
			want: ans(over, over0, over0)},
		{name: "TestServiceQuotaModeOnlySomeOverTheLimit", req: []desc{d("quota_blocked", "a"), d("quota_five", sluicetest.Unique("q"))},
			want: ans(ok, over0, limited(ok, 5, "MINUTE", 4))},
	}},
	{map[string]string{"SHADOW_MODE": "true"}, []serviceCase{
		{name: "TestServiceGlobalShadowMode", req: []desc{d("blocked", "a"), d("hello", "world")}, want: ans(ok, over0, noLimit)},
		{name: "TestServiceQuotaModeWithShadowMode", req: []desc{d("quota_blocked", "a"), d("quota_blocked", "b")}, want: ans(ok, over0, over0)},
		{name: "TestServiceMixedModeWithShadowMode", req: []desc{d("blocked", "a"), d("quota_blocked", "b")}, want: ans(ok, over0, over0)},
	}},
	{map[string]string{"QUOTA_MODE": "true", "RESPONSE_DYNAMIC_METADATA": "true"}, []serviceCase{
		{name: "TestServiceGlobalQuotaMode", req: []desc{d("blocked", "a"), d("regular_blocked", "b")}, want: ans(over, over0, over0)},
		{name: "TestMetadataReturnedForPassedDescriptors", req: []desc{d("regular", sluicetest.Unique("r")), d("regular_blocked", "b")},
			want: ans(ok, limited(ok, 10, "MINUTE", 9), over0), metadata: "name=service_1"},
		{name: "TestMetadataReturnedForAllPassedDescriptors", req: []desc{d("regular", sluicetest.Unique("r")), d("other", sluicetest.Unique("o"))},
			want: ans(ok, limited(ok, 10, "MINUTE", 9), limited(ok, 5, "MINUTE", 4)), metadata: "name=service_1 some_other_name=service_2"},
		{name: "TestOverlappingMetadataReturnsTheFirstValue", req: []desc{d("regular", sluicetest.Unique("r")), d("same", sluicetest.Unique("s"))},
			want: ans(ok, limited(ok, 10, "MINUTE", 9), limited(ok, 5, "MINUTE", 4)), metadata: "name=service_1"},
	}},
}

// TestServiceCases runs the incumbent's service-test facts on every core
// backend.
func TestServiceCases(t *testing.T) {
	for _, v := range core {
		for gi, group := range serviceCases {
			t.Run(fmt.Sprintf("%s/settings-%d", v.name, gi), func(t *testing.T) {
				t.Parallel()
				s := start(t, v, group.env, "service/service.yaml")
				sluicetest.AwayFromEdge(t, time.Minute, 0, 5*time.Second)
				for _, c := range group.cases {
					resp := s.ask(t, rq("service", c.req...))
					expect(t, c.name, answerOf(resp), c.want, c.alts...)
					if c.metadata != "" {
						expect(t, c.name+": dynamic metadata", metadataOf(resp), c.metadata)
					}
				}
			})
		}
	}
}

// metadataOf renders the "metadata" struct of a response's dynamic
// metadata as sorted key=value pairs.
func metadataOf(resp *rlsv3.RateLimitResponse) string {
	md := resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue()
	var out []string
	for k, v := range md.GetFields() {
		out = append(out, k+"="+v.GetStringValue())
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestServiceErrors: an empty domain and an empty descriptor list are
// refused with the incumbent's messages.
func TestServiceErrors(t *testing.T) {
	s := start(t, memory, nil, "service/service.yaml")
	_, err := s.try(rq("", d("hello", "world")))
	expect(t, "TestEmptyDomain", errText(err), "Unknown: rate limit domain must not be empty",
		because(devTypedErrors, "InvalidArgument: rate limit domain must not be empty"))
	_, err = s.try(rq("service"))
	expect(t, "TestEmptyDescriptors", errText(err), "Unknown: rate limit descriptor list must not be empty",
		because(devTypedErrors, "InvalidArgument: rate limit descriptor list must not be empty"))
}

// TestServiceKeepsConfigOnLoadError is TestService's config load failure: a
// broken file makes the reload fail, and the last good config keeps
// answering, whatever the order of the descriptors.
func TestServiceKeepsConfigOnLoadError(t *testing.T) {
	s := start(t, memory, nil, "service/service.yaml")
	before, _ := metric(t, s, `sluice_config_reloads_total{result="failure"}`)
	broken := filepath.Join(s.dir, "broken.yaml")
	if err := os.WriteFile(broken, []byte("domain: broken\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Until(t, 10*time.Second, "the reload to fail", func() bool {
		n, _ := metric(t, s, `sluice_config_reloads_total{result="failure"}`)
		return n > before
	})
	resp := s.ask(t, rq("service", d("hello", "world"), d("blocked", "a")))
	expect(t, "after a failed reload", answerOf(resp), ans(over, noLimit, over0))
}

// TestResponseHeaders: with LIMIT_RESPONSE_HEADERS_ENABLED the response
// carries the limit, remaining and reset of the descriptor closest to its
// limit (the one over it, if any), under the default or configured names.
func TestResponseHeaders(t *testing.T) {
	for _, names := range [][3]string{
		{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"},
		{"A-Ratelimit-Limit", "A-Ratelimit-Remaining", "A-Ratelimit-Reset"},
	} {
		t.Run(names[0], func(t *testing.T) {
			env := map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}
			if names[0] != "RateLimit-Limit" {
				env["LIMIT_LIMIT_HEADER"], env["LIMIT_REMAINING_HEADER"], env["LIMIT_RESET_HEADER"] = names[0], names[1], names[2]
			}
			s := start(t, memory, env, "service/service.yaml")
			for _, c := range []struct {
				what             string
				req              []desc
				limit, remaining string
			}{
				{"one over", []desc{d("blocked", "a"), d("hello", "world")}, "0", "0"},
				{"closest to its limit", []desc{d("ten", sluicetest.Unique("t")), d("quota_five", sluicetest.Unique("q"))}, "5", "4"},
			} {
				resp := s.ask(t, rq("service", c.req...))
				got := map[string]string{}
				for _, h := range resp.GetResponseHeadersToAdd() {
					got[h.GetKey()] = h.GetValue()
				}
				expect(t, c.what+": "+names[0], got[names[0]], c.limit)
				expect(t, c.what+": "+names[1], got[names[1]], c.remaining)
				if reset, err := strconv.Atoi(got[names[2]]); err != nil || reset < 0 || reset > 60 {
					t.Errorf("%s: %s = %q, want whole seconds within [0, 60]", c.what, names[2], got[names[2]])
				}
				if len(got) != 3 {
					t.Errorf("%s: headers %v, want exactly the three", c.what, got)
				}
			}
		})
	}
}
