package metrics

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// domainLabels lists the values of the domain label across every family
// of the scrape.
func (f families) domainLabels() []string {
	seen := map[string]bool{}
	for _, fam := range f {
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if l.GetName() == "domain" {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// TestConfigAppliedDropsRemovedDomains: a configuration change that
// removes a domain drops every series labelled by it (decisions, near
// limit, rules, detailed descriptors, per-node series in sluice's names and
// the reference's), keeps the series of the domains still configured with
// their counts, keeps a domain label that a remaining domain shares (names
// cut to the same 256 bytes), and keeps the unknown_domain series of
// domains that were never configured. A domain that was unknown, then
// configured, then removed is dropped, and stops counting against
// MaxUnknownDomains once configured; so is an unknown domain whose
// counters a late decision of the previous configuration reused. A series that a request decided with
// the previous configuration recreates is dropped by the next change.
// Before, a removed domain kept its series until the process restarted.
func TestConfigAppliedDropsRemovedDomains(t *testing.T) {
	long := strings.Repeat("x", MaxDescriptorLabelLen)
	domain := func(name string) string {
		return "domain: " + name + "\ndescriptors:\n" +
			"  - key: k\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 2, name: r}\n"
	}
	join := func(names ...string) string {
		var docs []string
		for _, n := range names {
			docs = append(docs, domain(n))
		}
		return strings.Join(docs, "---\n")
	}
	h := newHarness(t, Options{IncumbentNames: true, MaxUnknownDomains: 2}, service.Options{}, join("keep", "gone", long+"1", long+"2"))
	apply := func(yaml string) {
		t.Helper()
		c := parseConfig(t, yaml)
		h.svc.SetConfig(c)
		h.m.ConfigApplied(c)
	}
	call := func(domain string) {
		t.Helper()
		if _, err := h.call(t, rq(domain, d("k", "1"))); err != nil {
			t.Fatal(err)
		}
	}
	apply(join("keep", "gone", long+"1", long+"2"))
	for _, dom := range []string{"keep", "gone", "gone", long + "1", long + "2", "stranger"} {
		call(dom)
	}
	if got, want := scrape(t, h.reg).domainLabels(), []string{"gone", "keep", "stranger", long}; !slices.Equal(got, want) {
		t.Fatalf("domains before the change %q, want %q", got, want)
	}

	apply(join("keep", long+"2"))
	f := scrape(t, h.reg)
	if got, want := f.domainLabels(), []string{"keep", "stranger", long}; !slices.Equal(got, want) {
		t.Errorf("domains after removing one %q, want %q", got, want)
	}
	f.check(t, []want{
		{"sluice_decisions_total", "domain=keep,outcome=ok", 1},
		{"sluice_rule_hits_total", "domain=keep,rule=r", 1},
		{"sluice_descriptor_hits_total", "descriptor=k_1,domain=keep", 1},
		{"sluice_rate_limit_total_hits_total", "descriptor=k,domain=keep,key1=k,key2=", 1},
		{"ratelimit_service_rate_limit_total_hits", "domain=keep,key1=k,key2=", 1},
		{"sluice_decisions_total", "domain=stranger,outcome=unknown_domain", 1},
		{"sluice_decisions_total", "domain=" + long + ",outcome=ok", 2},
	})

	// A request decided with the previous configuration while the change
	// ran recreates a series of the removed domain; the next change drops
	// it.
	h.m.Descriptor(service.DescriptorEvent{Domain: "gone", Outcome: service.OutcomeNoLimit})
	if got := scrape(t, h.reg).domainLabels(); !slices.Contains(got, "gone") {
		t.Fatalf("late decision recreated no series: %q", got)
	}
	apply(join("keep", long+"2"))
	if got := scrape(t, h.reg).domainLabels(); slices.Contains(got, "gone") {
		t.Errorf("domains after the next change %q: the late series stayed", got)
	}
	// The same when a request to the removed domain, now unknown, came
	// first: the late decision reuses the unknown domain's counters.
	call("gone")
	h.m.Descriptor(service.DescriptorEvent{Domain: "gone", Outcome: service.OutcomeNoLimit})
	apply(join("keep", long+"2"))
	if got := scrape(t, h.reg).domainLabels(); slices.Contains(got, "gone") {
		t.Errorf("domains after the next change %q: the late series on an unknown domain stayed", got)
	}

	// stranger holds one of the two unknown-domain labels, filler the
	// other; configuring stranger frees its label for another unknown
	// domain, and removing it drops it.
	apply(join("keep", long+"2", "stranger"))
	call("filler")
	call("stranger")
	call("other-stranger")
	apply(join("keep", long+"2"))
	f = scrape(t, h.reg)
	if got, want := f.domainLabels(), []string{"filler", "keep", "other-stranger", long}; !slices.Equal(got, want) {
		t.Errorf("domains after configuring and removing stranger %q, want %q", got, want)
	}
}

// TestConfigAppliedKeepsSharedDomainLabel: removing a domain named like
// the fold-over label keeps the fold-over series of unknown domains (a
// label still in use keeps all its series).
func TestConfigAppliedKeepsSharedDomainLabel(t *testing.T) {
	const yaml = "domain: " + OtherLabel + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	h := newHarness(t, Options{MaxUnknownDomains: 1}, service.Options{}, yaml)
	c := parseConfig(t, yaml)
	h.m.ConfigApplied(c)
	for _, dom := range []string{OtherLabel, "a", "b"} { // b folds into _other
		if _, err := h.call(t, rq(dom, d("k", "1"))); err != nil {
			t.Fatal(err)
		}
	}
	empty := parseConfig(t, "domain: z\n")
	h.svc.SetConfig(empty)
	h.m.ConfigApplied(empty)
	scrape(t, h.reg).check(t, []want{{"sluice_decisions_total", "domain=" + OtherLabel + ",outcome=unknown_domain", 1}})
}

// TestConfigAppliedDomainsConcurrent: changes that add and remove a
// domain while requests to it create its series race with nothing (run
// with -race), and once its requests stop, the next change that leaves it
// out leaves none of its series.
func TestConfigAppliedDomainsConcurrent(t *testing.T) {
	const a = "domain: a\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 1000000, name: r}\n"
	const both = a + "---\n" + "domain: b\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 1000000, name: r}\n"
	h := newHarness(t, Options{IncumbentNames: true}, service.Options{}, both)
	h.churn(t, []*descriptor.Config{parseConfig(t, a), parseConfig(t, both)}, rq("a", d("k", "1")), rq("b", d("k", "1")))
	if got, want := scrape(t, h.reg).domainLabels(), []string{"a", "b"}; !slices.Equal(got, want) && !slices.Equal(got, want[:1]) {
		t.Fatalf("domains %q", got)
	}
	if got := scrape(t, h.reg).domainLabels(); slices.Contains(got, "b") {
		// b's requests ended while it was configured, or were answered
		// unknown_domain; either way only that outcome may stay.
		for _, s := range scrape(t, h.reg).series("sluice_decisions_total") {
			if strings.Contains(s, "domain=b,") && s != "domain=b,outcome=unknown_domain" {
				t.Errorf("series %q of the removed domain stayed", s)
			}
		}
	}
}
