package descriptor

import (
	"slices"
	"strings"
)

// This file holds the source-neutral model of a configuration: what a
// source (a YAML file, an xDS resource, a test) says about one domain,
// before anything is checked. ReadYAML produces it; Compile is the one path
// that validates it and builds the match tree.

// Pos locates a value of a DomainSpec in its source, for errors and
// warnings. The zero Pos means "not given": Compile then names the value by
// its parent's Pos and the field's path below it (e.g. "descriptors[2].key").
type Pos struct {
	// Source names where the config came from: a file name, or a resource
	// such as "RateLimitConfig api-limits".
	Source string
	// Line is the 1-based line in Source; 0 when the source has no lines.
	Line int
	// Path names the value inside Source when Line cannot, e.g.
	// "descriptors[2].rate_limit.unit": all of it, or, in a Pos made by
	// Below, the part below the Pos it was made from (FullPath gives the
	// whole). Errors show it only when Line is 0.
	Path string
	// up is the Pos this one was made from by Below, or nil.
	up *Pos
}

// IsZero reports whether p gives no position.
func (p Pos) IsZero() bool { return p == Pos{} }

// Below returns the Pos of the field named path under p. It does not copy
// p's path: it refers to p, so that the positions of a tree's values cost
// memory in proportion to the values, not to the sum of their depths
// (a descriptor 10,000 levels deep named every level by its whole path,
// 50 million path segments in all).
func (p Pos) Below(path string) Pos {
	if p.Path == "" && p.up == nil {
		return Pos{Source: p.Source, Line: p.Line, Path: path}
	}
	up := p
	return Pos{Source: p.Source, Line: p.Line, Path: path, up: &up}
}

// below is Below.
func (p Pos) below(path string) Pos { return p.Below(path) }

// FullPath is p's whole path inside Source, joined with dots.
func (p Pos) FullPath() string {
	if p.up == nil {
		return p.Path
	}
	var parts []string
	for q := &p; q != nil; q = q.up {
		if q.Path != "" {
			parts = append(parts, q.Path)
		}
	}
	slices.Reverse(parts)
	return strings.Join(parts, ".")
}

// or returns p, or def when p is zero.
func (p Pos) or(def Pos) Pos {
	if p.IsZero() {
		return def
	}
	return p
}

// DomainSpec is one domain's descriptors as a source wrote them: plain
// values, not yet validated. Fields mirror the YAML format (and the
// reference's RateLimitConfig); the *At fields say where each value was
// written and may be left zero.
//
// A DomainSpec holds no state of its own and is safe to build by hand:
// Compile checks everything and reports every mistake with its Pos.
type DomainSpec struct {
	// Name is the domain; it must not be empty.
	Name string
	// FailureMode is the failure_mode text ("" means not set: error).
	FailureMode string
	// Descriptors are the top-level descriptors, in source order.
	Descriptors []DescriptorSpec

	// At is where the domain starts (its document, or its resource).
	At Pos
	// NameAt and FailureModeAt are where Name and FailureMode are written.
	NameAt, FailureModeAt Pos

	// Warnings are what the source read but ignored, each with where it
	// is written; Compile keeps them for Config.Warnings.
	Warnings []*Error
}

// DescriptorSpec is one descriptor of a DomainSpec.
type DescriptorSpec struct {
	// Key is required. Value is optional: "" is the key-only default, and
	// a value holding '*' is a wildcard pattern.
	Key, Value string
	// RateLimits are the descriptor's rules: one for the reference's
	// rate_limit, several for sluice's rate_limits, none for a descriptor
	// that only groups children.
	RateLimits []RuleSpec
	// Descriptors are the children, matched against the next entry.
	Descriptors []DescriptorSpec

	ShadowMode, QuotaMode, DetailedMetric, ValueToMetric bool
	// ChargeOverLimit is charge_over_limit: nil when not written.
	ChargeOverLimit *bool
	// ShareThreshold makes every value matching a wildcard share one
	// counter; it is an error on a value without '*'.
	ShareThreshold bool
	// Metadata is returned in dynamic metadata; values are the plain Go
	// values of encoding/json (maps with string keys, []any, strings,
	// bools, int64, uint64, float64, nil).
	Metadata map[string]any

	// At is where the descriptor starts; KeyAt and ShareThresholdAt are
	// where those fields are written.
	At, KeyAt, ShareThresholdAt Pos
}

// RuleSpec is one rate limit of a descriptor.
type RuleSpec struct {
	// Name names the rule for `replaces` and metrics; optional.
	Name string
	// Unit is second, minute, hour, day, week, month or year; "" means
	// not set, which only an Unlimited rule may be.
	Unit string
	// RequestsPerUnit is the limit per period.
	RequestsPerUnit uint32
	// Unlimited makes the descriptor always OK; it must be its
	// descriptor's only rule and set no unit or sluice extension.
	Unlimited bool
	// Replaces names rules of other descriptors this rule replaces.
	Replaces []ReplaceSpec

	// Algorithm is a limit.Algorithm name; "" means fixed_window.
	Algorithm string
	// Burst, UnitMultiplier and TimeZone are sluice's extensions; nil
	// means not set.
	Burst, UnitMultiplier *uint32
	TimeZone              *string

	// At is where the rule starts; the other *At fields are where each
	// field is written.
	At, UnitAt, AlgorithmAt, BurstAt, UnitMultiplierAt, TimeZoneAt Pos
}

// ReplaceSpec is one `replaces` item: the name of a rule to replace.
type ReplaceSpec struct {
	Name string
	At   Pos
}
