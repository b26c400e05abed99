package metrics

import (
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/service"
)

// withOverride gives x a request limit override of n per m×unit.
func withOverride(x *rlv3.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit, m uint32) *rlv3.RateLimitDescriptor {
	x.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	if m > 0 {
		x.Limit.UnitMultiplier = wrapperspb.UInt32(m)
	}
	return x
}

// TestRuleLimitGauges checks the configured-limit gauges: one series of
// each family per configured rule, labelled like the per-node counters,
// following the configuration as it changes.
func TestRuleLimitGauges(t *testing.T) {
	h := newHarness(t, Options{}, service.Options{}, apiYAML)
	h.m.ConfigApplied(parseConfig(t, apiYAML))
	f := scrape(t, h.reg)
	type g struct {
		labels               string
		limit, window, burst float64
	}
	for _, w := range []g{
		{"algorithm=fixed_window,descriptor=user,domain=api,rule=per_user,unit=minute", 20, 60, 20},
		{"algorithm=fixed_window,descriptor=ip,domain=api,rule=fw.1mi,unit=minute", 1, 60, 1}, // unnamed: its state id
		{"algorithm=fixed_window,descriptor=shadow,domain=api,rule=shadowed,unit=minute", 0, 60, 0},
		{"algorithm=token_bucket,descriptor=multi,domain=api,rule=burst,unit=second", 10, 1, 30},
		{"algorithm=fixed_window,descriptor=multi,domain=api,rule=hourly,unit=hour", 5, 3600, 5},
	} {
		f.check(t, []want{
			{"sluice_rule_limit", w.labels, w.limit},
			{"sluice_rule_window_seconds", w.labels, w.window},
			{"sluice_rule_burst", w.labels, w.burst},
		})
	}
	if got := f.series("sluice_rule_limit"); len(got) != 5 {
		t.Errorf("sluice_rule_limit has %d series, want 5 (unlimited nodes have none): %q", len(got), got)
	}

	// A reload: user's limit rises, multi loses its hourly rule and gains a
	// five-minute one, ip goes, a node of two levels and a domain arrive.
	next := `
domain: api
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 40}
  - key: multi
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 30}
      - {name: five, algorithm: sliding_window, unit: minute, unit_multiplier: 5, requests_per_unit: 7}
    descriptors:
      - key: path
        value: /a
        rate_limit: {unit: day, requests_per_unit: 3}
---
domain: other
descriptors:
  - key: k
    rate_limit: {name: n, unit: second, requests_per_unit: 2}
`
	h.m.ConfigApplied(parseConfig(t, next))
	f = scrape(t, h.reg)
	f.check(t, []want{
		{"sluice_rule_limit", "algorithm=fixed_window,descriptor=user,domain=api,rule=per_user,unit=minute", 40},
		{"sluice_rule_limit", "algorithm=sliding_window,descriptor=multi,domain=api,rule=five,unit=minute", 7},
		{"sluice_rule_window_seconds", "algorithm=sliding_window,descriptor=multi,domain=api,rule=five,unit=minute", 300},
		{"sluice_rule_limit", "algorithm=fixed_window,descriptor=multi.path_/a,domain=api,rule=fw.1da,unit=day", 3},
		{"sluice_rule_window_seconds", "algorithm=fixed_window,descriptor=multi.path_/a,domain=api,rule=fw.1da,unit=day", 86400},
		{"sluice_rule_limit", "algorithm=fixed_window,descriptor=k,domain=other,rule=n,unit=second", 2},
	})
	for _, fam := range []string{"sluice_rule_limit", "sluice_rule_window_seconds", "sluice_rule_burst"} {
		if got := f.series(fam); len(got) != 5 {
			t.Errorf("%s after the reload has %d series, want 5: %q", fam, len(got), got)
		}
		for _, s := range f.series(fam) {
			if strings.Contains(s, "descriptor=ip,") || strings.Contains(s, "rule=hourly") || strings.Contains(s, "descriptor=shadow,") {
				t.Errorf("%s kept a removed rule's series: %s", fam, s)
			}
		}
	}
}

// TestOverrideLimitGauge checks the bounded form of limit overrides: one
// series per domain, descriptor keys and unit, never a value, capped.
func TestOverrideLimitGauge(t *testing.T) {
	h := newHarness(t, Options{}, service.Options{}, apiYAML)
	h.m.ConfigApplied(parseConfig(t, apiYAML))
	for _, x := range []*rlv3.RateLimitDescriptor{
		withOverride(d("user", "alice"), 50, typev3.RateLimitUnit_MINUTE, 0),
		withOverride(d("user", "bob", "path", "/x"), 30, typev3.RateLimitUnit_HOUR, 0),
		withOverride(d("user", "carol", "path", "/y"), 20, typev3.RateLimitUnit_HOUR, 5), // the last one seen, per one hour
	} {
		if _, err := h.call(t, rq("api", x)); err != nil {
			t.Fatal(err)
		}
	}
	// An unconfigured domain gets no override series.
	h.call(t, rq("nope", withOverride(d("user", "dave"), 9, typev3.RateLimitUnit_SECOND, 0)))
	f := scrape(t, h.reg)
	f.check(t, []want{
		{"sluice_override_limit", "descriptor=user,domain=api,unit=minute", 50},
		{"sluice_override_limit", "descriptor=user.path,domain=api,unit=hour", 4},
	})
	if got := f.series("sluice_override_limit"); len(got) != 2 {
		t.Errorf("override series %q, want 2", got)
	}
	for i := range MaxOverrideDescriptors + 20 {
		h.call(t, rq("api", withOverride(d(fmt.Sprintf("k%d", i), "v"), 1, typev3.RateLimitUnit_SECOND, 0)))
	}
	f = scrape(t, h.reg)
	got := f.series("sluice_override_limit")
	if len(got) > MaxOverrideDescriptors+1 {
		t.Errorf("%d override series, want at most %d", len(got), MaxOverrideDescriptors+1)
	}
	f.check(t, []want{{"sluice_override_limit", "descriptor=_other,domain=api,unit=second", 1}})
	// A reload without the domain drops its override series.
	h.m.ConfigApplied(parseConfig(t, "domain: other\n"))
	if got := scrape(t, h.reg).series("sluice_override_limit"); len(got) != 0 {
		t.Errorf("override series of a removed domain kept: %q", got)
	}
}

// TestOverridePeriodsClamped: a limit override longer than a year is
// counted in sluice_override_periods_clamped_total and its gauge is per
// YEAR, the period it is decided with; a year exactly is not counted.
func TestOverridePeriodsClamped(t *testing.T) {
	h := newHarness(t, Options{}, service.Options{}, apiYAML)
	h.m.ConfigApplied(parseConfig(t, apiYAML))
	f := scrape(t, h.reg)
	f.check(t, []want{{"sluice_override_periods_clamped_total", "", 0}})
	for _, x := range []*rlv3.RateLimitDescriptor{
		withOverride(d("user", "alice"), 730, typev3.RateLimitUnit_SECOND, 3_000_000_000),
		withOverride(d("user", "bob"), 730, typev3.RateLimitUnit_YEAR, 2),
		withOverride(d("user", "carol"), 365, typev3.RateLimitUnit_DAY, 365),
	} {
		if _, err := h.call(t, rq("api", x)); err != nil {
			t.Fatal(err)
		}
	}
	f = scrape(t, h.reg)
	f.check(t, []want{
		{"sluice_override_periods_clamped_total", "", 2},
		{"sluice_override_limit", "descriptor=user,domain=api,unit=year", 730},
		{"sluice_override_limit", "descriptor=user,domain=api,unit=day", 1},
	})
}
