package metrics

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/service"
)

// TestRequestsRefused: calls refused for a request bound are counted by
// reason in sluice_requests_refused_total, each reason shown at 0 from
// the start: the service's (too many descriptors or rules, a domain too
// long) from
// its request events, the server's (a request too large) from
// RequestRefused. A malformed request is not a bound refusal.
func TestRequestsRefused(t *testing.T) {
	h := newHarness(t, Options{}, service.Options{Bounds: service.RequestBounds{MaxDescriptors: 2, MaxRequestRules: 1}},
		"domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	scrape(t, h.reg).check(t, []want{
		{"sluice_requests_refused_total", "reason=descriptors", 0},
		{"sluice_requests_refused_total", "reason=rules", 0},
		{"sluice_requests_refused_total", "reason=request_bytes", 0},
		{"sluice_requests_refused_total", "reason=domain_bytes", 0},
	})
	for range 2 {
		if _, err := h.call(t, rq("api", d("k", "1"), d("k", "2"), d("k", "3"))); err == nil {
			t.Fatal("3 descriptors with a bound of 2: decided")
		}
	}
	if _, err := h.call(t, rq(strings.Repeat("d", service.DefaultMaxEntryLen+1), d("k", "1"))); err == nil {
		t.Fatal("a 64 KiB domain: decided")
	}
	if _, err := h.call(t, rq("api", d("k", "1"), d("k", "2"))); err == nil {
		t.Fatal("2 rules with a bound of 1: decided")
	}
	if _, err := h.call(t, rq("api")); err == nil {
		t.Fatal("no descriptors: decided")
	}
	h.m.RequestRefused(RequestBytesRefused)
	scrape(t, h.reg).check(t, []want{
		{"sluice_requests_refused_total", "reason=descriptors", 2},
		{"sluice_requests_refused_total", "reason=rules", 1},
		{"sluice_requests_refused_total", "reason=request_bytes", 1},
		{"sluice_requests_refused_total", "reason=domain_bytes", 1},
		{"sluice_requests_total", "code=InvalidArgument", 5},
	})
}
