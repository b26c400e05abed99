package service

import (
	"testing"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
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

	// svc=one is now over: only svc=two's metadata is returned, and
	// overLimit names the descriptor and the rule that denied it.
	check(h.call(t, rq("md", d("svc", "one"), d("svc", "two"))).DynamicMetadata, map[string]any{
		"domain": "md",
		"descriptors": []any{
			map[string]any{"entries": []any{"svc=one"}},
			map[string]any{"entries": []any{"svc=two"}},
		},
		"metadata": map[string]any{"name": "service_2", "list": []any{1.0, "two"}, "nested": map[string]any{"a": 2.0, "c": true}},
		"overLimit": []any{map[string]any{
			"index": 0.0, "entries": []any{"svc=one"}, "descriptor": "svc_one", "rules": []any{"fw.1mi"}, "reason": "over_limit",
		}},
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

const deniedYAML = `
domain: dn
descriptors:
  - key: user
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 1}
      - {name: hourly, unit: hour, requests_per_unit: 100}
      - {unit: day, requests_per_unit: 1}
    descriptors:
      - key: path
        shadow_mode: true
        rate_limit: {name: trial, unit: minute, requests_per_unit: 0}
---
domain: down
failure_mode: deny
descriptors:
  - key: k
    rate_limits:
      - {name: a, unit: second, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 50}
`

// TestDynamicMetadataNamesDenials checks overLimit and shadowOverLimit:
// for every descriptor whose status is OVER_LIMIT (or would be but for
// shadow_mode), its index, entries, config node, the rules that denied and
// why; the incumbent's keys keep their shape beside them.
func TestDynamicMetadataNamesDenials(t *testing.T) {
	h := newHarness(t, Options{DynamicMetadata: true}, deniedYAML)
	check := func(what string, got *structpb.Struct, want map[string]any) {
		t.Helper()
		if w := stacktest.Struct(t, want); !proto.Equal(got, w) {
			gj, _ := protojson.Marshal(got)
			wj, _ := protojson.Marshal(w)
			t.Fatalf("%s: dynamic metadata\n got %s\nwant %s", what, gj, wj)
		}
	}
	// Admitted: no new keys at all.
	check("admitted", h.call(t, rq("dn", d("user", "alice"))).DynamicMetadata, map[string]any{
		"domain":      "dn",
		"descriptors": []any{map[string]any{"entries": []any{"user=alice"}}},
	})
	// The second request in the same second: burst and the unnamed daily
	// rule deny (hourly has room); the shadowed child would have denied;
	// an invalid descriptor is OVER_LIMIT without a decision; an override
	// of 0 denies with no config node.
	check("denied", h.call(t, rq("dn", d("user", "alice"), d("user", "bob", "path", "/x"), d("", "x"),
		override(d("user", "carol"), 0, typev3.RateLimitUnit_MINUTE, 0))).DynamicMetadata, map[string]any{
		"domain": "dn",
		"descriptors": []any{
			map[string]any{"entries": []any{"user=alice"}},
			map[string]any{"entries": []any{"user=bob", "path=/x"}},
			map[string]any{"entries": []any{"=x"}},
			map[string]any{"entries": []any{"user=carol"}, "limit": "requests_per_unit:0 unit:MINUTE"},
		},
		"overLimit": []any{
			map[string]any{"index": 0.0, "entries": []any{"user=alice"}, "descriptor": "user", "rules": []any{"burst", "fw.1da"}, "reason": "over_limit"},
			map[string]any{"index": 2.0, "entries": []any{"=x"}, "reason": "invalid"},
			map[string]any{"index": 3.0, "entries": []any{"user=carol"}, "override": true, "rules": []any{"fw.1mi"}, "reason": "over_limit"},
		},
		"shadowOverLimit": []any{
			map[string]any{"index": 1.0, "entries": []any{"user=bob", "path=/x"}, "descriptor": "user.path", "rules": []any{"trial"}, "reason": "over_limit"},
		},
	})

	// The backend down in a failure_mode: deny domain: every rule of the
	// descriptor is named, reason failure_mode_deny.
	down := newHarness(t, Options{DynamicMetadata: true, Backend: stacktest.FailingBackend{Err: backend.ErrUnavailable}}, deniedYAML)
	check("failure mode", down.call(t, rq("down", d("k", "v"))).DynamicMetadata, map[string]any{
		"domain":      "down",
		"descriptors": []any{map[string]any{"entries": []any{"k=v"}}},
		"overLimit": []any{
			map[string]any{"index": 0.0, "entries": []any{"k=v"}, "descriptor": "k", "rules": []any{"a", "fw.1ho"}, "reason": "failure_mode_deny"},
		},
	})
}
