package descriptor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file holds the YAML plumbing: typed reads of yaml.Node values that
// report every mistake with its line, merge keys, aliases, and the guard
// against alias bombs and cycles. The config schema itself is in yamlread.go
// and yamlrules.go.

// parser collects the errors and warnings of one file.
type parser struct {
	file string
	errs ErrorList
	// warns are what the file says that the reference ignores, and so
	// sluice too (with Strict, they are errors instead).
	warns  ErrorList
	strict bool
}

// ignoredf records something the reference ignores, or reads otherwise
// than sluice: a warning, or an error in strict mode.
func (p *parser) ignoredf(n *yaml.Node, format string, args ...any) {
	e := &Error{File: p.file, Line: n.Line, Reason: fmt.Sprintf(format, args...)}
	if p.strict {
		p.errs = append(p.errs, e)
		return
	}
	p.warns = append(p.warns, e)
}

// errorf records an error at n's line (0 when n is nil).
func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Reason: fmt.Sprintf(format, args...)})
}

// field is one key of a YAML mapping, with its value resolved.
type field struct {
	name string
	key  *yaml.Node
	val  *yaml.Node
}

// maxMergeDepth bounds merge keys that pull in maps that merge others.
const maxMergeDepth = 32

// resolve follows aliases to the node they name. checkAliases has already
// rejected dangling aliases and cycles.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is a YAML null (`~`, `null` or nothing). A key
// whose value is null counts as absent, as the reference's decoder treats it.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what n is, for error messages: "a list", "a map", "an
// integer (5)", ...
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		q := strconv.Quote(v)
		switch n.ShortTag() {
		case "!!str":
			return "the string " + q
		case "!!int":
			return "the integer " + v
		case "!!float":
			return "the float " + v
		case "!!bool":
			return "the boolean " + v
		case "!!null":
			return "null"
		default:
			return n.ShortTag() + " " + q
		}
	}
	return "nothing"
}

// mapping returns the keys of the map n (what names it in errors), with
// merge keys (`<<: *anchor`) applied: keys written in n win over merged
// ones, and earlier merged maps win over later ones. Non-string keys are
// errors. A key written twice takes its last value, as the reference's
// decoder does, with a warning. ok is false when n is not a map.
func (p *parser) mapping(n *yaml.Node, what string) (fields []field, ok bool) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a map, got %s", what, describe(n))
		return nil, false
	}
	return p.fields(n, 0), true
}

func (p *parser) fields(n *yaml.Node, depth int) []field {
	var out []field
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.errorf(k, "non-string key: %s", describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.ignoredf(k, "duplicate key '%s' (first at line %d): the last one is used, as the reference does", k.Value, first.Line)
			for j := range out {
				if out[j].name == k.Value {
					out[j].key, out[j].val = k, v
				}
			}
			seen[k.Value] = k
			continue
		}
		seen[k.Value] = k
		out = append(out, field{name: k.Value, key: k, val: v})
	}
	for _, m := range merges {
		var srcs []*yaml.Node
		switch m.Kind {
		case yaml.MappingNode:
			srcs = []*yaml.Node{m}
		case yaml.SequenceNode:
			for _, s := range m.Content {
				s = resolve(s)
				if s.Kind != yaml.MappingNode {
					p.errorf(s, "merge key '<<' takes a map or a list of maps, got a list holding %s", describe(s))
					continue
				}
				srcs = append(srcs, s)
			}
		default:
			p.errorf(m, "merge key '<<' takes a map or a list of maps, got %s", describe(m))
		}
		if depth >= maxMergeDepth && len(srcs) > 0 {
			p.errorf(m, "merge keys nested more than %d deep", maxMergeDepth)
			continue
		}
		for _, s := range srcs {
			for _, f := range p.fields(s, depth+1) {
				if _, dup := seen[f.name]; !dup {
					seen[f.name] = f.key
					out = append(out, f)
				}
			}
		}
	}
	return out
}

// referenceKeys are the keys the reference accepts anywhere in a file: it
// checks every key against this one list, then ignores those its decoder
// does not expect where they are written.
var referenceKeys = keySet("domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric",
	"share_threshold", "metadata")

// list reads the list n, which messages call name, with item reading each
// element; an element item returns false for is left out.
func list[T any](p *parser, n *yaml.Node, name string, item func(*yaml.Node) (T, bool)) []T {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list, got %s", name, describe(n))
		return nil
	}
	var out []T
	for _, e := range n.Content {
		if v, ok := item(e); ok {
			out = append(out, v)
		}
	}
	return out
}

// known returns the fields of a map whose keys are in keys, reporting the
// others (the map is what, as messages name it) and leaving out those set
// to null, which count as absent.
func (p *parser) known(fields []field, keys map[string]bool, what string) []field {
	out := make([]field, 0, len(fields))
	for _, f := range fields {
		switch {
		case !keys[f.name]:
			p.unknown(f, what)
		case !isNull(f.val):
			out = append(out, f)
		}
	}
	return out
}

