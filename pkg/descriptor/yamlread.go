package descriptor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file holds the document walk: it reads a YAML config file into
// DomainSpecs, checking only what is YAML's business (shapes, types, known
// keys). What the values mean is checked by Compile.

// ReadOptions control ReadYAML. The zero ReadOptions warns about what the
// reference ignores, as the reference would load it.
type ReadOptions struct {
	// Strict makes an error of everything the reference reads and
	// ignores (see ReadYAML), instead of a warning.
	Strict bool
}

// ReadYAML reads one config file into the spec of its domain, without
// checking what it means: pass it to Compile. name is used in errors only.
//
// It reads the file as the reference does, and names what it ignores in
// the spec's Warnings: a key the reference knows written where it means
// nothing (`shadow_mode` inside a rate_limit, `unit` at the root), a key
// written twice (the last one is used), and every YAML document after the
// first (the reference reads only the first). With opts.Strict each of
// these is an error instead.
//
// On error ReadYAML returns an ErrorList of every YAML-level mistake
// (syntax, unknown keys, wrong types), each with its line, along with the
// specs it could read.
func ReadYAML(name string, data []byte, opts ReadOptions) ([]DomainSpec, error) {
	p := &parser{file: name, strict: opts.Strict}
	var specs []DomainSpec
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := decodeSafely(dec, &doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if len(specs) > 0 && err == nil && (len(doc.Content) == 0 || isNull(doc.Content[0])) {
			continue // an empty document, e.g. after a trailing "---"
		}
		if len(specs) > 0 {
			p.laterDocument(&doc, err, data)
			break
		}
		if err != nil {
			p.yamlError(err, data)
			break
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue // an empty document, e.g. a leading "---"
		}
		if !p.checkAliases(&doc) {
			break
		}
		if s, ok := p.domain(doc.Content[0]); ok {
			specs = append(specs, s)
		} else {
			break
		}
	}
	if len(specs) == 0 && len(p.errs) == 0 {
		p.errs = append(p.errs, &Error{File: name, Reason: "config file cannot have empty domain: it holds no YAML document"})
	}
	sortErrors(p.errs)
	p.errs = compactErrors(p.errs)
	if len(specs) > 0 {
		sortErrors(p.warns)
		specs[0].Warnings = compactErrors(p.warns)
	}
	return specs, p.errs.err()
}

// laterDocument reports the second document of a stream (doc, or the
// syntax error decoding it gave), which the reference does not read.
func (p *parser) laterDocument(doc *yaml.Node, err error, data []byte) {
	at, bad := doc, ""
	if len(doc.Content) > 0 {
		at = doc.Content[0]
	}
	if err != nil {
		q := &parser{file: p.file}
		q.yamlError(err, data)
		at, bad = &yaml.Node{Line: q.errs[0].Line}, " ("+q.errs[0].Reason+")"
	}
	p.ignoredf(at, "a second YAML document starts here%s: the reference reads only a file's first document, so sluice ignores this one and every later one (put each domain in its own file)", bad)
}

// The keys each map of the format accepts. Any other key is an error, even
// with a null value.
var (
	rootKeys       = keySet("domain", "descriptors", "failure_mode")
	descriptorKeys = keySet("key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode",
		"quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata",
		"charge_over_limit")
)

func keySet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// domain reads a file's root map.
func (p *parser) domain(root *yaml.Node) (DomainSpec, bool) {
	s := DomainSpec{At: p.pos(root), NameAt: p.pos(root)}
	fields, ok := p.mapping(root, "the config file root")
	if !ok {
		return s, false
	}
	for _, f := range p.known(fields, rootKeys, "the domain root") {
		switch f.name {
		case "domain":
			s.Name, _ = p.str(f.val, "domain")
			s.NameAt = p.pos(f.val)
		case "descriptors":
			s.Descriptors = p.descriptors(f.val)
		case "failure_mode":
			if m, ok := p.str(f.val, "failure_mode"); ok {
				s.FailureMode, s.FailureModeAt = m, p.pos(f.val)
			}
		}
	}
	return s, true
}

