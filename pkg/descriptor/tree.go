package descriptor

import "strings"

// level holds the children of one node (or a domain's top level), compiled
// for Match: per key, the exact values, the wildcard patterns in file order
// and the key-only default.
type level struct {
	// nodes are the children in file order, for Walk.
	nodes []*Node
	// byKey groups the children by key. Nil when the level is empty.
	byKey map[string]*keyNodes
}

// keyNodes are the children of one level that share a key.
type keyNodes struct {
	// exact maps a literal value to its node.
	exact map[string]*Node
	// wildcards are the nodes whose value holds '*', in file order: the
	// first whose pattern matches wins.
	wildcards []*Node
	// wildcardValues maps each wildcard value to its node, so insert finds
	// a repeated pattern without scanning every earlier one.
	wildcardValues map[string]*Node
	// fallback is the key-only node (no value), used when no value matched.
	fallback *Node
}

// match returns the child matching e by the reference's precedence: exact
// value, then the first matching wildcard, then the key-only default.
func (l *level) match(e *Entry) *Node {
	k := l.byKey[e.Key]
	if k == nil {
		return nil
	}
	if n := k.exact[e.Value]; n != nil {
		return n
	}
	for _, n := range k.wildcards {
		if n.pattern.match(e.Value) {
			return n
		}
	}
	return k.fallback
}

// insert adds n (its Key, Value, Wildcard and pattern already set) to l.
// When l already holds a node with the same key and value, insert leaves l
// unchanged and returns that node.
func (l *level) insert(n *Node) (existing *Node) {
	if l.byKey == nil {
		l.byKey = make(map[string]*keyNodes)
	}
	k := l.byKey[n.Key]
	if k == nil {
		k = &keyNodes{}
		l.byKey[n.Key] = k
	}
	switch {
	case n.Value == "":
		if k.fallback != nil {
			return k.fallback
		}
		k.fallback = n
	case n.Wildcard:
		if w := k.wildcardValues[n.Value]; w != nil {
			return w
		}
		if k.wildcardValues == nil {
			k.wildcardValues = make(map[string]*Node)
		}
		k.wildcardValues[n.Value] = n
		k.wildcards = append(k.wildcards, n)
	default:
		if x := k.exact[n.Value]; x != nil {
			return x
		}
		if k.exact == nil {
			k.exact = make(map[string]*Node)
		}
		k.exact[n.Value] = n
	}
	l.nodes = append(l.nodes, n)
	return nil
}

// walk calls fn for every node under l, depth first, in file order.
func (l *level) walk(fn func(*Node)) {
	for _, n := range l.nodes {
		fn(n)
		n.children.walk(fn)
	}
}

// pattern is a wildcard value split on '*' once, at load time. '*' matches
// any run of bytes, the empty one included.
type pattern struct {
	prefix, suffix string
	// middle are the non-empty parts between the first and last '*', which
	// must appear in this order, without overlapping.
	middle []string
}

// compilePattern splits v, which holds at least one '*'.
func compilePattern(v string) pattern {
	parts := strings.Split(v, "*")
	p := pattern{prefix: parts[0], suffix: parts[len(parts)-1]}
	for _, m := range parts[1 : len(parts)-1] {
		if m != "" {
			p.middle = append(p.middle, m)
		}
	}
	return p
}

// match reports whether s matches the pattern. Taking each middle part at
// its leftmost occurrence is exact: it leaves the most room for the rest.
func (p *pattern) match(s string) bool {
	if len(s) < len(p.prefix)+len(p.suffix) ||
		!strings.HasPrefix(s, p.prefix) || !strings.HasSuffix(s, p.suffix) {
		return false
	}
	s = s[len(p.prefix) : len(s)-len(p.suffix)]
	for _, m := range p.middle {
		i := strings.Index(s, m)
		if i < 0 {
			return false
		}
		s = s[i+len(m):]
	}
	return true
}
