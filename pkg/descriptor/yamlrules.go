package descriptor

import (
	"math"

	"gopkg.in/yaml.v3"
)

// This file reads rate-limit maps (rate_limit, rate_limits and their
// replaces) into RuleSpecs.

// ruleKeys are the keys a rate-limit map accepts.
var ruleKeys = keySet("unit", "requests_per_unit", "name", "unlimited", "replaces",
	"algorithm", "burst", "unit_multiplier", "time_zone")

// rule reads one rate-limit map. ok is false when m is not a map.
func (p *parser) rule(m *yaml.Node) (s RuleSpec, ok bool) {
	m = resolve(m)
	s.At = p.pos(m)
	fields, ok := p.mapping(m, "a rate limit")
	if !ok {
		return s, false
	}
	for _, f := range p.known(fields, ruleKeys, "a rate limit") {
		at := p.pos(f.val)
		switch f.name {
		case "unit":
			s.Unit, _ = p.str(f.val, "unit")
			s.UnitAt = at
		case "requests_per_unit":
			u, _ := p.integer(f.val, "requests_per_unit", 0, math.MaxUint32)
			s.RequestsPerUnit = uint32(u)
		case "name":
			s.Name, _ = p.str(f.val, "name")
		case "unlimited":
			s.Unlimited, _ = p.boolean(f.val, "unlimited")
		case "replaces":
			s.Replaces = p.replaces(f.val)
		case "algorithm":
			s.Algorithm, _ = p.str(f.val, "algorithm")
			s.AlgorithmAt = at
		case "burst":
			if u, good := p.integer(f.val, "burst", 0, math.MaxUint32); good {
				b := uint32(u)
				s.Burst, s.BurstAt = &b, at
			}
		case "unit_multiplier":
			if u, good := p.integer(f.val, "unit_multiplier", 0, math.MaxUint32); good {
				x := uint32(u)
				s.UnitMultiplier, s.UnitMultiplierAt = &x, at
			}
		case "time_zone":
			if z, good := p.str(f.val, "time_zone"); good {
				s.TimeZone, s.TimeZoneAt = &z, at
			}
		}
	}
	return s, true
}

// replaces reads a `replaces` list: maps holding a name.
func (p *parser) replaces(n *yaml.Node) []ReplaceSpec {
	return list(p, n, "replaces", func(item *yaml.Node) (ReplaceSpec, bool) {
		fields, good := p.mapping(item, "a replaces item")
		if !good {
			return ReplaceSpec{}, false
		}
		r := ReplaceSpec{At: p.pos(resolve(item))}
		for _, f := range fields {
			if f.name != "name" {
				p.unknown(f, "a replaces item")
				continue
			}
			r.Name, _ = p.str(f.val, "name")
			r.At = p.pos(f.val)
		}
		return r, true
	})
}
