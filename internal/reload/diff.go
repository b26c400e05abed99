package reload

import (
	"reflect"
	"strings"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// Change says which domains a reload added, removed and changed. Each list
// is sorted.
type Change struct {
	Added, Removed, Changed []string
}

// Diff compares two configurations domain by domain. A nil configuration
// has no domains.
func Diff(old, cur *descriptor.Config) Change {
	var c Change
	oldNames, curNames := domainNames(old), domainNames(cur)
	inOld := make(map[string]bool, len(oldNames))
	for _, n := range oldNames {
		inOld[n] = true
	}
	inCur := make(map[string]bool, len(curNames))
	for _, n := range curNames {
		inCur[n] = true
		switch {
		case !inOld[n]:
			c.Added = append(c.Added, n)
		case !sameDomain(old.Domain(n), cur.Domain(n)):
			c.Changed = append(c.Changed, n)
		}
	}
	for _, n := range oldNames {
		if !inCur[n] {
			c.Removed = append(c.Removed, n)
		}
	}
	return c
}

// String describes the change in one short phrase, e.g.
// "added [a]; changed [b, c]" or "no domain changed".
func (c Change) String() string {
	var parts []string
	add := func(verb string, names []string) {
		if len(names) > 0 {
			parts = append(parts, verb+" ["+strings.Join(names, ", ")+"]")
		}
	}
	add("added", c.Added)
	add("removed", c.Removed)
	add("changed", c.Changed)
	if len(parts) == 0 {
		return "no domain changed"
	}
	return strings.Join(parts, "; ")
}

func domainNames(c *descriptor.Config) []string {
	if c == nil {
		return nil
	}
	return c.Domains()
}

// sameDomain reports whether two compiled domains mean the same: the same
// failure mode and the same nodes, in the same order, with the same rules
// and options. Source positions are ignored, so a file that only gained a
// comment does not count as changed.
func sameDomain(a, b *descriptor.Domain) bool {
	if a.FailureMode != b.FailureMode {
		return false
	}
	return reflect.DeepEqual(nodeSigs(a), nodeSigs(b))
}

// nodeSig is what a node means, without where it was written.
type nodeSig struct {
	Path, Key, Value string
	Rules            []string
	Unlimited        bool
	Replaces         []string
	Flags            [5]bool
	ChargeOverLimit  *bool
	Metadata         map[string]any
}

func nodeSigs(d *descriptor.Domain) []nodeSig {
	var sigs []nodeSig
	d.Walk(func(n *descriptor.Node) {
		s := nodeSig{
			Path: n.Path(), Key: n.Key, Value: n.Value,
			Unlimited: n.Unlimited, Replaces: n.Replaces,
			Flags:    [5]bool{n.ShadowMode, n.QuotaMode, n.DetailedMetric, n.ValueToMetric, n.ShareThreshold},
			Metadata: n.Metadata, ChargeOverLimit: n.ChargeOverLimit,
		}
		for _, r := range n.Rules {
			// String names every field of a Rule, the time zone by name.
			s.Rules = append(s.Rules, r.String())
		}
		sigs = append(sigs, s)
	})
	return sigs
}
