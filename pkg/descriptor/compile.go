package descriptor

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// Compile validates one domain's spec and compiles it into a Domain. Every
// config source goes through it, so a config means the same whatever it
// was read from.
//
// On error Compile returns an ErrorList of every mistake, each named by
// the Pos of the value at fault, along with the Domain it could build
// (partial: for diagnostics, not for serving), or nil when the spec has no
// name.
func Compile(spec DomainSpec) (*Domain, error) {
	c := &compiler{}
	d := c.domain(&spec)
	return d, c.result()
}

// compiler collects the errors of one Compile.
type compiler struct {
	errs ErrorList
	// zones caches time.LoadLocation per name.
	zones map[string]zoneResult
}

// zoneResult is one cached time.LoadLocation.
type zoneResult struct {
	loc *time.Location
	err error
}

// errorf records an error at pos.
func (c *compiler) errorf(pos Pos, format string, args ...any) {
	c.errs = append(c.errs, pos.error(fmt.Sprintf(format, args...)))
}

// error returns an Error at p.
func (p Pos) error(reason string) *Error {
	e := &Error{File: p.Source, Line: p.Line, Reason: reason}
	if p.Line == 0 {
		e.Path = p.FullPath()
	}
	return e
}

// result returns the errors sorted by position, without repeats (an
// anchored map used through several aliases reports its errors once).
func (c *compiler) result() error {
	sortErrors(c.errs)
	c.errs = compactErrors(c.errs)
	return c.errs.err()
}

// sortErrors orders errors by line, then path, keeping the order found
// among equals.
func sortErrors(l ErrorList) {
	slices.SortStableFunc(l, func(a, b *Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return strings.Compare(a.Path, b.Path)
	})
}

// domain checks the root of a spec and compiles its descriptors.
func (c *compiler) domain(s *DomainSpec) *Domain {
	d := &Domain{File: s.At.Source, line: s.At.Line}
	d.Name = s.Name
	for _, w := range s.Warnings {
		d.warnings = append(d.warnings, w.Error())
	}
	if s.FailureMode != "" || !s.FailureModeAt.IsZero() {
		at := s.FailureModeAt.or(s.At.below("failure_mode"))
		m, err := ParseFailureMode(s.FailureMode)
		if err != nil {
			c.errorf(at, "%v", err)
		} else {
			d.FailureMode, d.failureModeSet, d.failureModeAt = m, true, at
		}
	}
	if d.Name == "" {
		c.errorf(s.NameAt.or(s.At.below("domain")), "config file cannot have empty domain")
	}
	c.descriptors(s.Descriptors, s.At, d, nil, &d.root)
	if d.Name == "" {
		return nil
	}
	return d
}

// descriptors compiles a list of descriptor specs into l, the children of
// parent (nil at the top level of d). up locates the list's owner. It
// returns the first node compiled, or nil.
func (c *compiler) descriptors(specs []DescriptorSpec, up Pos, d *Domain, parent *Node, l *level) *Node {
	var compiled *Node
	for i := range specs {
		s := &specs[i]
		at := s.At
		if at.IsZero() {
			at = up.below("descriptors[" + strconv.Itoa(i) + "]")
		}
		n := c.node(s, at, d, parent)
		if n == nil {
			continue
		}
		if compiled == nil {
			compiled = n
		}
		if first := l.insert(n); first != nil {
			c.errorf(at, "duplicate descriptor composite key '%s.%s' (first at %s)", d.Name, n.Path(), describePos(at, first.at))
		}
	}
	return compiled
}

// node compiles one descriptor. It returns nil (after reporting why, and
// after compiling the children for their errors) when the node cannot be
// placed in the tree.
func (c *compiler) node(s *DescriptorSpec, at Pos, d *Domain, parent *Node) *Node {
	n := &Node{Key: s.Key, Value: s.Value, Parent: parent, Depth: 1, File: at.Source, Line: at.Line, at: at,
		ShadowMode: s.ShadowMode, QuotaMode: s.QuotaMode, DetailedMetric: s.DetailedMetric,
		ValueToMetric: s.ValueToMetric, ShareThreshold: s.ShareThreshold, Metadata: s.Metadata,
		ChargeOverLimit: s.ChargeOverLimit}
	if parent != nil {
		n.Depth = parent.Depth + 1
	}
	if n.Depth > MaxDepth {
		// Its children are not compiled: the tree stops here.
		c.errorf(at, "descriptor nested %d levels deep, beyond the %d a configuration may have", n.Depth, MaxDepth)
		return nil
	}
	d.depth = max(d.depth, n.Depth)
	ok := true
	if n.Key == "" {
		c.errorf(s.KeyAt.or(at.below("key")), "descriptor has empty key")
		ok = false
	}
	if n.Wildcard = strings.Contains(n.Value, "*"); n.Wildcard {
		n.pattern = compilePattern(n.Value)
	}
	if n.ShareThreshold && !n.Wildcard {
		c.errorf(s.ShareThresholdAt.or(at.below("share_threshold")), "share_threshold applies only to a value holding '*', not '%s'", n.Value)
	}
	c.rules(n, s.RateLimits, at)
	first := c.descriptors(s.Descriptors, at, d, n, &n.children)
	n.path = n.pathBelow(first)
	if !ok {
		return nil
	}
	return n
}

