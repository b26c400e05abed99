package descriptor

import (
	"strings"
	"testing"
)

func e(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// id names a matched node by its metadata id, "" for no match.
func id(n *Node) string {
	if n == nil {
		return ""
	}
	s, _ := n.Metadata["id"].(string)
	return s
}

func TestMatch(t *testing.T) {
	d := parseFile(t, "testdata/match.yaml")
	tests := []struct {
		name    string
		entries []Entry
		want    string
	}{
		// Precedence.
		{"exact wins over wildcards and default", e("k", "exact"), "k-exact"},
		{"first wildcard in file order", e("k", "extra"), "k-ex*"},
		{"second wildcard when the first does not match", e("k", "eel"), "k-e*"},
		{"suffix wildcard", e("k", "cat"), "k-*t"},
		{"earlier wildcard beats later even if both match", e("k", "ext"), "k-ex*"},
		{"default when no value matches", e("k", "zzz"), "k-default"},
		{"default for the empty value", e("k", ""), "k-default"},
		{"unknown key", e("nokey", "x"), ""},

		// Wildcards (§1.4).
		{"foo* matches foo1", e("w", "foo1"), "w-foo*"},
		{"foo* matches foo2", e("w", "foo2"), "w-foo*"},
		{"exact foo is exact, not foo*", e("w", "foo"), "w-foo"},
		{"bar*b matches barab", e("w", "barab"), "w-bar*b"},
		{"bar*b matches bar123b", e("w", "bar123b"), "w-bar*b"},
		{"bar*b matches barb", e("w", "barb"), "w-bar*b"},
		{"bar*b does not match bara", e("w", "bara"), ""},
		{"bar*b does not match xbarb", e("w", "xbarb"), ""},
		{"bar*b needs prefix and suffix apart", e("w", "bab"), ""},
		{"foo*bar*baz matches foobarbaz", e("m", "foobarbaz"), "m-foo*bar*baz"},
		{"foo*bar*baz matches with fillers", e("m", "foo1bar2baz"), "m-foo*bar*baz"},
		{"foo*bar*baz does not match foo123baz", e("m", "foo123baz"), ""},
		{"middle parts in order", e("multi", "abcd"), "multi"},
		{"middle parts spread", e("multi", "a1b2c3d"), "multi"},
		{"middle parts out of order", e("multi", "acbd"), ""},
		{"middle part repeated before the real one", e("multi", "abbbcccd"), "multi"},
		{"double star", e("double", "xy"), "double"},
		{"lone star matches anything", e("any", "whatever"), "any"},
		{"lone star matches empty", e("any", ""), "any"},

		// Depth.
		{"1-entry request on a 1-level node", e("one", "v"), "one"},
		{"2-entry request on a 1-level config", e("one", "v", "x", "y"), ""},
		{"1-entry request on a node whose limit is deeper", e("two", "v"), "two"},
		{"2-entry request reaches the limit", e("two", "v", "sub", "w"), "two.sub"},
		{"3-entry request is too deep", e("two", "v", "sub", "w", "x", "y"), ""},
		{"no entries", nil, ""},

		// No backtracking.
		{"exact level-1 child", e("nb", "x", "c", "only"), "nb-x.c-only"},
		{"exact level-1 match does not fall back to the default's children", e("nb", "x", "c", "other"), ""},
		{"default's own child", e("nb", "y", "c", "other"), "nb-default.c-other"},
		{"first wildcard keeps its children", e("nbw", "pqr", "c", "v"), "nbw-p*.c"},
		{"second wildcard's children are never reached", e("nbw", "pqr", "d", "v"), ""},

		// Keys and values are opaque.
		{"key a value b_c", e("a", "b_c"), "a-b_c"},
		{"key a_b value c", e("a_b", "c"), "a_b-c"},
		{"key a value b does not exist", e("a", "b"), ""},
		{"key a_b value b_c does not exist", e("a_b", "b_c"), ""},
		{"wildcard of key u does not match key u_v", e("u_v", "x"), "u_v-default"},
		{"wildcard of key u does not match key u_x", e("u_x", "y"), ""},
		{"key u with a value holding the other key", e("u", "v_x"), "u-*"},

		// Special bytes.
		{"value with _ { } : = newline NUL | %", e("s", "a_b{c}:d=e\nf\x00g|h%"), "s-special"},
		{"special value with one byte changed", e("s", "a_b{c}:d=e\nf\x00g|h&"), ""},
		{"braces around a wildcard", e("s", "{x}"), "s-{*}"},
		{"NUL in a key", e("k\x00ey", "v"), "nul-key"},
		{"NUL key prefix only", e("k", "\x00eyv"), "k-default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := d.Match(tt.entries)
			if got := id(n); got != tt.want {
				t.Fatalf("Match(%q) = %q, want %q", tt.entries, got, tt.want)
			}
			if n != nil && n.Depth != len(tt.entries) {
				t.Fatalf("matched node depth %d, want %d", n.Depth, len(tt.entries))
			}
		})
	}
}

