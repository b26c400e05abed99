package descriptor

import (
	"fmt"
	"slices"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// SlidingLogWarnAbove is the sliding_log limit above which Warnings speaks
// of a rule. A sliding log keeps one entry per admitted unit of cost; above
// 128 entries Redis stores it as a skiplist at about 116 bytes per entry
// (docs/operations.md, "Memory per active descriptor"), so a limit of 1000
// costs about 117 KB per active descriptor, where a sliding_window costs a
// few dozen bytes whatever its limit.
const SlidingLogWarnAbove = 1000

// MaxRequestEntries is the most entries a descriptor of a request may
// carry, unless its domain has deeper nodes (Domain.Depth): the service
// answers a longer one OVER_LIMIT on its own, without matching it (the
// migration guide's request-bounds row). A config node deeper than this
// raises its domain's bound to its depth, and Warnings says so.
const MaxRequestEntries = 32

// slidingLogEntryBytes is what one entry of a full sliding log costs Redis
// above 128 entries, measured by TestMeasureMemory.
const slidingLogEntryBytes = 116

// Warnings returns, sorted, one line per thing in c that is valid but
// likely to surprise an operator: what Load found and did not read, what
// the files say that is ignored (as the reference ignores it),
// sliding_log rules whose limit is above SlidingLogWarnAbove, with the
// memory a full log of one descriptor takes, and descriptors deeper than
// MaxRequestEntries, which raise their domain's bound on a request's
// entries. Warnings never stop a config from loading.
func (c *Config) Warnings() []string {
	if c == nil {
		return nil
	}
	out := slices.Clone(c.loadWarnings)
	for _, name := range c.names {
		out = append(out, c.domains[name].warnings...)
	}
	for _, name := range c.names {
		c.domains[name].Walk(func(n *Node) {
			if n.Depth == MaxRequestEntries+1 {
				// Once, at the first level too deep: what is below it is too.
				out = append(out, fmt.Sprintf("%s:%d: %s.%s: this descriptor is %d entries deep, more than the %d entries a request's descriptor may carry elsewhere: domain %s accepts descriptors of up to %d entries (its deepest node), each matched and counted as a shorter one is",
					n.File, n.Line, name, n.Path(), n.Depth, MaxRequestEntries, name, c.domains[name].Depth()))
			}
			for _, r := range n.Rules {
				if r.Algorithm != limit.SlidingLog || r.Limit <= SlidingLogWarnAbove {
					continue
				}
				out = append(out, fmt.Sprintf("%s:%d: %s.%s: %s keeps one entry per admitted request: up to %d per descriptor, about %s of Redis memory per active descriptor when full; sliding_window approximates it in constant space",
					n.File, n.Line, name, n.Path(), r, r.Limit, byteSize(r.Limit*slidingLogEntryBytes)))
			}
		})
	}
	slices.Sort(out)
	return out
}

// byteSize writes n bytes with a binary unit, e.g. "117 KiB".
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, units := float64(n)/unit, []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for v >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.0f %s", v, units[i])
}