// unknown records a key that means nothing in the map it is written in
// (what: "the domain root", "a descriptor", ...). A key the reference
// knows is ignored with a warning, as the reference ignores it; any other
// is an error.
func (p *parser) unknown(f field, what string) {
	if !referenceKeys[f.name] {
		p.errorf(f.key, "unknown key '%s'", f.name)
		return
	}
	belongs := ""
	switch {
	case descriptorKeys[f.name]:
		belongs = "; it belongs on a descriptor"
	case ruleKeys[f.name]:
		belongs = "; it belongs in a rate_limit"
	case rootKeys[f.name]:
		belongs = "; it belongs at the domain root"
	}
	p.ignoredf(f.key, "key '%s' means nothing in %s and is ignored, as the reference ignores it%s", f.name, what, belongs)
}

// str reads a string. Like the reference's decoder, any scalar is taken as
// its text (`value: 200` is "200"), and null is "".
func (p *parser) str(n *yaml.Node, name string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, "%s must be a string, got %s", name, describe(n))
		return "", false
	}
	if n.ShortTag() == "!!null" {
		return "", true
	}
	return n.Value, true
}

// yaml11Bools are the plain words YAML 1.1 (and so the reference's
// yaml.v2 decoder) reads as booleans, beyond true and false.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// boolean reads true or false (and, unquoted, the YAML 1.1 words yes, no,
// on, off, y, n that the reference accepts). Null is false.
func (p *parser) boolean(n *yaml.Node, name string) (bool, bool) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!null":
			return false, true
		case "!!bool":
			switch strings.ToLower(n.Value) {
			case "true":
				return true, true
			case "false":
				return false, true
			}
		case "!!str":
			if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
				if b, ok := yaml11Bools[n.Value]; ok {
					return b, true
				}
			}
		}
	}
	p.errorf(n, "%s must be true or false, got %s", name, describe(n))
	return false, false
}

// integer reads a whole number in [lo, hi]. Strings and floats are errors
// even when they spell an integer ("5", 5.0).
func (p *parser) integer(n *yaml.Node, name string, lo, hi uint64) (uint64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.errorf(n, "%s must be an integer, got %s", name, describe(n))
		return 0, false
	}
	var u uint64
	if err := n.Decode(&u); err != nil {
		if strings.HasPrefix(strings.TrimSpace(n.Value), "-") {
			p.errorf(n, "%s must not be negative, got %s", name, n.Value)
		} else {
			p.errorf(n, "%s %s is out of range (at most %d)", name, n.Value, hi)
		}
		return 0, false
	}
	if u < lo || u > hi {
		p.errorf(n, "%s %d is out of range (want %d to %d)", name, u, lo, hi)
		return 0, false
	}
	return u, true
}

// MaxAliasExpansion is how many nodes aliases may add to a document, all
// uses counted: an alias to an anchored map of 5 nodes used 10 times adds
// 50. Real configs use aliases to share a few rule or metadata maps and add
// a few hundred; an "alias bomb" (a list of aliases to lists of aliases...)
// adds billions from a few hundred bytes. The bound does not depend on the
// document's own size, so padding a bomb with plain nodes does not get it
// past.
const MaxAliasExpansion = 1 << 16

// expansionCap is where sizes stop counting: far above any bound, far
// below overflow.
const expansionCap = 1 << 50

// checkAliases rejects documents with dangling aliases, aliases that
// contain themselves, or aliases that add more than MaxAliasExpansion
// nodes. Everything after it may follow aliases freely: its work is
// bounded by the document's size plus MaxAliasExpansion.
func (p *parser) checkAliases(root *yaml.Node) bool {
	const inProgress = -1
	sizes := make(map[*yaml.Node]int)
	ok := true
	var size func(n *yaml.Node) int
	size = func(n *yaml.Node) int {
		if s, seen := sizes[n]; seen {
			if s == inProgress {
				return 0 // reported by the alias that closed the cycle
			}
			return s
		}
		sizes[n] = inProgress
		s := 1
		if n.Kind == yaml.AliasNode {
			switch {
			case n.Alias == nil:
				p.errorf(n, "alias '%s' names no anchor", n.Value)
				ok = false
			case sizes[n.Alias] == inProgress:
				p.errorf(n, "alias '%s' contains itself", n.Value)
				ok = false
			default:
				s += size(n.Alias)
			}
		}
		for _, c := range n.Content {
			s = min(s+size(c), expansionCap)
		}
		sizes[n] = s
		return s
	}
	total := size(root)
	if added := total - len(sizes); ok && added > MaxAliasExpansion {
		p.errorf(root, "aliases expand this document by more than %d nodes (an alias bomb?): write the repeated parts out, or anchor less", MaxAliasExpansion)
		ok = false
	}
	return ok
}

// pos returns the Pos of n in the file.
func (p *parser) pos(n *yaml.Node) Pos {
	return Pos{Source: p.file, Line: n.Line}
}

// compactErrors drops repeated errors of a sorted list (an anchored map
// used through several aliases reports its errors once).
func compactErrors(l ErrorList) ErrorList {
	return slices.CompactFunc(l, func(a, b *Error) bool { return *a == *b })
}