// TestMatchRulesAtDepth: a node reached by a shorter request than its
// limit carries no rules; the limit belongs to the deeper node.
func TestMatchRulesAtDepth(t *testing.T) {
	d := parseFile(t, "testdata/match.yaml")
	if n := d.Match(e("two", "v")); n == nil || len(n.Rules) != 0 || n.Unlimited {
		t.Errorf("Match(two) = %+v, want a node without rules", n)
	}
	if n := d.Match(e("two", "v", "sub", "w")); n == nil || len(n.Rules) != 1 {
		t.Errorf("Match(two, sub) = %+v, want the node with one rule", n)
	}
}

func TestMatchNil(t *testing.T) {
	var d *Domain
	if n := d.Match(e("k", "v")); n != nil {
		t.Errorf("nil domain matched %v", n)
	}
	var c *Config
	if c.Domain("x") != nil || c.Domains() != nil || c.Dump() != "" {
		t.Error("nil config is not empty")
	}
}

func TestPattern(t *testing.T) {
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"*", "", true},
		{"a*", "a", true},
		{"a*", "", false},
		{"*a", "ba", true},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"a*b*a", "aba", true},
		{"a*b*a", "aab", false},
		{"ab*ba", "aba", false},
		{"a*b*ba", "aba", false}, // the middle may not overlap the suffix
		{"a*b*ba", "abba", true},
		{"*x*", "x", true},
		{"*x*y*", "yx", false},
		{"***", "q", true},
		{"a*" + strings.Repeat("b*", 5) + "c", "a" + strings.Repeat("b", 5) + "c", true},
		{"a*" + strings.Repeat("b*", 5) + "c", "a" + strings.Repeat("b", 4) + "c", false},
	}
	for _, tt := range tests {
		p := compilePattern(tt.pattern)
		if got := p.match(tt.value); got != tt.want {
			t.Errorf("%q matches %q = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
	}
}

// TestMatchDoesNotAllocate holds the hot path to zero allocations.
func TestMatchDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	d := parseFile(t, "testdata/match.yaml")
	requests := [][]Entry{
		e("k", "exact"), e("k", "eel"), e("k", "zzz"), e("m", "foo1bar2baz"),
		e("two", "v", "sub", "w"), e("nb", "x", "c", "other"), e("none", "x"),
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, r := range requests {
			d.Match(r)
		}
	})
	if allocs != 0 {
		t.Errorf("Match allocates %v times per run, want 0", allocs)
	}
}

func BenchmarkMatch(b *testing.B) {
	data := []byte(`domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: path
        value: /api/ocr
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: path
        value: /public/*/docs/*
        rate_limit: {unlimited: true}
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100}
`)
	domains, err := Parse("bench.yaml", data)
	if err != nil {
		b.Fatal(err)
	}
	d := domains[0]
	cases := []struct {
		name    string
		entries []Entry
	}{
		{"default", e("remote_address", "10.1.2.3")},
		{"exact", e("user", "alice", "path", "/api/ocr")},
		{"wildcard", e("user", "alice", "path", "/public/a/b/docs/index.html")},
		{"fallback", e("user", "alice", "path", "/private/x")},
		{"miss", e("tenant", "acme")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d.Match(c.entries) == nil && c.name != "miss" {
					b.Fatal("no match")
				}
			}
		})
	}
}

// TestMatchConcurrent: a compiled config is read-only; under -race this
// checks that Match shares it safely.
func TestMatchConcurrent(t *testing.T) {
	d := parseFile(t, "testdata/match.yaml")
	done := make(chan string)
	for range 4 {
		go func() {
			got := ""
			for range 1000 {
				got = id(d.Match(e("nb", "x", "c", "only")))
			}
			done <- got
		}()
	}
	for range 4 {
		if got := <-done; got != "nb-x.c-only" {
			t.Errorf("concurrent Match = %q", got)
		}
	}
}
