package descriptor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// Parse compiles one config file: a YAML document holding one domain, as
// the reference reads, or a stream of documents ("---" between them), each
// one domain. name is used in errors only.
//
// On error Parse returns an ErrorList of every error it found, along with
// the domains it could build (partial: for diagnostics, not for serving).
// Domains of the same name are not checked here; Load and NewConfig do.
func Parse(name string, data []byte) ([]*Domain, error) {
	p := &parser{file: name}
	var domains []*Domain
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := decodeSafely(dec, &doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.yamlError(err, data)
			break
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue // an empty document, e.g. after a trailing "---"
		}
		if !p.checkAliases(&doc) {
			continue
		}
		if d := p.domain(doc.Content[0]); d != nil {
			domains = append(domains, d)
		}
	}
	if len(domains) == 0 && len(p.errs) == 0 {
		p.errs = append(p.errs, &Error{File: name, Reason: "config file cannot have empty domain: it holds no YAML document"})
	}
	return domains, p.result()
}

// result returns the file's errors sorted by line, without repeats (an
// anchored map used through several aliases reports its errors once).
func (p *parser) result() error {
	slices.SortStableFunc(p.errs, func(a, b *Error) int { return a.Line - b.Line })
	p.errs = slices.CompactFunc(p.errs, func(a, b *Error) bool { return *a == *b })
	return p.errs.err()
}

// decodeSafely decodes the next document, turning a panic inside the YAML
// library into an error: bad input must never crash a reload.
func decodeSafely(dec *yaml.Decoder, doc *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: %v", r)
		}
	}()
	return dec.Decode(doc)
}

var (
	yamlLine      = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)
	unknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)
)

// yamlError records a syntax error from the YAML library with the line it
// names. The library gives no line for an alias to an unknown anchor; the
// first line holding that alias is used.
func (p *parser) yamlError(err error, data []byte) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
		if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
			if i := bytes.Index(data, []byte("*"+m[1])); i >= 0 {
				line = 1 + bytes.Count(data[:i], []byte("\n"))
			}
		} else {
			line = lineWithoutMark(msg, data)
		}
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Reason: "bad YAML: " + msg})
}

// lineWithoutMark returns the line of a YAML error whose message names
// none. The library omits the line of errors on the first line, and gives
// none for bytes its reader refuses (a control character, invalid UTF-8):
// for those the first such byte's line is returned, for the others 1.
func lineWithoutMark(msg string, data []byte) int {
	if !strings.Contains(msg, "control characters") && !strings.Contains(msg, "UTF-8") && !strings.Contains(msg, "Unicode") {
		return 1
	}
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		ok := r != utf8.RuneError || n > 1
		switch {
		case r == '\t', r == '\n', r == '\r', r == 0x85:
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0, r >= 0xd800 && r < 0xe000, r == 0xfffe, r == 0xffff:
			ok = false
		}
		if !ok {
			return 1 + bytes.Count(data[:i], []byte("\n"))
		}
		i += n
	}
	return 1
}

// The keys each map of the format accepts. Any other key is an error, even
// with a null value.
var (
	rootKeys       = keySet("domain", "descriptors", "failure_mode")
	descriptorKeys = keySet("key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode",
		"quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata")
	ruleKeys = keySet("unit", "requests_per_unit", "name", "unlimited", "replaces",
		"algorithm", "burst", "unit_multiplier", "time_zone")
)

