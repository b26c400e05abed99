package service

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// Observer receives the service's decisions, for metrics. Its methods run on
// the request's goroutine, so they must be fast and safe for concurrent use,
// and they must not keep the slices they are given after returning.
type Observer interface {
	// Descriptor reports the outcome of one request descriptor.
	Descriptor(ev DescriptorEvent)
	// Request reports a finished ShouldRateLimit call.
	Request(ev RequestEvent)
}

// Outcome classifies what happened to one request descriptor.
type Outcome int

// The outcomes.
const (
	// OutcomeUnknownDomain: the request's domain is not configured.
	OutcomeUnknownDomain Outcome = iota
	// OutcomeNoLimit: no node matched, the node has no rules, or all its
	// rules were replaced.
	OutcomeNoLimit
	// OutcomeUnlimited: the node is `unlimited`.
	OutcomeUnlimited
	// OutcomeOK: the rules admitted the cost.
	OutcomeOK
	// OutcomeOverLimit: a rule denied the cost (Shadow says whether the
	// status was nevertheless reported OK).
	OutcomeOverLimit
	// OutcomeInvalid: the descriptor was malformed (too many entries, an
	// empty key, a key or value over the size bound, an override with an
	// unknown unit) and was answered OVER_LIMIT without being decided.
	OutcomeInvalid
)

var outcomeNames = [...]string{"unknown_domain", "no_limit", "unlimited", "ok", "over_limit", "invalid"}

// String returns a metric-friendly name of o.
func (o Outcome) String() string {
	if o < 0 || int(o) >= len(outcomeNames) {
		return "outcome(?)"
	}
	return outcomeNames[o]
}

// DescriptorEvent describes one request descriptor's outcome.
type DescriptorEvent struct {
	// Domain is the request's domain.
	Domain string
	// Entries are the request descriptor's entries (valid only during the
	// call).
	Entries []descriptor.Entry
	// Node is the matched config node; nil for an unknown domain, no match,
	// or a request limit override.
	Node *descriptor.Node
	// Override is true when the descriptor carried a `limit` override.
	Override bool
	// OverrideClamped is true when that override's period was longer than
	// MaxOverridePeriod, so it was decided as requests_per_unit per YEAR.
	OverrideClamped bool
	// Outcome is what happened.
	Outcome Outcome
	// Shadow is true when an over-limit status was reported OK because of
	// the node's shadow_mode.
	Shadow bool
	// Cost is what the descriptor asked (zero for unknown domain, no limit
	// and unlimited).
	Cost limit.Cost
	// Rules are the rules decided (valid only during the call).
	Rules []limit.Rule
	// Decision is the backend's decision when Outcome is OK or OverLimit
	// and the backend answered.
	Decision limit.Decision
	// BackendErr is the backend's error when it could not decide; the
	// outcome then comes from FailureMode.
	BackendErr error
	// FailureMode is the domain's failure mode, meaningful when BackendErr
	// is set.
	FailureMode descriptor.FailureMode
}

// RequestEvent describes a finished ShouldRateLimit call.
type RequestEvent struct {
	// Domain is the request's domain ("" for a nil request).
	Domain string
	// Code is the overall code returned (UNKNOWN when Err is set).
	Code rlsv3.RateLimitResponse_Code
	// ShadowForced is true when the global shadow mode turned an
	// OVER_LIMIT overall code into OK.
	ShadowForced bool
	// Err is the gRPC status error returned, if any.
	Err error
	// Refused names the bound the request was refused for
	// (RefusedDescriptors, RefusedRules, RefusedDomainBytes), with Err; "" otherwise.
	Refused string
}