// descriptors reads a `descriptors` list.
func (p *parser) descriptors(n *yaml.Node) []DescriptorSpec {
	return list(p, n, "descriptors", func(item *yaml.Node) (DescriptorSpec, bool) {
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			p.errorf(item, "descriptors must be a list of maps, got an item that is %s", describe(item))
			return DescriptorSpec{}, false
		}
		return p.descriptor(item), true
	})
}

// descriptor reads one descriptor map.
func (p *parser) descriptor(m *yaml.Node) DescriptorSpec {
	fields, _ := p.mapping(m, "a descriptor")
	fields = p.known(fields, descriptorKeys, "a descriptor")
	s := DescriptorSpec{At: p.pos(m), KeyAt: p.pos(m)}
	var rateLimit, rateLimits *field
	var keyNode *yaml.Node
	for i, f := range fields {
		switch f.name {
		case "key":
			s.Key, _ = p.str(f.val, "key")
			s.KeyAt = p.pos(f.val)
			keyNode = f.val
		case "value":
			s.Value, _ = p.str(f.val, "value")
		case "rate_limit":
			rateLimit = &fields[i]
		case "rate_limits":
			rateLimits = &fields[i]
		case "descriptors":
			s.Descriptors = p.descriptors(f.val)
		case "shadow_mode":
			s.ShadowMode, _ = p.boolean(f.val, "shadow_mode")
		case "quota_mode":
			s.QuotaMode, _ = p.boolean(f.val, "quota_mode")
		case "charge_over_limit":
			if v, ok := p.boolean(f.val, "charge_over_limit"); ok {
				s.ChargeOverLimit = &v
			}
		case "detailed_metric":
			s.DetailedMetric, _ = p.boolean(f.val, "detailed_metric")
		case "value_to_metric":
			s.ValueToMetric, _ = p.boolean(f.val, "value_to_metric")
		case "share_threshold":
			s.ShareThreshold, _ = p.boolean(f.val, "share_threshold")
			s.ShareThresholdAt = p.pos(f.val)
		case "metadata":
			s.Metadata = p.metadata(f.val)
		}
	}
	if strings.Contains(s.Key, "*") && s.Value != s.Key {
		p.ignoredf(keyNode, "%s", starKeyWarning(s.Key))
	}
	switch {
	case rateLimit != nil && rateLimits != nil:
		p.errorf(rateLimits.key, "rate_limit (line %d) and rate_limits cannot both be set: put every rule in rate_limits", rateLimit.key.Line)
	case rateLimit != nil:
		if r, ok := p.rule(rateLimit.val); ok {
			s.RateLimits = []RuleSpec{r}
		}
	case rateLimits != nil:
		s.RateLimits = list(p, rateLimits.val, "rate_limits", p.rule)
	}
	return s
}

// starKeyWarning says what a '*' in a descriptor's key means to sluice,
// and what it meant to the reference: there, a key holding '*' is matched
// as a wildcard pattern against the request's key and value joined by '_'
// (key "x*" matches key "x" with any value, and key "xyz"), an accident of
// how it builds lookup keys. sluice compares keys whole (the migration
// guide's star-key-literal row); a file written for that accident would
// otherwise lose its limit in silence. Envoy Gateway's route descriptors
// are not warned about: their key is a route name often ending in a
// literal '*' (the hostname), their value the same name, and Envoy sends
// both back unchanged. They come over xDS, which is never warned about,
// or from a file holding such a config, whose key equals its value.
func starKeyWarning(key string) string {
	return fmt.Sprintf("key '%s' holds '*', which sluice compares as a literal character: only a request key written '%s' matches it; "+
		"envoyproxy/ratelimit matches such a key as a wildcard over the request's key and value joined by '_' "+
		"(key 'x*' also matches key 'x' with any value, and key 'xyz'); for a wildcard, write the key whole and the '*' in the value",
		key, key)
}
