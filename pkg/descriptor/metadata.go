package descriptor

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// This file converts a descriptor's YAML metadata into plain Go values.

// metadata reads a descriptor's metadata map into plain Go values.
func (p *parser) metadata(n *yaml.Node) map[string]any {
	if resolve(n).Kind != yaml.MappingNode {
		p.errorf(n, "metadata must be a map, got %s", describe(n))
		return nil
	}
	v, _ := p.metadataValue(n).(map[string]any)
	return v
}

// metadataValue converts a YAML value: maps to map[string]any (string keys
// only), lists to []any, integers to int64 (uint64 past its range), floats
// to float64, booleans to bool, null to nil, anything else to its text.
func (p *parser) metadataValue(n *yaml.Node) any {
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		fields := p.fields(n, 0)
		m := make(map[string]any, len(fields))
		for _, f := range fields {
			m[f.name] = p.metadataValue(f.val)
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			l = append(l, p.metadataValue(c))
		}
		return l
	}
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		return strings.EqualFold(n.Value, "true")
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return i
		}
		var u uint64
		if n.Decode(&u) == nil {
			return u
		}
		p.errorf(n, "metadata integer %s is out of range", n.Value)
		return nil
	case "!!float":
		var f float64
		if n.Decode(&f) == nil {
			return f
		}
		p.errorf(n, "metadata float %s is not a number", n.Value)
		return nil
	}
	return n.Value
}
