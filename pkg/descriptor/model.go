package descriptor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/pkg/identity"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// FailureMode says what a domain answers when its backend cannot decide.
// The zero FailureMode is FailureError.
type FailureMode int

// The failure modes. FailureError is the zero value and the default.
const (
	// FailureError answers gRPC Unavailable with a reason, so Envoy's own
	// failure_mode_deny decides.
	FailureError FailureMode = iota
	// FailureAllow answers OK.
	FailureAllow
	// FailureDeny answers OVER_LIMIT.
	FailureDeny
	// FailureLocal decides with the in-process memory backend, each limit
	// divided by the configured instance count.
	FailureLocal
)

var failureModeNames = [...]string{"error", "allow", "deny", "local"}

// String returns the config name of m.
func (m FailureMode) String() string {
	if m < 0 || int(m) >= len(failureModeNames) {
		return fmt.Sprintf("failure_mode(%d)", int(m))
	}
	return failureModeNames[m]
}

// ParseFailureMode parses a config failure_mode. "" means FailureError.
func ParseFailureMode(s string) (FailureMode, error) {
	if s == "" {
		return FailureError, nil
	}
	if i := slices.Index(failureModeNames[:], strings.ToLower(s)); i >= 0 {
		return FailureMode(i), nil
	}
	return 0, fmt.Errorf("unknown failure_mode %q (want error, allow, deny or local)", s)
}

// Entry is one key/value pair of a request descriptor. It is the same
// type as identity.Entry, so a request's entries are matched and encoded
// without a conversion.
type Entry = identity.Entry

// Node is one descriptor of the config tree: a key, an optional value (exact,
// wildcard pattern, or empty for the key-only default), and what applies
// when a request descriptor ends at this node. Nodes are built by Compile
// and belong to their Domain: once compiled they are read-only and safe for
// concurrent use (their Rules and Metadata are shared with every request
// and must not be changed).
type Node struct {
	// Key and Value as written in the config. Value is "" for a key-only
	// node and holds the pattern, '*' included, for a wildcard node.
	Key, Value string
	// Wildcard is true when Value contains '*'.
	Wildcard bool
	// Parent is the node one level up; nil at the top level of a domain.
	Parent *Node
	// Depth is 1 for top-level nodes, 2 for their children, ...
	Depth int

	// Rules hold the limits decided together for a descriptor of exactly
	// this depth. Empty (and not Unlimited) means no limit: the descriptor is
	// answered OK without touching a backend.
	Rules []limit.Rule
	// Unlimited means always OK, remaining 4294967295, no backend call.
	Unlimited bool
	// Replaces lists rule names this node's rules replace (see the
	// reference's `replaces`): the union over its rules.
	Replaces []string

	ShadowMode bool
	QuotaMode  bool
	// ChargeOverLimit is the node's charge_over_limit: whether a cost that
	// does not fit is still charged (limit.Cost.Charge), as the debit of a
	// check-then-debit quota needs. Nil when the config does not say:
	// quota_mode nodes then charge, others follow the service's default.
	ChargeOverLimit *bool
	DetailedMetric  bool
	ValueToMetric   bool
	// ShareThreshold makes every value matching this wildcard node share
	// one counter: the identity uses Value (the pattern) instead of the
	// request's value.
	ShareThreshold bool
	// Metadata is the node's `metadata`, returned in dynamic metadata.
	Metadata map[string]any

	// File and Line locate the node in its config file.
	File string
	Line int

	// children are the nodes one level down, compiled for Match.
	children level
	// pattern is Value compiled for matching, when Wildcard.
	pattern pattern
	// path caches Path for nodes built by Compile.
	path string
	// at is where the node is written, for errors naming it.
	at Pos
}

// Path is the node's stats path, as the reference builds it:
// "key_value.key2" (value omitted for key-only nodes, the pattern kept for
// wildcard nodes), without the domain.
func (n *Node) Path() string {
	if n.path != "" {
		return n.path
	}
	return n.buildPath()
}

// buildPath computes Path by walking up the parents.
func (n *Node) buildPath() string {
	var parts []string
	for x := n; x != nil; x = x.Parent {
		p := x.Key
		if x.Value != "" {
			p += "_" + x.Value
		}
		parts = append(parts, p)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ".")
}

// Domain is the compiled config of one domain, built by Compile (or Parse,
// Load). It is immutable once built and safe for concurrent use. A nil or
// zero Domain matches nothing.
type Domain struct {
	// Name is the domain.
	Name string
	// FailureMode applies when the backend cannot decide for this domain.
	FailureMode FailureMode
	// File is the file the domain was read from (the first one when
	// MergeDomains joined several).
	File string

	// root holds the top-level descriptors.
	root level
	// line is where the domain's document starts in File.
	line int
	// failureModeSet says the domain sets failure_mode, at failureModeAt
	// (so merging can tell "unset" from "error").
	failureModeSet bool
	failureModeAt  Pos
	// warnings are what the sources ignored, as "file:line: reason", for
	// Config.Warnings.
	warnings []string
	// depth is the deepest node's Depth (Depth).
	depth int
}

// Config is a set of compiled domains, built by Load or NewConfig. It is
// immutable once built and safe for concurrent use: a reload builds a new
// Config and swaps it in whole (internal/service's Service.SetConfig),
// never edits one. The zero Config holds no domain.
type Config struct {
	domains map[string]*Domain
	names   []string // sorted
	// loadWarnings are what Load found worth saying about the files it
	// read (or did not read), for Warnings.
	loadWarnings []string
}

// Domain returns the named domain, or nil.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains returns the domain names, sorted. The slice is the caller's.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.names)
}

// Match walks entries down d's tree with the reference's rules (per level:
// exact value, then the first matching wildcard in file order, then the
// key-only default; no backtracking) and returns the node reached by the
// last entry, or nil when some entry matched nothing. The caller applies a
// node's limits only as returned: Match already requires the node's depth
// to equal len(entries).
//
// Keys and values are compared as opaque byte strings: no joining, so no
// two different entries can be confused whatever bytes they hold. Match
// does not allocate and is safe for concurrent use.
func (d *Domain) Match(entries []Entry) *Node {
	if d == nil || len(entries) == 0 {
		return nil
	}
	l := &d.root
	var n *Node
	for i := range entries {
		n = l.match(&entries[i])
		if n == nil {
			return nil
		}
		l = &n.children
	}
	return n
}

// Depth returns the Depth of d's deepest node: the most entries a request
// descriptor that d's nodes can match carries. It is 0 for a nil domain
// or one without descriptors.
func (d *Domain) Depth() int {
	if d == nil {
		return 0
	}
	return d.depth
}

// Walk calls fn for every node of d, parents before their children, in
// file order (files in load order when MergeDomains joined several).
func (d *Domain) Walk(fn func(*Node)) {
	if d == nil {
		return
	}
	d.root.walk(fn)
}
