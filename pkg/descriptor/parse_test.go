package descriptor

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// parseFile parses a fixture that must be valid and returns its one domain.
func parseFile(t *testing.T, path string) *Domain {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	domains, err := Parse(path, data)
	if err != nil {
		t.Fatalf("Parse(%s):\n%v", path, err)
	}
	if len(domains) != 1 {
		t.Fatalf("Parse(%s) = %d domains, want 1", path, len(domains))
	}
	return domains[0]
}

// nodes indexes a domain's nodes by Path.
func nodes(t *testing.T, d *Domain) map[string]*Node {
	t.Helper()
	m := make(map[string]*Node)
	d.Walk(func(n *Node) {
		if m[n.Path()] != nil {
			t.Fatalf("two nodes with path %q", n.Path())
		}
		m[n.Path()] = n
	})
	return m
}

// checkNodes checks that ns holds exactly one node per test, at the path
// want gives with the rules it gives, and runs more on each node found.
func checkNodes[T any](t *testing.T, ns map[string]*Node, tests []T, want func(T) (string, []rule), more func(*Node, T)) {
	t.Helper()
	if len(ns) != len(tests) {
		t.Errorf("%d nodes, want %d", len(ns), len(tests))
	}
	for _, tt := range tests {
		path, rules := want(tt)
		n := ns[path]
		if n == nil {
			t.Errorf("no node %q", path)
			continue
		}
		if got := rulesOf(n); !reflect.DeepEqual(got, rules) {
			t.Errorf("%s rules = %+v, want %+v", path, got, rules)
		}
		more(n, tt)
	}
}

// rule is limit.Rule with the time zone by name, so rules compare with ==.
type rule struct {
	Name       string
	Algorithm  limit.Algorithm
	Unit       limit.Unit
	Multiplier uint32
	Limit      uint64
	Burst      uint64
	Zone       string
}

func rulesOf(n *Node) []rule {
	var out []rule
	for _, r := range n.Rules {
		z := ""
		if r.Location != nil {
			z = r.Location.String()
		}
		out = append(out, rule{r.Name, r.Algorithm, r.Unit, r.Multiplier, r.Limit, r.Burst, z})
	}
	return out
}

func TestParseDesignExample(t *testing.T) {
	d := parseFile(t, "testdata/design.yaml")
	if d.Name != "api" || d.FailureMode != FailureError || d.File != "testdata/design.yaml" {
		t.Errorf("domain = %q %v %q", d.Name, d.FailureMode, d.File)
	}
	ns := nodes(t, d)
	type nodeTest struct {
		path      string
		depth     int
		rules     []rule
		unlimited bool
		wildcard  bool
		line      int
	}
	tests := []nodeTest{
		{"remote_address", 1, []rule{{Unit: limit.Second, Limit: 20}}, false, false, 4},
		{"user", 1, []rule{
			{Name: "burst", Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 10, Burst: 30},
			{Name: "hourly", Algorithm: limit.SlidingWindow, Unit: limit.Hour, Limit: 1000},
			{Name: "daily", Algorithm: limit.FixedWindow, Unit: limit.Day, Limit: 10000, Zone: "Asia/Shanghai"},
		}, false, false, 6},
		{"user.path_/api/ocr", 2, []rule{{Unit: limit.Minute, Multiplier: 5, Limit: 3}}, false, false, 12},
		{"user.path_/public/*", 2, nil, true, true, 16},
	}
	checkNodes(t, ns, tests, func(tt nodeTest) (string, []rule) { return tt.path, tt.rules }, func(n *Node, tt nodeTest) {
		if n.Depth != tt.depth || n.Unlimited != tt.unlimited || n.Wildcard != tt.wildcard || n.Line != tt.line || n.File != d.File {
			t.Errorf("%s: depth %d unlimited %v wildcard %v at %s:%d, want %d %v %v line %d",
				tt.path, n.Depth, n.Unlimited, n.Wildcard, n.File, n.Line, tt.depth, tt.unlimited, tt.wildcard, tt.line)
		}
	})
	if p := ns["user.path_/api/ocr"].Parent; p != ns["user"] {
		t.Errorf("parent of user.path_/api/ocr = %v, want the user node", p)
	}
}

