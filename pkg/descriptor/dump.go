package descriptor

import (
	"slices"
	"strconv"
	"strings"
)

// Dump returns the config as text for the /rlconfig page: one line per
// node that has rules or is unlimited, sorted,
//
//	<domain>.<path>: <rule>; <rule>..., shadow_mode: <bool>, quota_mode: <bool>, charge_over_limit: <charge>
//
// where each rule is limit.Rule.String(), an unlimited node shows
// "unlimited", and <charge> is what the node charges a cost that does not
// fit: "true" or "false" as its charge_over_limit says, "true (quota_mode)"
// when it does not say and is a quota_mode node, else "default" (the
// service's setting decides; a global quota mode makes it charge).
func (c *Config) Dump() string {
	if c == nil {
		return ""
	}
	var lines []string
	for _, name := range c.names {
		c.domains[name].Walk(func(n *Node) {
			if len(n.Rules) == 0 && !n.Unlimited {
				return
			}
			var b strings.Builder
			b.WriteString(name)
			b.WriteByte('.')
			b.WriteString(n.Path())
			b.WriteString(": ")
			if n.Unlimited {
				b.WriteString("unlimited")
			}
			for i, r := range n.Rules {
				if i > 0 {
					b.WriteString("; ")
				}
				b.WriteString(r.String())
			}
			b.WriteString(", shadow_mode: ")
			b.WriteString(strconv.FormatBool(n.ShadowMode))
			b.WriteString(", quota_mode: ")
			b.WriteString(strconv.FormatBool(n.QuotaMode))
			b.WriteString(", charge_over_limit: ")
			b.WriteString(chargeText(n))
			lines = append(lines, b.String())
		})
	}
	slices.Sort(lines)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// chargeText describes n's charge_over_limit for Dump.
func chargeText(n *Node) string {
	switch {
	case n.ChargeOverLimit != nil:
		return strconv.FormatBool(*n.ChargeOverLimit)
	case n.QuotaMode:
		return "true (quota_mode)"
	}
	return "default"
}
