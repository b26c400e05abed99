package service

import (
	"fmt"
	"math"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// MaxCost is the largest cost a descriptor can ask: larger hits_addend
// values are clamped to it. 2^53 is the largest integer every backend holds
// exactly (Lua numbers are float64), and no limit is anywhere near it.
const MaxCost = 1 << 53

// validate checks what makes req malformed as a whole: no request, no or
// an oversized domain, no descriptors or too many. A request failing it
// gets InvalidArgument. What is wrong with one descriptor only is
// invalidDescriptor's: that descriptor alone is answered OVER_LIMIT.
// A request refused for a bound (not for being malformed) also returns
// the bound's reason (RefusedDescriptors, RefusedDomainBytes), "" otherwise.
// The bound on rules is checkRules', once the descriptors are matched.
func (s *Service) validate(req *rlsv3.RateLimitRequest) (string, error) {
	b := &s.opts.Bounds
	if req == nil {
		return "", status.Error(codes.InvalidArgument, "rate limit request must not be null")
	}
	if req.Domain == "" {
		return "", status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.Domain) > b.MaxEntryLen {
		return RefusedDomainBytes, status.Errorf(codes.InvalidArgument, "rate limit domain is %d bytes long, more than the limit of %d", len(req.Domain), b.MaxEntryLen)
	}
	if len(req.Descriptors) == 0 {
		return "", status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if b.MaxDescriptors > 0 && len(req.Descriptors) > b.MaxDescriptors {
		return RefusedDescriptors, status.Errorf(codes.InvalidArgument, "rate limit request has %d descriptors, more than the limit of %d (SLUICE_MAX_DESCRIPTORS)", len(req.Descriptors), b.MaxDescriptors)
	}
	return "", nil
}

// The reasons a request is refused for a bound, in RequestEvent.Refused
// and the log: Envoy passes a request whose rate-limit call fails (its
// default failure_mode_deny is false), so each refusal is a request no
// limit applied to, and an operator must see why.
const (
	// RefusedDescriptors: more descriptors than Bounds.MaxDescriptors.
	RefusedDescriptors = "descriptors"
	// RefusedDomainBytes: a domain longer than Bounds.MaxEntryLen.
	RefusedDomainBytes = "domain_bytes"
	// RefusedRules: descriptors asking for more rules than
	// Bounds.MaxRequestRules.
	RefusedRules = "rules"
)

// invalidDescriptor says what is wrong with descriptor i of a request, or
// "" when nothing is. Envoy passes a request whose rate-limit call fails
// (its default failure_mode_deny is false), so refusing the whole request
// for one bad descriptor would let a client skip every limit by making one
// descriptor bad (an oversized header value, say): the caller answers the
// bad descriptor OVER_LIMIT instead and decides the others. maxEntries
// is the bound on entries: Bounds.MaxEntries, or the domain's depth when
// that is more (a node configured deeper must be reachable).
func (s *Service) invalidDescriptor(i int, d *ratelimitv3.RateLimitDescriptor, maxEntries int) string {
	b := &s.opts.Bounds
	if d == nil {
		return fmt.Sprintf("descriptor %d must not be null", i)
	}
	if len(d.Entries) > maxEntries {
		return fmt.Sprintf("descriptor %d has %d entries, more than the limit of %d", i, len(d.Entries), maxEntries)
	}
	for j, e := range d.Entries {
		switch {
		case e == nil:
			return fmt.Sprintf("descriptor %d entry %d must not be null", i, j)
		case e.Key == "":
			return fmt.Sprintf("descriptor %d entry %d has an empty key", i, j)
		case len(e.Key) > b.MaxEntryLen:
			return fmt.Sprintf("descriptor %d entry %d key is %d bytes long, more than the limit of %d", i, j, len(e.Key), b.MaxEntryLen)
		case len(e.Value) > b.MaxEntryLen:
			return fmt.Sprintf("descriptor %d entry %d value is %d bytes long, more than the limit of %d", i, j, len(e.Value), b.MaxEntryLen)
		}
	}
	if o := d.Limit; o != nil {
		if _, ok := unitFromEnvoy(int32(o.Unit)); !ok {
			return fmt.Sprintf("descriptor %d limit override has invalid unit %d (%s)", i, int32(o.Unit), o.Unit)
		}
	}
	return ""
}

// costOf returns what descriptor d asks: its own hits_addend when set (0 is
// a peek), otherwise the request's (0 meaning 1), clamped to MaxCost.
func costOf(d *ratelimitv3.RateLimitDescriptor, requestAddend uint32) limit.Cost {
	var n uint64
	switch {
	case d.HitsAddend != nil:
		n = d.HitsAddend.Value
	case requestAddend == 0:
		n = 1
	default:
		n = uint64(requestAddend)
	}
	if n > MaxCost {
		n = MaxCost
	}
	return limit.Cost{N: n, Refund: d.IsNegativeHits}
}

// envoyUnits pairs Envoy's unit numbers with limit's units: RateLimitUnit
// numbers SECOND to YEAR 1-6, and the response enum's, which are the same
// and add WEEK = 7. UNKNOWN (0) and unlisted numbers have no unit.
var envoyUnits = []struct {
	envoy rlsv3.RateLimitResponse_RateLimit_Unit
	unit  limit.Unit
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, limit.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, limit.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, limit.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, limit.Day},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, limit.Month},
	{rlsv3.RateLimitResponse_RateLimit_YEAR, limit.Year},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, limit.Week},
}

// unitFromEnvoy maps Envoy's RateLimitUnit (and the response enum, which
// adds WEEK = 7) to a limit.Unit. UNKNOWN and unlisted values fail.
func unitFromEnvoy(u int32) (limit.Unit, bool) {
	for _, p := range envoyUnits {
		if int32(p.envoy) == u {
			return p.unit, true
		}
	}
	return limit.UnitUnknown, false
}

// unitToEnvoy maps a limit.Unit to the response enum.
func unitToEnvoy(u limit.Unit) rlsv3.RateLimitResponse_RateLimit_Unit {
	for _, p := range envoyUnits {
		if p.unit == u {
			return p.envoy
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// MaxOverridePeriod is the longest period a request `limit` override is
// decided with: one YEAR (365 days), the longest an override can have in
// envoyproxy/ratelimit, which ignores unit_multiplier. A fixed window's
// key lives until its window ends, so an override's period is how long the
// state it creates lives: without this bound one request could create keys
// that live for decades (docs/decisions/0094).
const MaxOverridePeriod = 365 * 24 * time.Hour

// overrideRule builds the rule of a request `limit` override: a fixed
// window of requests_per_unit per unit_multiplier×unit, or per unit when
// ignoreMultiplier. A period longer than MaxOverridePeriod is decided, and
// echoed, as requests_per_unit per YEAR; clamped says so. The unit has
// been validated.
func overrideRule(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride, ignoreMultiplier bool) (r limit.Rule, clamped bool) {
	u, _ := unitFromEnvoy(int32(o.Unit))
	m := uint32(1)
	if !ignoreMultiplier && o.UnitMultiplier != nil && o.UnitMultiplier.Value > 0 {
		m = o.UnitMultiplier.Value
	}
	r = limit.Rule{Algorithm: limit.FixedWindow, Unit: u, Multiplier: m, Limit: uint64(o.RequestsPerUnit)}
	if r.Period() > MaxOverridePeriod {
		r.Unit, r.Multiplier, clamped = limit.Year, 1, true
	}
	return r, clamped
}

// clamp32 converts n to uint32, saturating.
func clamp32(n uint64) uint32 {
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}