func TestParseReferenceFormat(t *testing.T) {
	d := parseFile(t, "testdata/reference.yaml")
	ns := nodes(t, d)
	type flags struct{ shadow, quota, detailed, valueToMetric, share, wildcard, unlimited bool }
	type nodeTest struct {
		path     string
		rules    []rule
		flags    flags
		replaces []string
	}
	tests := []nodeTest{
		{"remote_address", []rule{{Unit: limit.Second, Limit: 10}}, flags{}, nil},
		{"remote_address_50.0.0.5", []rule{{Unit: limit.Second, Limit: 0}}, flags{}, nil},
		{"source_cluster_proxy", nil, flags{}, nil},
		{"source_cluster_proxy.destination_cluster_bar", []rule{{Name: "bar_limit", Unit: limit.Minute, Limit: 10}}, flags{}, nil},
		{"source_cluster_proxy.destination_cluster_override", []rule{{Unit: limit.Minute, Limit: 20}}, flags{}, []string{"bar_limit", "banned_limit"}},
		{"files_files/*", []rule{{Unit: limit.Hour, Limit: 10}}, flags{share: true, wildcard: true}, nil},
		{"wild_foo*", []rule{{Unit: limit.Minute, Limit: 20}}, flags{detailed: true, wildcard: true}, nil},
		{"wild_bar*b", []rule{{Unit: limit.Minute, Limit: 30}}, flags{valueToMetric: true, wildcard: true}, nil},
		{"wild_foo*bar*baz", []rule{{Unit: limit.Minute, Limit: 40}}, flags{wildcard: true}, nil},
		{"shady", []rule{{Unit: limit.Minute, Limit: 3}}, flags{shadow: true}, nil},
		{"service_service_1", []rule{{Unit: limit.Minute, Limit: 1}}, flags{quota: true}, nil},
		{"internal", nil, flags{unlimited: true}, []string{"bar_limit"}},
		{"healthcheck", nil, flags{}, nil},
		{"tenant_acme", []rule{{Unit: limit.Day, Limit: 100000}}, flags{}, nil},
		{"status_200", nil, flags{}, nil},
		{"month_month_unit", []rule{{Unit: limit.Month, Limit: 5}}, flags{}, nil},
		{"year", []rule{{Unit: limit.Year, Limit: 4294967295}}, flags{}, nil},
		{"week", []rule{{Unit: limit.Week, Limit: 0}}, flags{}, nil},
	}
	checkNodes(t, ns, tests, func(tt nodeTest) (string, []rule) { return tt.path, tt.rules }, func(n *Node, tt nodeTest) {
		got := flags{n.ShadowMode, n.QuotaMode, n.DetailedMetric, n.ValueToMetric, n.ShareThreshold, n.Wildcard, n.Unlimited}
		if got != tt.flags {
			t.Errorf("%s flags = %+v, want %+v", tt.path, got, tt.flags)
		}
		if !reflect.DeepEqual(n.Replaces, tt.replaces) {
			t.Errorf("%s replaces = %q, want %q", tt.path, n.Replaces, tt.replaces)
		}
	})
	wantMeta := map[string]any{
		"name":    "acme",
		"tier":    int64(3),
		"weight":  0.5,
		"paying":  true,
		"nothing": nil,
		"tags":    []any{"a", int64(1), false},
		"limits":  map[string]any{"daily": int64(100000), "nested": map[string]any{"deep": "x"}},
		"big":     uint64(18446744073709551615),
	}
	if got := ns["tenant_acme"].Metadata; !reflect.DeepEqual(got, wantMeta) {
		t.Errorf("metadata = %#v, want %#v", got, wantMeta)
	}
}

func TestParseExtensions(t *testing.T) {
	d := parseFile(t, "testdata/extensions.yaml")
	if d.FailureMode != FailureLocal {
		t.Errorf("failure mode = %v, want local", d.FailureMode)
	}
	ns := nodes(t, d)
	want := map[string][]rule{
		"user": {
			{Name: "burst", Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 10, Burst: 30},
			{Name: "lb", Algorithm: limit.LeakyBucket, Unit: limit.Minute, Limit: 100, Burst: 5},
			{Name: "gcra", Algorithm: limit.GCRA, Unit: limit.Hour, Limit: 1000},
			{Name: "log", Algorithm: limit.SlidingLog, Unit: limit.Minute, Multiplier: 10, Limit: 50},
			{Name: "day", Unit: limit.Day, Limit: 10000, Zone: "America/New_York"},
		},
		"anchors": {
			{Unit: limit.Minute, Limit: 60},
			{Unit: limit.Hour, Limit: 60}, // merge key, with unit overridden
		},
	}
	for path, rules := range want {
		if got := rulesOf(ns[path]); !reflect.DeepEqual(got, rules) {
			t.Errorf("%s rules = %+v, want %+v", path, got, rules)
		}
	}
}