func keySet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// domain reads a file's root map.
func (p *parser) domain(root *yaml.Node) *Domain {
	fields, ok := p.mapping(root, "the config file root")
	if !ok {
		return nil
	}
	d := &Domain{File: p.file, line: root.Line}
	nameAt := root
	var descriptors *yaml.Node
	for _, f := range fields {
		if !rootKeys[f.name] {
			p.unknown(f)
			continue
		}
		if isNull(f.val) {
			continue
		}
		switch f.name {
		case "domain":
			d.Name, _ = p.str(f.val, "domain")
			nameAt = f.val
		case "descriptors":
			descriptors = f.val
		case "failure_mode":
			s, ok := p.str(f.val, "failure_mode")
			if !ok {
				break
			}
			m, err := ParseFailureMode(s)
			if err != nil {
				p.errorf(f.val, "%v", err)
				break
			}
			d.FailureMode, d.failureModeLine = m, f.val.Line
		}
	}
	if d.Name == "" {
		p.errorf(nameAt, "config file cannot have empty domain")
	}
	if descriptors != nil {
		p.descriptors(descriptors, d, nil, &d.root)
	}
	if d.Name == "" {
		return nil
	}
	return d
}

// descriptors reads a `descriptors` list into l, the children of parent
// (nil at the top level of d).
func (p *parser) descriptors(list *yaml.Node, d *Domain, parent *Node, l *level) {
	if list.Kind != yaml.SequenceNode {
		p.errorf(list, "descriptors must be a list, got %s", describe(list))
		return
	}
	for _, item := range list.Content {
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			p.errorf(item, "descriptors must be a list of maps, got an item that is %s", describe(item))
			continue
		}
		n := p.node(item, d, parent)
		if n == nil {
			continue
		}
		if first := l.insert(n); first != nil {
			p.errorf(item, "duplicate descriptor composite key '%s.%s' (first at line %d)", d.Name, n.Path(), first.Line)
		}
	}
}

// node reads one descriptor map. It returns nil (after reporting why, and
// after reading the children for their errors) when the node cannot be
// placed in the tree.
func (p *parser) node(m *yaml.Node, d *Domain, parent *Node) *Node {
	fields, _ := p.mapping(m, "a descriptor")
	n := &Node{Parent: parent, Depth: 1, File: p.file, Line: m.Line}
	if parent != nil {
		n.Depth = parent.Depth + 1
	}
	keyAt := m
	var rateLimit, rateLimits *field
	var descriptors, shareAt *yaml.Node
	for i, f := range fields {
		if !descriptorKeys[f.name] {
			p.unknown(f)
			continue
		}
		if isNull(f.val) {
			continue
		}
		switch f.name {
		case "key":
			n.Key, _ = p.str(f.val, "key")
			keyAt = f.val
		case "value":
			n.Value, _ = p.str(f.val, "value")
		case "rate_limit":
			rateLimit = &fields[i]
		case "rate_limits":
			rateLimits = &fields[i]
		case "descriptors":
			descriptors = f.val
		case "shadow_mode":
			n.ShadowMode, _ = p.boolean(f.val, "shadow_mode")
		case "quota_mode":
			n.QuotaMode, _ = p.boolean(f.val, "quota_mode")
		case "detailed_metric":
			n.DetailedMetric, _ = p.boolean(f.val, "detailed_metric")
		case "value_to_metric":
			n.ValueToMetric, _ = p.boolean(f.val, "value_to_metric")
		case "share_threshold":
			n.ShareThreshold, _ = p.boolean(f.val, "share_threshold")
			shareAt = f.val
		case "metadata":
			n.Metadata = p.metadata(f.val)
		}
	}
	ok := true
	if n.Key == "" {
		p.errorf(keyAt, "descriptor has empty key")
		ok = false
	}
	if n.Wildcard = strings.Contains(n.Value, "*"); n.Wildcard {
		n.pattern = compilePattern(n.Value)
	}
	if n.ShareThreshold && !n.Wildcard {
		p.errorf(shareAt, "share_threshold applies only to a value holding '*', not '%s'", n.Value)
	}
	switch {
	case rateLimit != nil && rateLimits != nil:
		p.errorf(rateLimits.key, "rate_limit (line %d) and rate_limits cannot both be set: put every rule in rate_limits", rateLimit.key.Line)
	case rateLimit != nil:
		p.rules(n, []*yaml.Node{rateLimit.val})
	case rateLimits != nil:
		if rateLimits.val.Kind != yaml.SequenceNode {
			p.errorf(rateLimits.val, "rate_limits must be a list, got %s", describe(rateLimits.val))
			break
		}
		p.rules(n, rateLimits.val.Content)
	}
	n.path = n.buildPath()
	if descriptors != nil {
		p.descriptors(descriptors, d, n, &n.children)
	}
	if !ok {
		return nil
	}
	return n
}

