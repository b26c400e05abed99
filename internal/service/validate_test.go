package service

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

func TestRequestValidation(t *testing.T) {
	many := func(n int) []*rlv3.RateLimitDescriptor {
		out := make([]*rlv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = d("key1", strconv.Itoa(i)) // one identity each, so each is admitted
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
	// Requests malformed as a whole get InvalidArgument and reach no
	// backend.
	whole := []struct {
		name   string
		bounds RequestBounds
		req    *rlsv3.RateLimitRequest
		msg    string
	}{
		{name: "nil request", req: nil, msg: "rate limit request must not be null"},
		{name: "empty domain", req: rq("", d("key1", "x")), msg: "rate limit domain must not be empty"},
		{name: "empty descriptor list", req: rq("basic"), msg: "rate limit descriptor list must not be empty"},
		{name: "8193 descriptors", req: rq("basic", many(DefaultMaxDescriptors+1)...), msg: "rate limit request has 8193 descriptors, more than the limit of 8192 (SLUICE_MAX_DESCRIPTORS)"},
		{name: "custom bounds: descriptors", bounds: RequestBounds{MaxDescriptors: 2}, req: rq("basic", many(3)...),
			msg: "rate limit request has 3 descriptors, more than the limit of 2 (SLUICE_MAX_DESCRIPTORS)"},
		{name: "long domain", req: rq(long, d("key1", "x")), msg: "rate limit domain is 65537 bytes long, more than the limit of 65536"},
		{name: "custom bounds: domain", bounds: RequestBounds{MaxEntryLen: 3}, req: rq("basic", d("key1", "x")),
			msg: "rate limit domain is 5 bytes long, more than the limit of 3"},
	}
	for _, tt := range whole {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{Bounds: tt.bounds}, basicYAML)
			resp, err := h.svc.ShouldRateLimit(context.Background(), tt.req)
			st, ok := status.FromError(err)
			if !ok || st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tt.msg) || resp != nil {
				t.Fatalf("got (%v, %v), want InvalidArgument %q", resp, err, tt.msg)
			}
			if n := h.mem.calls.Load(); n != 0 {
				t.Fatalf("backend called %d times for an invalid request", n)
			}
		})
	}

	// A malformed descriptor is answered OVER_LIMIT on its own (no limit,
	// nothing counted), and the request's other descriptors are decided:
	// one bad descriptor never turns the whole call into an error, which
	// Envoy would let through unlimited.
	perDescriptor := []struct {
		name    string
		bounds  RequestBounds
		req     *rlsv3.RateLimitRequest
		invalid []int // the descriptors answered OVER_LIMIT as invalid; none: the request is valid
	}{
		{name: "nil descriptor", req: rq("basic", nil, d("key1", "x")), invalid: []int{0}},
		{name: "nil entry", req: rq("basic", &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{nil}}), invalid: []int{0}},
		{name: "empty key", req: rq("basic", d("key1", "x"), d("key1", "x", "", "y")), invalid: []int{1}},
		{name: "empty value is fine", req: rq("basic", d("key1", ""))},
		{name: "64 descriptors", req: rq("basic", many(64)...)},
		{name: "65 descriptors", req: rq("basic", many(65)...)},
		{name: "8192 descriptors (the default bound)", req: rq("basic", many(DefaultMaxDescriptors)...)},
		{name: "no bounds: 10000 descriptors", bounds: RequestBounds{MaxDescriptors: -1, MaxRequestRules: -1}, req: rq("basic", many(10000)...)},
		{name: "32 entries", req: rq("basic", manyEntries(32))},
		{name: "33 entries", req: rq("basic", manyEntries(33), d("key1", "x")), invalid: []int{0}},
		{name: "long key", req: rq("basic", d(long, "x"), d("key1", "x")), invalid: []int{0}},
		{name: "long value", req: rq("basic", d("key1", "x"), d("key1", long)), invalid: []int{1}},
		{name: "custom bounds", bounds: RequestBounds{MaxDescriptors: 2, MaxEntries: 1, MaxEntryLen: 5},
			req: rq("basic", d("key1", "x"), d("key1", "xxxxxx")), invalid: []int{1}},
		{name: "override with UNKNOWN unit", req: rq("basic", override(d("key1", "x"), 5, typev3.RateLimitUnit_UNKNOWN, 0)), invalid: []int{0}},
		{name: "override with an unlisted unit", req: rq("basic", d("key1", "x"), override(d("key1", "x"), 5, typev3.RateLimitUnit(42), 0)), invalid: []int{1}},
		{name: "every descriptor invalid", req: rq("basic", d(long, "x"), nil), invalid: []int{0, 1}},
	}
	for _, tt := range perDescriptor {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{Bounds: tt.bounds, DynamicMetadata: true, Headers: HeaderOptions{Enabled: true, RetryAfter: true}}, basicYAML)
			resp, err := h.svc.ShouldRateLimit(context.Background(), tt.req)
			if err != nil || len(resp.GetStatuses()) != len(tt.req.Descriptors) {
				t.Fatalf("err %v, %d statuses for %d descriptors", err, len(resp.GetStatuses()), len(tt.req.Descriptors))
			}
			for i, st := range resp.Statuses {
				if slices.Contains(tt.invalid, i) {
					if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit != nil || st.LimitRemaining != 0 {
						t.Errorf("invalid descriptor %d: %v, want OVER_LIMIT with no limit", i, st)
					}
					continue
				}
				if st.Code != rlsv3.RateLimitResponse_OK {
					t.Errorf("valid descriptor %d: %v, want it decided (OK)", i, st)
				}
			}
			wantOverall := rlsv3.RateLimitResponse_OK
			if len(tt.invalid) > 0 {
				wantOverall = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			if resp.OverallCode != wantOverall {
				t.Errorf("overall %v, want %v", resp.OverallCode, wantOverall)
			}
			if n := h.mem.calls.Load(); len(tt.invalid) == len(tt.req.Descriptors) && n != 0 {
				t.Errorf("backend called %d times with no valid descriptor", n)
			}
		})
	}
}