// pathBelow is n's Path, built once its children are: a prefix of its
// first child's, sharing its bytes, or, for a leaf, built from its
// parents. A chain of nodes then holds its deepest path once instead of
// every level's copy of its own.
func (n *Node) pathBelow(child *Node) string {
	if child == nil || child.path == "" {
		return n.buildPath()
	}
	seg := len(child.Key)
	if child.Value != "" {
		seg += 1 + len(child.Value)
	}
	return child.path[:len(child.path)-seg-1]
}

// MaxDepth is the most levels descriptors may nest, a top-level
// descriptor being level 1; a deeper one makes the config invalid. A
// request's descriptor matches one level per entry, and carries at most
// MaxRequestEntries entries unless the service is told otherwise: deeper
// nodes are for no request Envoy sends. Every node's metrics name is its
// whole path, so a tree's names take memory in proportion to the sum of
// its nodes' depths; the bound keeps that within MaxDepth times the
// config's size (a RateLimitConfig nesting 9,900 levels held 2.2 GB).
const MaxDepth = 64

// MaxRules is the most rate limits one descriptor may hold; a config with
// more is invalid. Every request that matches the descriptor decides all
// of them together, in one script call when the backend is Redis, during
// which Redis serves no other client: at 10,000 rules that call took
// seconds (docs/decisions/0075-rules-per-descriptor-bound.md).
const MaxRules = 32

// rules compiles a node's rate limits and sets its Rules, Unlimited and
// Replaces.
func (c *compiler) rules(n *Node, specs []RuleSpec, up Pos) {
	type good struct {
		rule *limit.Rule
		s    *RuleSpec
		at   Pos
	}
	if len(specs) > MaxRules {
		extra := &specs[MaxRules]
		c.errorf(extra.At.or(up.below("rate_limits["+strconv.Itoa(MaxRules)+"]")),
			"descriptor has %d rate limits, more than the %d one descriptor may hold (every request decides them all in one call)", len(specs), MaxRules)
	}
	var rules []good
	names := make(map[string]bool)
	for i := range specs {
		s := &specs[i]
		if s.Name != "" {
			names[s.Name] = true
		}
		path := "rate_limit"
		if len(specs) > 1 {
			path = "rate_limits[" + strconv.Itoa(i) + "]"
		}
		at := s.At.or(up.below(path))
		if r, ok := c.rule(s, at); ok {
			rules = append(rules, good{r, s, at})
		}
	}
	// Unnamed meters are told apart by their order among the node's
	// unnamed meters: their state (limit.Rule.ID) survives any change of
	// limit, period, burst or meter algorithm.
	slot := 0
	for _, g := range rules {
		if g.rule.Algorithm.IsMeter() && g.rule.Name == "" {
			g.rule.Slot = uint8(min(slot, 255))
			slot++
		}
	}
	ids := make(map[string]Pos)
	for _, g := range rules {
		if g.s.Unlimited {
			if len(specs) > 1 {
				c.errorf(g.at, "an unlimited rate limit must be the only one of its descriptor")
			}
			n.Unlimited = true
		} else {
			id := g.rule.ID()
			if first, dup := ids[id]; dup {
				if g.rule.Algorithm.IsMeter() {
					c.errorf(g.at, "rate limit has the same name as the meter at %s (%s): they would share state", describePos(g.at, first), id)
				} else {
					c.errorf(g.at, "rate limit has the same algorithm, period and time zone as the one at %s (%s): they would share state", describePos(g.at, first), id)
				}
			} else {
				ids[id] = g.at
			}
			n.Rules = append(n.Rules, *g.rule)
		}
		for j, r := range g.s.Replaces {
			if names[r.Name] && r.Name != g.s.Name {
				c.errorf(r.At.or(g.at.below("replaces["+strconv.Itoa(j)+"]")), "rate limit replaces '%s', a rate limit of the same descriptor", r.Name)
			}
			if !slices.Contains(n.Replaces, r.Name) {
				n.Replaces = append(n.Replaces, r.Name)
			}
		}
	}
}

// describePos names first for a message about a value at at: "line N"
// within one file, its path otherwise.
func describePos(at, first Pos) string {
	if first.Line > 0 && first.Source == at.Source {
		return "line " + strconv.Itoa(first.Line)
	}
	if first.Line > 0 {
		return where(first.Source, first.Line)
	}
	return first.FullPath()
}