// ruleSpec is one rate-limit map as read.
type ruleSpec struct {
	rule      limit.Rule
	unlimited bool
	replaces  []replace
	at        *yaml.Node
}

// replace is one `replaces` name and where it is written.
type replace struct {
	name string
	at   *yaml.Node
}

// rules reads a node's rate limits (one from rate_limit, or the list of
// rate_limits) and sets its Rules, Unlimited and Replaces.
func (p *parser) rules(n *Node, maps []*yaml.Node) {
	var specs []ruleSpec
	for _, m := range maps {
		if s, ok := p.rule(m); ok {
			specs = append(specs, s)
		}
	}
	names := make(map[string]bool)
	for _, s := range specs {
		if s.rule.Name != "" {
			names[s.rule.Name] = true
		}
	}
	ids := make(map[string]*yaml.Node)
	for _, s := range specs {
		if s.unlimited {
			if len(maps) > 1 {
				p.errorf(s.at, "an unlimited rate limit must be the only one of its descriptor")
			}
			n.Unlimited = true
		} else {
			id := s.rule.ID()
			if first := ids[id]; first != nil {
				p.errorf(s.at, "rate limit has the same algorithm, period and time zone as the one at line %d (%s): they would share state", first.Line, id)
			} else {
				ids[id] = s.at
			}
			n.Rules = append(n.Rules, s.rule)
		}
		for _, r := range s.replaces {
			if names[r.name] && r.name != s.rule.Name {
				p.errorf(r.at, "rate limit replaces '%s', a rate limit of the same descriptor", r.name)
			}
			if !slices.Contains(n.Replaces, r.name) {
				n.Replaces = append(n.Replaces, r.name)
			}
		}
	}
}

// maxPeriodSeconds is the longest period a rule may have: 100 years of 365
// days, where pkg/limit caps periods (MaxPeriodMicros). A longer one would
// be silently shortened, so it is refused here.
const maxPeriodSeconds = 100 * 365 * 86400

