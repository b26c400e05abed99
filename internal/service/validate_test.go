package service

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRequestValidation(t *testing.T) {
	many := func(n int) []*rlv3.RateLimitDescriptor {
		out := make([]*rlv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = d("key1", "x")
		}
		return out
	}
	manyEntries := func(n int) *rlv3.RateLimitDescriptor {
		var kv []string
		for range n {
			kv = append(kv, "k", "v")
		}
		return d(kv...)
	}
	long := strings.Repeat("x", DefaultMaxEntryLen+1)
	tests := []struct {
		name   string
		bounds RequestBounds
		req    *rlsv3.RateLimitRequest
		msg    string // "" means the request is valid
	}{
		{name: "nil request", req: nil, msg: "rate limit request must not be null"},
		{name: "empty domain", req: rq("", d("key1", "x")), msg: "rate limit domain must not be empty"},
		{name: "empty descriptor list", req: rq("basic"), msg: "rate limit descriptor list must not be empty"},
		{name: "nil descriptor", req: rq("basic", nil), msg: "descriptor 0 must not be null"},
		{name: "nil entry", req: rq("basic", &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{nil}}), msg: "descriptor 0 entry 0 must not be null"},
		{name: "empty key", req: rq("basic", d("key1", "x"), d("key1", "x", "", "y")), msg: "descriptor 1 entry 1 has an empty key"},
		{name: "empty value is fine", req: rq("basic", d("key1", ""))},
		{name: "64 descriptors", req: rq("basic", many(64)...)},
		{name: "65 descriptors", req: rq("basic", many(65)...), msg: "rate limit request has 65 descriptors, more than the limit of 64"},
		{name: "32 entries", req: rq("basic", manyEntries(32))},
		{name: "33 entries", req: rq("basic", manyEntries(33)), msg: "descriptor 0 has 33 entries, more than the limit of 32"},
		{name: "long key", req: rq("basic", d(long, "x")), msg: "descriptor 0 entry 0 key is 65537 bytes long, more than the limit of 65536"},
		{name: "long value", req: rq("basic", d("key1", long)), msg: "descriptor 0 entry 0 value is 65537 bytes long, more than the limit of 65536"},
		{name: "long domain", req: rq(long, d("key1", "x")), msg: "rate limit domain is 65537 bytes long, more than the limit of 65536"},
		{name: "custom bounds", bounds: RequestBounds{MaxDescriptors: 1, MaxEntries: 1, MaxEntryLen: 3},
			req: rq("bas", d("key1", "x")), msg: "descriptor 0 entry 0 key is 4 bytes long, more than the limit of 3"},
		{name: "override with UNKNOWN unit", req: rq("basic", override(d("key1", "x"), 5, typev3.RateLimitUnit_UNKNOWN, 0)),
			msg: "descriptor 0 limit override has invalid unit 0 (UNKNOWN)"},
		{name: "override with an unlisted unit", req: rq("basic", d("key1", "x"), override(d("key1", "x"), 5, typev3.RateLimitUnit(42), 0)),
			msg: "descriptor 1 limit override has invalid unit 42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{Bounds: tt.bounds}, basicYAML)
			resp, err := h.svc.ShouldRateLimit(context.Background(), tt.req)
			if tt.msg == "" {
				if err != nil || len(resp.Statuses) != len(tt.req.Descriptors) {
					t.Fatalf("valid request: err %v, %d statuses", err, len(resp.GetStatuses()))
				}
				return
			}
			st, ok := status.FromError(err)
			if !ok || st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tt.msg) || resp != nil {
				t.Fatalf("got (%v, %v), want InvalidArgument %q", resp, err, tt.msg)
			}
			if n := h.mem.calls.Load(); n != 0 {
				t.Fatalf("backend called %d times for an invalid request", n)
			}
		})
	}
}
