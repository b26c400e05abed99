package service

import (
	"maps"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

const headersYAML = `
domain: h
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: multi
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 1}
      - {unit: hour, requests_per_unit: 100}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: odd
    rate_limit: {name: "caf\u00e9 \"x\"", unit: minute, requests_per_unit: 3}
  - key: quoted
    rate_limit: {name: "say \"hi\"\\", unit: minute, requests_per_unit: 3}
`

func TestHeaders(t *testing.T) {
	all := HeaderOptions{Enabled: true, IETF: true, RetryAfter: true}
	tests := []struct {
		name  string
		opts  Options
		setup [][]*rlv3.RateLimitDescriptor
		req   []*rlv3.RateLimitDescriptor
		want  map[string]string
	}{
		{
			name: "disabled", opts: Options{Headers: HeaderOptions{IETF: true, RetryAfter: true}},
			req: []*rlv3.RateLimitDescriptor{d("a", "1")}, want: map[string]string{},
		},
		{
			name: "lowest remaining, default names",
			opts: Options{Headers: HeaderOptions{Enabled: true}},
			req:  []*rlv3.RateLimitDescriptor{d("a", "1"), d("b", "1")},
			want: map[string]string{"RateLimit-Limit": "5", "RateLimit-Remaining": "4", "RateLimit-Reset": "3600"},
		},
		{
			name: "custom names",
			opts: Options{Headers: HeaderOptions{Enabled: true, LimitHeader: "A-Ratelimit-Limit", RemainingHeader: "A-Ratelimit-Remaining", ResetHeader: "A-Ratelimit-Reset"}},
			req:  []*rlv3.RateLimitDescriptor{addend(d("a", "1"), 10)},
			want: map[string]string{"A-Ratelimit-Limit": "10", "A-Ratelimit-Remaining": "0", "A-Ratelimit-Reset": "60"},
		},
		{
			name: "a denial overrides a lower remaining that passed",
			opts: Options{Headers: all, ChargeOverLimit: ChargeNone}, // the denied 20 consumes nothing
			req:  []*rlv3.RateLimitDescriptor{addend(d("b", "1"), 4), addend(d("a", "1"), 20)},
			want: map[string]string{
				"RateLimit-Limit": "10", "RateLimit-Remaining": "10", "RateLimit-Reset": "60",
				"RateLimit-Policy": `"fw.1mi";q=10;w=60`, "RateLimit": `"fw.1mi";r=10;t=60`, "Retry-After": "60",
			},
		},
		{
			name:  "the last denial wins; Retry-After is the longest wait",
			opts:  Options{Headers: all},
			setup: [][]*rlv3.RateLimitDescriptor{{addend(d("b", "1"), 5), addend(d("a", "1"), 10)}},
			req:   []*rlv3.RateLimitDescriptor{d("b", "1"), d("a", "1")},
			want: map[string]string{
				"RateLimit-Limit": "10", "RateLimit-Remaining": "0", "RateLimit-Reset": "60",
				"RateLimit-Policy": `"fw.1mi";q=10;w=60`, "RateLimit": `"fw.1mi";r=0;t=60`, "Retry-After": "3600",
			},
		},
		{
			name: "a quota denial does not override",
			opts: Options{Headers: all},
			req:  []*rlv3.RateLimitDescriptor{addend(d("a", "1"), 10), addend(d("q", "1"), 5), d("b", "1")},
			// The only quota descriptor is over, so the request is denied,
			// but the headers describe the lowest remaining.
			want: map[string]string{
				"RateLimit-Limit": "10", "RateLimit-Remaining": "0", "RateLimit-Reset": "60",
				"RateLimit-Policy": `"fw.1mi";q=10;w=60`, "RateLimit": `"fw.1mi";r=0;t=60`, "Retry-After": "60",
			},
		},
		{
			name:  "the denying rule of several, all rules in the policy",
			opts:  Options{Headers: all},
			setup: [][]*rlv3.RateLimitDescriptor{{d("multi", "1")}},
			req:   []*rlv3.RateLimitDescriptor{d("multi", "1")},
			want: map[string]string{
				"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "1",
				"RateLimit-Policy": `"burst";q=1;w=1, "fw.1ho";q=100;w=3600`, "RateLimit": `"burst";r=0;t=1`, "Retry-After": "1",
			},
		},
		{
			name: "no Retry-After under global shadow mode",
			opts: Options{Headers: all, ShadowMode: true, ChargeOverLimit: ChargeNone},
			req:  []*rlv3.RateLimitDescriptor{addend(d("a", "1"), 20)},
			want: map[string]string{
				"RateLimit-Limit": "10", "RateLimit-Remaining": "10", "RateLimit-Reset": "60",
				"RateLimit-Policy": `"fw.1mi";q=10;w=60`, "RateLimit": `"fw.1mi";r=10;t=60`,
			},
		},
		{
			name: "names that are not printable ASCII fall back to the rule ID",
			opts: Options{Headers: HeaderOptions{Enabled: true, IETF: true}},
			req:  []*rlv3.RateLimitDescriptor{d("odd", "1")},
			want: map[string]string{
				"RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "60",
				"RateLimit-Policy": `"fw.1mi";q=3;w=60`, "RateLimit": `"fw.1mi";r=2;t=60`,
			},
		},
		{
			name: "quotes and backslashes are escaped",
			opts: Options{Headers: HeaderOptions{Enabled: true, IETF: true}},
			req:  []*rlv3.RateLimitDescriptor{d("quoted", "1")},
			want: map[string]string{
				"RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "60",
				"RateLimit-Policy": `"say \"hi\"\\";q=3;w=60`, "RateLimit": `"say \"hi\"\\";r=2;t=60`,
			},
		},
		{
			name: "no status with a limit, no headers",
			opts: Options{Headers: all},
			req:  []*rlv3.RateLimitDescriptor{d("nothing", "1")},
			want: map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.opts, headersYAML)
			for _, s := range tt.setup {
				h.call(t, rq("h", s...))
			}
			got := headerMap(t, h.call(t, rq("h", tt.req...)))
			if !maps.Equal(got, tt.want) {
				t.Fatalf("headers\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}
