package admin

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// maxCachedNames bounds each of nameCache's maps. Configured rules are
// few; a request's `limit` override can name any unit, so past the bound
// a name is built each time instead of kept.
const maxCachedNames = 256

// nameCache gives the names under which the heavy hitters count rules,
// built once and then found without a lock or an allocation: a rule's
// name, else its id (limit.Rule.ID, which formats a new string each call),
// and rule sets' names joined by "+".
type nameCache struct {
	ids  atomic.Pointer[map[idKey]string]
	sets atomic.Pointer[map[string]string]
	mu   sync.Mutex // held to replace either map
}

// idKey is what a rule's id is made of (limit.Rule.ID), and whether the
// rule came from a request's override.
type idKey struct {
	alg      limit.Algorithm
	unit     limit.Unit
	mult     uint32
	loc      *time.Location
	override bool
}

// name names r for people: its name, else its id (an override rule is
// named "override <id>").
func (n *nameCache) name(r limit.Rule, override bool) string {
	if r.Name != "" {
		return r.Name
	}
	k := idKey{alg: r.Algorithm, unit: r.Unit, mult: max(r.Multiplier, 1), loc: r.Location, override: override}
	if m := n.ids.Load(); m != nil {
		if s, ok := (*m)[k]; ok {
			return s
		}
	}
	s := ruleName(r.Name, r.ID(), override)
	n.mu.Lock()
	defer n.mu.Unlock()
	if m := n.ids.Load(); m == nil || len(*m) < maxCachedNames {
		n.ids.Store(with(m, k, s))
	}
	return s
}

// set names the rules decided together: their names joined by "+". A
// set's name is gathered on the stack and looked up, so that a known set
// allocates nothing.
func (n *nameCache) set(rules []limit.Rule, override bool) string {
	if len(rules) == 1 {
		return n.name(rules[0], override)
	}
	var buf [256]byte
	b := buf[:0]
	for i, r := range rules {
		if i > 0 {
			b = append(b, '+')
		}
		b = append(b, n.name(r, override)...)
	}
	if m := n.sets.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
	}
	s := string(b)
	n.mu.Lock()
	defer n.mu.Unlock()
	if m := n.sets.Load(); m == nil || len(*m) < maxCachedNames {
		n.sets.Store(with(m, s, s))
	}
	return s
}

// with returns a copy of *m (nil: empty) with k set to v.
func with[K comparable](m *map[K]string, k K, v string) *map[K]string {
	next := map[K]string{k: v}
	if m != nil {
		for k2, v2 := range *m {
			next[k2] = v2
		}
	}
	return &next
}
