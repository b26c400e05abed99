package descriptor

import (
	"strconv"
	"testing"
	"time"
)

// TestLevelInsertIsLinear: one level holding as many children as the
// largest config file can (about 137,000 "- {key: k, value: vN*}" lines
// fit in MaxFileSize) is built in time linear in their count, and a
// repeated value is still found, whatever its kind. Finding a repeated
// wildcard by scanning the earlier ones made a 4 MiB file of wildcards
// take 40 s of CPU to load, at start and on every reload; with an index
// the whole level takes milliseconds, so the budget below only fails on
// quadratic work.
func TestLevelInsertIsLinear(t *testing.T) {
	const count = 140_000
	const budget = 10 * time.Second
	tests := []struct {
		name  string
		value func(i int) string
		// v10 is the node that "v10" matches: for wildcards the first in
		// file order ("v1*"), for exact values its own.
		v10 int
	}{
		{"wildcards", func(i int) string { return "v" + strconv.Itoa(i) + "*" }, 1},
		{"exact values", func(i int) string { return "v" + strconv.Itoa(i) }, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := func(i int) *Node {
				n := &Node{Key: "k", Value: tt.value(i)}
				if n.Wildcard = n.Value[len(n.Value)-1] == '*'; n.Wildcard {
					n.pattern = compilePattern(n.Value)
				}
				return n
			}
			var l level
			nodes := make([]*Node, count)
			start := time.Now()
			for i := range nodes {
				nodes[i] = node(i)
				if first := l.insert(nodes[i]); first != nil {
					t.Fatalf("value %q reported as a repeat of %q", nodes[i].Value, first.Value)
				}
				if i%1000 == 0 && time.Since(start) > budget {
					t.Fatalf("inserting %d of %d %s took more than %v: the work grows faster than their count", i, count, tt.name, budget)
				}
			}
			for _, i := range []int{0, count / 2, count - 1} {
				if first := l.insert(node(i)); first != nodes[i] {
					t.Errorf("inserting value %q again returned %v, want the node inserted first", nodes[i].Value, first)
				}
			}
			if len(l.nodes) != count {
				t.Errorf("level holds %d nodes, want %d: a repeat was added", len(l.nodes), count)
			}
			if got := l.match(&Entry{Key: "k", Value: "v10"}); got != nodes[tt.v10] {
				t.Errorf("v10 matched %v, want %q", got, nodes[tt.v10].Value)
			}
		})
	}
}