// TestParseStream: as the reference, only a stream's first document is
// read (sluice used to read them all: more limits than the reference
// enforces); each later one is named in a warning.
func TestParseStream(t *testing.T) {
	data := "---\ndomain: a\n---\ndomain: b\ndescriptors: [{key: k}]\n---\n"
	domains, err := Parse("s.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(domains) != 1 || domains[0].Name != "a" || domains[0].line != 2 {
		t.Fatalf("domains = %v, want only a at line 2", domains)
	}
	c, err := NewConfig(domains...)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"s.yaml:4: a second YAML document starts here: the reference reads only a file's first document, so sluice ignores this one and every later one (put each domain in its own file)"}
	if got := c.Warnings(); !reflect.DeepEqual(got, want) {
		t.Errorf("warnings = %q, want %q", got, want)
	}
}

// TestParsePartial: a file with errors still yields the domains it could
// build, so Load can report cross-file conflicts in the same pass.
func TestParsePartial(t *testing.T) {
	domains, err := Parse("p.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    bogus: 1\n"))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 || list[0].Line != 4 {
		t.Fatalf("err = %v, want one error at line 4", err)
	}
	if len(domains) != 1 || domains[0].Name != "d" {
		t.Fatalf("domains = %v, want d", domains)
	}
}

// aliasBomb returns a config whose metadata holds a levels-deep chain of
// lists, each holding fanout aliases to the one before, padded with
// padding plain scalars.
func aliasBomb(levels, fanout, padding int) string {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - key: a\n    metadata:\n")
	if padding > 0 {
		b.WriteString("      pad: [x")
		b.WriteString(strings.Repeat(",x", padding-1))
		b.WriteString("]\n")
	}
	b.WriteString("      l0: &l0 [x" + strings.Repeat(", x", fanout-1) + "]\n")
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [*l%d%s]\n", i, i, i-1, strings.Repeat(fmt.Sprintf(", *l%d", i-1), fanout-1))
	}
	return b.String()
}

// TestAliasBomb: a few hundred bytes that expand to billions of nodes are
// refused quickly instead of being walked.
func TestAliasBomb(t *testing.T) {
	_, err := Parse("bomb.yaml", []byte(aliasBomb(10, 10, 0)))
	checkErrors(t, "bomb.yaml", err, []want{{line: 1, reason: "aliases expand this document by more than 65536 nodes"}})
}

// TestPaddedAliasBomb is the regression test for a bomb padded with plain
// scalars: the guard compared the expansion with 10 times the document's
// own size, so padding got a bomb past it, and walking its metadata ended
// the process (validate, or a server on reload) with "out of memory". Here
// a 6-level bomb (over a million nodes) padded with 200,000 scalars must be
// refused, using a bounded amount of memory.
func TestPaddedAliasBomb(t *testing.T) {
	data := []byte(aliasBomb(6, 10, 200_000))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Parse("bomb.yaml", data)
	runtime.ReadMemStats(&after)
	checkErrors(t, "bomb.yaml", err, []want{{line: 1, reason: "aliases expand this document by more than 65536 nodes"}})
	// Decoding 200,000 nodes takes about 50 MB; expanding the bomb would
	// take hundreds more.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 100<<20 {
		t.Errorf("Parse allocated %d MB, want under 100", alloc>>20)
	}
}

// TestAliasesWithinBound: aliases used as configs use them (shared rule
// and metadata maps) load, up to MaxAliasExpansion nodes added.
func TestAliasesWithinBound(t *testing.T) {
	// 4 levels of 10: the last list expands to 10,000 nodes, the whole
	// chain to about 11,110, under the bound.
	domains, err := Parse("ok.yaml", []byte(aliasBomb(4, 10, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if l3, _ := domains[0].Match([]Entry{{Key: "a", Value: "v"}}).Metadata["l3"].([]any); len(l3) != 10 {
		t.Errorf("l3 has %d items, want 10", len(l3))
	}
}
