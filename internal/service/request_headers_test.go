package service

import (
	"maps"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestRequestHeaders: request_headers_to_add carries the limit, remaining
// and reset of the status the response headers describe, under its own
// names, on OK and OVER_LIMIT responses alike (shadow mode included), as
// envoyproxy/ratelimit's LIMIT_REQUEST_HEADERS_ENABLED does; it is
// independent of the response headers.
func TestRequestHeaders(t *testing.T) {
	custom := HeaderOptions{Request: true, RequestLimitHeader: "X-Limit", RequestRemainingHeader: "X-Remaining", RequestResetHeader: "X-Reset"}
	tests := []struct {
		name         string
		opts         Options
		setup        [][]*rlv3.RateLimitDescriptor
		req          []*rlv3.RateLimitDescriptor
		code         rlsv3.RateLimitResponse_Code
		want, wantRH map[string]string
	}{
		{
			name: "disabled", opts: Options{Headers: HeaderOptions{Enabled: true}},
			req: []*rlv3.RateLimitDescriptor{d("a", "1")}, code: OK, want: map[string]string{},
			wantRH: map[string]string{"RateLimit-Limit": "10", "RateLimit-Remaining": "9", "RateLimit-Reset": "60"},
		},
		{
			name: "default names, lowest remaining, no response headers",
			opts: Options{Headers: HeaderOptions{Request: true}},
			req:  []*rlv3.RateLimitDescriptor{d("a", "1"), d("b", "1")}, code: OK,
			want:   map[string]string{"RateLimit-Limit": "5", "RateLimit-Remaining": "4", "RateLimit-Reset": "3600"},
			wantRH: map[string]string{},
		},
		{
			name: "custom names beside the response headers",
			opts: Options{Headers: HeaderOptions{Enabled: true, Request: true, RequestLimitHeader: "X-Limit",
				RequestRemainingHeader: "X-Remaining", RequestResetHeader: "X-Reset"}},
			req: []*rlv3.RateLimitDescriptor{d("a", "1")}, code: OK,
			want:   map[string]string{"X-Limit": "10", "X-Remaining": "9", "X-Reset": "60"},
			wantRH: map[string]string{"RateLimit-Limit": "10", "RateLimit-Remaining": "9", "RateLimit-Reset": "60"},
		},
		{
			name:  "over the limit",
			opts:  Options{Headers: custom},
			setup: [][]*rlv3.RateLimitDescriptor{{addend(d("a", "1"), 10)}},
			req:   []*rlv3.RateLimitDescriptor{d("a", "1")}, code: OVER,
			want:   map[string]string{"X-Limit": "10", "X-Remaining": "0", "X-Reset": "60"},
			wantRH: map[string]string{},
		},
		{
			name:  "shadow mode: OK, and the upstream learns it is over",
			opts:  Options{Headers: custom, ShadowMode: true},
			setup: [][]*rlv3.RateLimitDescriptor{{addend(d("a", "1"), 10)}},
			req:   []*rlv3.RateLimitDescriptor{d("a", "1")}, code: OK,
			want:   map[string]string{"X-Limit": "10", "X-Remaining": "0", "X-Reset": "60"},
			wantRH: map[string]string{},
		},
		{
			name: "no status with a limit, no headers",
			opts: Options{Headers: custom},
			req:  []*rlv3.RateLimitDescriptor{d("nothing", "1")}, code: OK,
			want: map[string]string{}, wantRH: map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.opts, headersYAML)
			for _, s := range tt.setup {
				h.call(t, rq("h", s...))
			}
			resp := h.call(t, rq("h", tt.req...))
			if resp.GetOverallCode() != tt.code {
				t.Errorf("code %v, want %v", resp.GetOverallCode(), tt.code)
			}
			if got := requestHeaderMap(t, resp.GetRequestHeadersToAdd()); !maps.Equal(got, tt.want) {
				t.Errorf("request headers\n got %v\nwant %v", got, tt.want)
			}
			if got := headerMap(t, resp); !maps.Equal(got, tt.wantRH) {
				t.Errorf("response headers\n got %v\nwant %v", got, tt.wantRH)
			}
		})
	}
}

func requestHeaderMap(t *testing.T, hs []*corev3.HeaderValue) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, h := range hs {
		if _, dup := m[h.Key]; dup {
			t.Fatalf("header %s added twice", h.Key)
		}
		m[h.Key] = h.Value
	}
	return m
}
