package rlqs

import (
	"testing"
)

// resolveConfig has nested keys, a wildcard, a key-only default and two
// top-level keys, to show the order rule.
const resolveConfig = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: path
        value: /api/*
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: api
    value: orders
    descriptors:
      - key: user
        value: alice
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: zone
    value: eu
    rate_limit: {unit: hour, requests_per_unit: 100}
`

func TestResolve(t *testing.T) {
	dom := parseConfig(t, resolveConfig).Domain("d")
	cases := []struct {
		name     string
		bucket   map[string]string
		wantPath string // "" for no match
		wantKeys string // the order of the entries
	}{
		{"one key, key-only default", map[string]string{"user": "bob"}, "user", "user"},
		{"nested, the tree's order", map[string]string{"path": "/api/x", "user": "bob"}, "user.path_/api/*", "user,path"},
		// "api" sorts before "user": api=orders is placed first, then
		// user=alice below it.
		{"two top-level keys: the first in byte order that matches", map[string]string{"user": "alice", "api": "orders"}, "api_orders.user_alice", "api,user"},
		// api=other matches nothing at the top level; user does, but then
		// api has nowhere to go below user.
		{"a key left over", map[string]string{"user": "alice", "api": "other"}, "", ""},
		{"no such key", map[string]string{"nope": "x"}, "", ""},
		{"exact value", map[string]string{"zone": "eu"}, "zone_eu", "zone"},
		{"value not configured", map[string]string{"zone": "us"}, "", ""},
		{"deeper than the tree", map[string]string{"a": "1", "b": "2", "c": "3"}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node, entries := Resolve(dom, tc.bucket)
			path, keys := "", ""
			if node != nil {
				path = node.Path()
			}
			for i, e := range entries {
				if i > 0 {
					keys += ","
				}
				keys += e.Key
			}
			if path != tc.wantPath || keys != tc.wantKeys {
				t.Errorf("Resolve(%v) = %q [%s], want %q [%s]", tc.bucket, path, keys, tc.wantPath, tc.wantKeys)
			}
		})
	}
	if n, _ := Resolve(nil, map[string]string{"user": "x"}); n != nil {
		t.Errorf("Resolve on a nil domain matched %v", n.Path())
	}
}
