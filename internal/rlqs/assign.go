package rlqs

import (
	"math"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// isWindow reports whether r counts cost per window: the fixed window and
// the two sliding ones. The service counts all three in fixed windows of
// the rule's period (what every client used together), and denies until
// the window's end when the window is used up.
func isWindow(r limit.Rule) bool { return !r.Algorithm.IsMeter() }

// grant is what one rule allows one client until its next report.
type grant struct {
	// deny: nothing until denyUntil (µs; 0 means for the assignment TTL).
	deny      bool
	denyUntil int64
	// The token bucket otherwise: perFill tokens every fill (whole
	// seconds), at most max.
	perFill, max uint32
	fill         int64
}

// ruleGrant turns one rule's share into what it grants: a token bucket of
// the share per period, whose capacity is the share of the rule's burst
// (rate rules) or what is left of the client's share in the window, at
// most what is left of the window (window rules); a denial when the share
// or the capacity is zero, or, until the window's end, when all clients
// together used the window up.
func ruleGrant(r limit.Rule, s backend.QuotaShare, now int64) grant {
	start, end := r.Window(now)
	period := (end - start) / 1_000_000
	if period <= 0 || r.Limit == 0 {
		return grant{deny: true}
	}
	if isWindow(r) && s.Used >= r.Limit {
		return grant{deny: true, denyUntil: end}
	}
	if s.Share == 0 {
		return grant{deny: true}
	}
	var capacity float64
	if isWindow(r) {
		// What is left of the client's own share in this window, and of
		// the window: a fresh token bucket starts full, so granting the
		// whole share at every report would grant it again each time.
		if s.Mine >= s.Share {
			return grant{deny: true}
		}
		capacity = float64(min(s.Share-s.Mine, r.Limit-s.Used))
	} else {
		capacity = max(1, math.Floor(float64(s.Share)*float64(r.Capacity())/float64(r.Limit)))
	}
	if capacity < 1 {
		return grant{deny: true}
	}
	return grant{perFill: clamp32(float64(s.Share)), max: clamp32(capacity), fill: period}
}

// clamp32 is v as a uint32, at most math.MaxUint32.
func clamp32(v float64) uint32 { return uint32(min(v, math.MaxUint32)) }

// tightest combines the grants of a node's rules: any denial denies (until
// the latest end among the rules that deny until a window's end); else
// the slowest rate binds, with the smallest capacity.
func tightest(gs []grant) grant {
	var out grant
	first := true
	for _, g := range gs {
		switch {
		case g.deny:
			out.deny, out.denyUntil = true, max(out.denyUntil, g.denyUntil)
		case first:
			out.perFill, out.fill, out.max = g.perFill, g.fill, g.max
			first = false
		case uint64(g.perFill)*uint64(out.fill) < uint64(out.perFill)*uint64(g.fill):
			out.perFill, out.fill, out.max = g.perFill, g.fill, min(g.max, out.max)
		default:
			out.max = min(out.max, g.max)
		}
	}
	return out
}

// action builds the BucketAction assigning g to bucket. A denial until a
// window's end lives until then (whole seconds, rounded up, as Envoy reads
// only the seconds); everything else lives ttl.
func (g grant) action(bucket *rlqspb.BucketId, now int64, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	live := int64(ttl / time.Second)
	var strategy *typev3.RateLimitStrategy
	if g.deny {
		strategy = blanket(typev3.RateLimitStrategy_DENY_ALL)
		if g.denyUntil > now {
			live = (g.denyUntil - now + 999_999) / 1_000_000
		}
	} else {
		strategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     g.max,
			TokensPerFill: wrapperspb.UInt32(g.perFill),
			FillInterval:  durationpb.New(time.Duration(g.fill) * time.Second),
		}}}
	}
	return assignment(bucket, strategy, &durationpb.Duration{Seconds: max(live, 1)})
}

// blanket is a blanket-rule strategy.
func blanket(rule typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
}

// assignment is a quota assignment action living ttl.
func assignment(bucket *rlqspb.BucketId, s *typev3.RateLimitStrategy, ttl *durationpb.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: bucket,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: ttl,
				RateLimitStrategy:    s,
			},
		},
	}
}

// allowAll is the assignment of unmatched and unlimited buckets: allow
// everything, for ttl. It is never sent without a ttl: Envoy's filter reads
// an unset assignment_time_to_live as 0 seconds, and expires it at once,
// although the proto says unset never expires.
func allowAll(bucket *rlqspb.BucketId, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return assignment(bucket, blanket(typev3.RateLimitStrategy_ALLOW_ALL), &durationpb.Duration{Seconds: max(int64(ttl/time.Second), 1)})
}

// abandon tells the client to forget bucket.
func abandon(bucket *rlqspb.BucketId) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId:     bucket,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}
}