// maxPeriodSeconds is the longest period a rule may have: 100 years of 365
// days, where pkg/limit caps periods (MaxPeriodMicros). A longer one would
// be silently shortened, so it is refused here.
const maxPeriodSeconds = 100 * 365 * 86400

// rule checks one rate limit and builds its limit.Rule.
func (c *compiler) rule(s *RuleSpec, at Pos) (*limit.Rule, bool) {
	r := &limit.Rule{Name: s.Name, Limit: uint64(s.RequestsPerUnit)}
	ok := true
	unitAt := s.UnitAt.or(at.below("unit"))
	if s.Unit != "" {
		u, err := limit.ParseUnit(s.Unit)
		if err != nil {
			c.errorf(unitAt, "invalid rate limit unit '%s' (want second, minute, hour, day, week, month or year)", s.Unit)
			ok = false
		}
		r.Unit = u
	}
	algorithmAt := s.AlgorithmAt.or(at.below("algorithm"))
	if s.Algorithm != "" {
		a, err := limit.ParseAlgorithm(s.Algorithm)
		if err != nil {
			c.errorf(algorithmAt, "%v", err)
			ok = false
		}
		r.Algorithm = a
	}
	burstAt := s.BurstAt.or(at.below("burst"))
	if s.Burst != nil {
		if *s.Burst == 0 {
			c.errorf(burstAt, "burst 0 is out of range (want 1 to %d)", uint64(math.MaxUint32))
			ok = false
		}
		r.Burst = uint64(*s.Burst)
	}
	multiplierAt := s.UnitMultiplierAt.or(at.below("unit_multiplier"))
	if s.UnitMultiplier != nil {
		if *s.UnitMultiplier == 0 {
			c.errorf(multiplierAt, "unit_multiplier 0 would make a rule of 0 length (want 1 or more)")
			ok = false
		}
		r.Multiplier = *s.UnitMultiplier
	}
	zoneAt := s.TimeZoneAt.or(at.below("time_zone"))
	if s.TimeZone != nil {
		var good bool
		r.Location, good = c.zone(zoneAt, *s.TimeZone)
		ok = ok && good
	}
	if s.Unlimited {
		if s.Unit != "" {
			c.errorf(unitAt, "should not specify rate limit unit when unlimited")
			ok = false
		}
		for _, x := range []struct {
			set  bool
			at   Pos
			name string
		}{{s.Algorithm != "", algorithmAt, "algorithm"}, {s.Burst != nil, burstAt, "burst"},
			{s.UnitMultiplier != nil, multiplierAt, "unit_multiplier"}, {s.TimeZone != nil, zoneAt, "time_zone"}} {
			if x.set {
				c.errorf(x.at, "should not specify %s when unlimited", x.name)
				ok = false
			}
		}
	} else if s.Unit == "" {
		c.errorf(at, "rate limit has no unit (want second, minute, hour, day, week, month or year, or unlimited: true)")
		ok = false
	}
	if r.Multiplier > 0 && uint64(r.Multiplier)*uint64(r.Unit.Seconds()) > maxPeriodSeconds {
		c.errorf(multiplierAt, "unit_multiplier %d makes a period longer than 100 years", r.Multiplier)
		ok = false
	}
	if s.Burst != nil && !r.Algorithm.IsMeter() {
		c.errorf(burstAt, "burst applies only to token_bucket, leaky_bucket and gcra, not %s", r.Algorithm)
		ok = false
	}
	if s.TimeZone != nil && r.Algorithm != limit.FixedWindow {
		c.errorf(zoneAt, "time_zone applies only to fixed_window (%s has no calendar windows)", r.Algorithm)
		ok = false
	}
	for j, x := range s.Replaces {
		xAt := x.At.or(at.below("replaces[" + strconv.Itoa(j) + "]"))
		switch {
		case x.Name == "":
			c.errorf(xAt, "replaces item has an empty name")
			ok = false
		case x.Name == r.Name:
			c.errorf(xAt, "rate limit '%s' cannot replace itself", x.Name)
			ok = false
		}
	}
	return r, ok
}

// zone loads an IANA time zone. "" and "Local" are refused: they would
// make the windows depend on the machine sluice runs on.
func (c *compiler) zone(at Pos, name string) (*time.Location, bool) {
	if name == "" || name == "Local" {
		c.errorf(at, "time_zone '%s' is not an IANA time zone name (e.g. UTC, Europe/Paris)", name)
		return nil, false
	}
	z, cached := c.zones[name]
	if !cached {
		z.loc, z.err = time.LoadLocation(name)
		if c.zones == nil {
			c.zones = make(map[string]zoneResult)
		}
		c.zones[name] = z
	}
	if z.err != nil {
		c.errorf(at, "unknown time_zone '%s': %v", name, z.err)
		return nil, false
	}
	return z.loc, true
}
