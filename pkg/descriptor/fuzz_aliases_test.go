package descriptor

import (
	"fmt"
	"strings"
	"testing"
)

// aliasDoc builds a config whose metadata (shape 0), merge keys (shape 1)
// or descriptor lists (shape 2) hold a chain of anchors, each level using
// the one before fanout times, after padding plain scalars. It returns the
// config and how many nodes its aliases add when expanded.
func aliasDoc(levels, fanout, padding, shape int) (string, int) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: a\n    metadata:\n")
	if padding > 0 {
		b.WriteString("      pad: [x" + strings.Repeat(",x", padding-1) + "]\n")
	}
	uses := func(i int) string {
		return strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), fanout), ", ")
	}
	var size int // nodes in the level before, expanded
	added := 0
	switch shape % 3 {
	case 0: // lists of aliases to lists
		b.WriteString("      l0: &l0 [" + strings.TrimSuffix(strings.Repeat("x, ", fanout), ", ") + "]\n")
		size = 1 + fanout
		for i := 1; i < levels; i++ {
			fmt.Fprintf(&b, "      l%d: &l%d [%s]\n", i, i, uses(i))
			added += fanout * size
			size = 1 + fanout*(1+size)
		}
	case 1: // maps merging lists of aliases to maps
		b.WriteString("      l0: &l0 {k: v}\n")
		size = 3
		for i := 1; i < levels; i++ {
			fmt.Fprintf(&b, "      l%d: &l%d {k%d: v, <<: [%s]}\n", i, i, i, uses(i))
			added += fanout * size
			size = 5 + 1 + fanout*(1+size) // key, value, merge key, the list and its aliases
		}
	case 2: // descriptor lists aliased into descriptors
		b.WriteString("    descriptors: &l0 [{key: k}]\n")
		size = 1 + 3
		for i := 1; i < levels; i++ {
			fmt.Fprintf(&b, "  - key: b%d\n    descriptors: &l%d [{key: c, descriptors: [%s]}]\n", i, i, uses(i))
			added += fanout * size
			size = 1 + 1 + 2 + 2 + 1 + fanout*(1+size)
		}
	}
	return b.String(), added
}

// FuzzAliases builds configs with anchors and aliases in every place a
// config can hold them (metadata lists, merge keys, descriptor lists), of
// any depth and fan-out, padded or not. Parse must never panic, must
// refuse exactly the documents whose aliases add more than
// MaxAliasExpansion nodes, and must load every other one as far as
// aliases are concerned.
func FuzzAliases(f *testing.F) {
	f.Add(uint8(10), uint8(10), uint16(0), uint8(0))
	f.Add(uint8(6), uint8(10), uint16(5000), uint8(0))
	f.Add(uint8(5), uint8(9), uint16(100), uint8(1))
	f.Add(uint8(4), uint8(4), uint16(0), uint8(2))
	f.Add(uint8(1), uint8(1), uint16(0), uint8(0))
	f.Fuzz(func(t *testing.T, levels, fanout uint8, padding uint16, shape uint8) {
		l, n, pad := 1+int(levels)%9, 1+int(fanout)%12, int(padding)%6000
		doc, added := aliasDoc(l, n, pad, int(shape))
		if added > 50*MaxAliasExpansion && pad > 0 {
			pad = 0 // keep each run small: padding does not change the answer
			doc, added = aliasDoc(l, n, pad, int(shape))
		}
		_, err := Parse("a.yaml", []byte(doc))
		refused := err != nil && strings.Contains(err.Error(), "aliases expand this document")
		if refused != (added > MaxAliasExpansion) {
			t.Fatalf("levels %d fanout %d padding %d shape %d: aliases add %d nodes; refused %v (err %v)", l, n, pad, shape%3, added, refused, err)
		}
	})
}