// TestEntriesBoundCoversConfigDepth: the bound on a descriptor's entries
// (32) gives way to the configuration's deepest node, so a limit
// configured deeper than 32 levels applies as configured. Envoy Gateway
// generates one level per match of a rule (its route, each header, the
// method, the path, the source CIDR and IP, each query parameter; up to
// 128 headers and 16 query parameters a selector): a rule with 40 matches
// is a 41-level chain, and Envoy sends 41 entries. Answering them
// OVER_LIMIT as oversized would deny every request the rule selects. A
// descriptor deeper than both the bound and the configuration is still
// refused.
func TestEntriesBoundCoversConfigDepth(t *testing.T) {
	const depth = 41
	var yaml strings.Builder
	yaml.WriteString("domain: eg\ndescriptors:\n")
	var kv []string
	for i := range depth {
		indent := strings.Repeat("    ", i)
		key := fmt.Sprintf("rule-0-match-%d", i)
		fmt.Fprintf(&yaml, "%s  - key: %s\n%s    value: %s\n", indent, key, indent, key)
		if i == depth-1 {
			fmt.Fprintf(&yaml, "%s    rate_limit: {unit: minute, requests_per_unit: 2}\n", indent)
		} else {
			fmt.Fprintf(&yaml, "%s    descriptors:\n", indent)
		}
		kv = append(kv, key, key)
	}
	ds, err := descriptor.Parse("eg.yaml", []byte(yaml.String()))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptor.NewConfig(ds...)
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 1 || !strings.Contains(w[0], "domain eg accepts descriptors of up to 41 entries") {
		t.Errorf("warnings %q, want one naming the domain's bound", w)
	}
	h := newHarness(t, Options{}, basicYAML)
	h.svc.SetConfig(cfg)
	for i, want := range []string{"OK 2/MINUTE rem=1 reset=1m0s", "OK 2/MINUTE rem=0 reset=1m0s", "OVER_LIMIT 2/MINUTE rem=0 reset=1m0s"} {
		resp := h.call(t, rq("eg", d(kv...)))
		if got := statusString(resp.Statuses[0]); got != want {
			t.Fatalf("call %d with %d entries: %s, want %s", i+1, depth, got, want)
		}
	}
	deeper := d(append(kv, "one", "more")...)
	if st := h.call(t, rq("eg", deeper)).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit != nil {
		t.Errorf("%d entries, deeper than the bound and the config: %v, want OVER_LIMIT as invalid", depth+1, st)
	}
}
