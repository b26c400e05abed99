package service

import (
	"testing"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/internal/stacktest"
)

const metadataYAML = `
domain: md
descriptors:
  - key: svc
    value: one
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      name: service_1
      nested: {a: 1, b: x}
  - key: svc
    value: two
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      name: service_2
      nested: {a: 2, c: true}
      list: [1, two]
  - key: free
    rate_limit: {unlimited: true}
    metadata: {tier: free}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func TestDynamicMetadata(t *testing.T) {
	h := newHarness(t, Options{DynamicMetadata: true}, metadataYAML)
	check := func(got *structpb.Struct, want map[string]any) {
		t.Helper()
		if w := stacktest.Struct(t, want); !proto.Equal(got, w) {
			gj, _ := protojson.Marshal(got)
			wj, _ := protojson.Marshal(w)
			t.Fatalf("dynamic metadata\n got %s\nwant %s", gj, wj)
		}
	}

	// Both pass: their metadata merge, the first value winning, nested
	// structs merged.
	req := rq("md", d("svc", "one"), addend(d("svc", "two"), 1), d("free", "x"))
	req.HitsAddend = 1
	check(h.call(t, req).DynamicMetadata, map[string]any{
		"domain": "md",
		"descriptors": []any{
			map[string]any{"entries": []any{"svc=one"}},
			map[string]any{"entries": []any{"svc=two"}, "hitsAddend": 1.0},
			map[string]any{"entries": []any{"free=x"}},
		},
		"hitsAddend": 1.0,
		"metadata": map[string]any{
			"name": "service_1", "tier": "free", "list": []any{1.0, "two"},
			"nested": map[string]any{"a": 1.0, "b": "x", "c": true},
		},
	})

	// svc=one is now over: only svc=two's metadata is returned.
	check(h.call(t, rq("md", d("svc", "one"), d("svc", "two"))).DynamicMetadata, map[string]any{
		"domain": "md",
		"descriptors": []any{
			map[string]any{"entries": []any{"svc=one"}},
			map[string]any{"entries": []any{"svc=two"}},
		},
		"metadata": map[string]any{"name": "service_2", "list": []any{1.0, "two"}, "nested": map[string]any{"a": 2.0, "c": true}},
	})

	// An override is described; nothing passed with metadata, so no
	// "metadata" field.
	check(h.call(t, rq("md", override(d("plain", "1", "k", "v"), 10, typev3.RateLimitUnit_MINUTE, 5))).DynamicMetadata, map[string]any{
		"domain": "md",
		"descriptors": []any{
			map[string]any{"entries": []any{"plain=1", "k=v"}, "limit": "requests_per_unit:10 unit:MINUTE unit_multiplier:{value:5}"},
		},
	})

	// Unknown domain: still described.
	check(h.call(t, rq("nope", d("a", "b"))).DynamicMetadata, map[string]any{
		"domain":      "nope",
		"descriptors": []any{map[string]any{"entries": []any{"a=b"}}},
	})

	// The config's metadata is not modified by merging (a peek passes).
	check(h.call(t, rq("md", addend(d("svc", "two"), 0))).DynamicMetadata, map[string]any{
		"domain":      "md",
		"descriptors": []any{map[string]any{"entries": []any{"svc=two"}, "hitsAddend": 0.0}},
		"metadata":    map[string]any{"name": "service_2", "list": []any{1.0, "two"}, "nested": map[string]any{"a": 2.0, "c": true}},
	})

	off := newHarness(t, Options{}, metadataYAML)
	if md := off.call(t, rq("md", d("svc", "one"))).DynamicMetadata; md != nil {
		t.Fatalf("dynamic metadata %v while disabled", md)
	}
}