// rule reads one rate-limit map.
func (p *parser) rule(m *yaml.Node) (ruleSpec, bool) {
	m = resolve(m)
	s := ruleSpec{at: m}
	fields, ok := p.mapping(m, "a rate limit")
	if !ok {
		return s, false
	}
	r := &s.rule
	var unitAt, algorithmAt, burstAt, multiplierAt, zoneAt *yaml.Node
	ok = true
	for _, f := range fields {
		if !ruleKeys[f.name] {
			p.unknown(f)
			ok = false
			continue
		}
		if isNull(f.val) {
			continue
		}
		var good bool
		switch f.name {
		case "unit":
			unitAt = f.val
			var u string
			if u, good = p.str(f.val, "unit"); good {
				var err error
				if r.Unit, err = limit.ParseUnit(u); err != nil {
					p.errorf(f.val, "invalid rate limit unit '%s' (want second, minute, hour, day, week, month or year)", u)
					good = false
				}
			}
		case "requests_per_unit":
			r.Limit, good = p.integer(f.val, "requests_per_unit", 0, math.MaxUint32)
		case "name":
			r.Name, good = p.str(f.val, "name")
		case "unlimited":
			s.unlimited, good = p.boolean(f.val, "unlimited")
		case "replaces":
			s.replaces, good = p.replaces(f.val)
		case "algorithm":
			algorithmAt = f.val
			var a string
			if a, good = p.str(f.val, "algorithm"); good {
				var err error
				if r.Algorithm, err = limit.ParseAlgorithm(a); err != nil {
					p.errorf(f.val, "%v", err)
					good = false
				}
			}
		case "burst":
			burstAt = f.val
			r.Burst, good = p.integer(f.val, "burst", 1, math.MaxUint32)
		case "unit_multiplier":
			multiplierAt = f.val
			var u uint64
			if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!int" && f.val.Value == "0" {
				p.errorf(f.val, "unit_multiplier 0 would make a rule of 0 length (want 1 or more)")
				break
			}
			u, good = p.integer(f.val, "unit_multiplier", 1, math.MaxUint32)
			r.Multiplier = uint32(u)
		case "time_zone":
			zoneAt = f.val
			var z string
			if z, good = p.str(f.val, "time_zone"); good {
				r.Location, good = p.zone(f.val, z)
			}
		}
		ok = ok && good
	}
	if s.unlimited {
		if unitAt != nil {
			p.errorf(unitAt, "should not specify rate limit unit when unlimited")
			ok = false
		}
		for _, x := range []struct {
			at   *yaml.Node
			name string
		}{{algorithmAt, "algorithm"}, {burstAt, "burst"}, {multiplierAt, "unit_multiplier"}, {zoneAt, "time_zone"}} {
			if x.at != nil {
				p.errorf(x.at, "should not specify %s when unlimited", x.name)
				ok = false
			}
		}
	} else if unitAt == nil {
		p.errorf(m, "rate limit has no unit (want second, minute, hour, day, week, month or year, or unlimited: true)")
		ok = false
	}
	if multiplierAt != nil && r.Multiplier > 0 && uint64(r.Multiplier)*uint64(r.Unit.Seconds()) > maxPeriodSeconds {
		p.errorf(multiplierAt, "unit_multiplier %d makes a period longer than 100 years", r.Multiplier)
		ok = false
	}
	if burstAt != nil && !r.Algorithm.HasBurst() {
		p.errorf(burstAt, "burst applies only to token_bucket, leaky_bucket and gcra, not %s", r.Algorithm)
		ok = false
	}
	if zoneAt != nil && r.Algorithm != limit.FixedWindow {
		p.errorf(zoneAt, "time_zone applies only to fixed_window (%s has no calendar windows)", r.Algorithm)
		ok = false
	}
	for _, x := range s.replaces {
		if x.name == r.Name {
			p.errorf(x.at, "rate limit '%s' cannot replace itself", x.name)
			ok = false
		}
	}
	return s, ok
}

// replaces reads a `replaces` list: maps holding a non-empty name.
func (p *parser) replaces(list *yaml.Node) ([]replace, bool) {
	if list.Kind != yaml.SequenceNode {
		p.errorf(list, "replaces must be a list, got %s", describe(list))
		return nil, false
	}
	var names []replace
	ok := true
	for _, item := range list.Content {
		fields, good := p.mapping(item, "a replaces item")
		if !good {
			ok = false
			continue
		}
		r := replace{at: resolve(item)}
		for _, f := range fields {
			if f.name != "name" {
				p.unknown(f)
				ok = false
				continue
			}
			r.name, good = p.str(f.val, "name")
			r.at = f.val
			ok = ok && good
		}
		if r.name == "" {
			p.errorf(r.at, "replaces item has an empty name")
			ok = false
			continue
		}
		names = append(names, r)
	}
	return names, ok
}

// zoneResult is one cached time.LoadLocation.
type zoneResult struct {
	loc *time.Location
	err error
}

// zone loads an IANA time zone. "" and "Local" are refused: they would
// make the windows depend on the machine sluice runs on.
func (p *parser) zone(at *yaml.Node, name string) (*time.Location, bool) {
	if name == "" || name == "Local" {
		p.errorf(at, "time_zone '%s' is not an IANA time zone name (e.g. UTC, Europe/Paris)", name)
		return nil, false
	}
	z, cached := p.zones[name]
	if !cached {
		z.loc, z.err = time.LoadLocation(name)
		if p.zones == nil {
			p.zones = make(map[string]zoneResult)
		}
		p.zones[name] = z
	}
	if z.err != nil {
		p.errorf(at, "unknown time_zone '%s': %v", name, z.err)
		return nil, false
	}
	return z.loc, true
}

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
