package backend

import (
	"context"
	"math"
	"slices"
)

// QuotaStore keeps the state of the Rate Limit Quota Service (RLQS): for
// each quota bucket and rule, the demand and the granted share of every
// client (one Envoy stream) reporting it, and, for window rules, what all
// clients used in the current window. Several sluice instances sharing one
// store agree on the shares, so that the shares of all clients reporting a
// bucket sum to at most the rule's limit.
//
// A QuotaStore is safe for concurrent use.
type QuotaStore interface {
	// Share records one client's report of one bucket and returns, per
	// rule in the order given, the share granted to it. All of
	// req.Rules' keys belong to one bucket (they share a hash tag).
	Share(ctx context.Context, req QuotaRequest) ([]QuotaShare, error)
	// Leave drops member's entries from the given keys (a stream that
	// ended, a bucket abandoned), so that its share goes to the others.
	Leave(ctx context.Context, member string, keys []string) error
	// QuotaKey names the state of one rule (a limit.Rule ID) for one
	// bucket (a descriptor identity, pkg/identity). Keys of one bucket
	// share a hash tag.
	QuotaKey(bucket, rule string) string
}

// QuotaRequest is one client's report of one bucket, for every rule the
// bucket's node carries.
type QuotaRequest struct {
	// Member names the client: unique per stream, across instances.
	Member string
	// Now is the instant of the report, in microseconds since the epoch.
	Now int64
	// Stale is how long, in microseconds, a member's entry counts after
	// its last report: older entries are dropped, their share freed.
	Stale int64
	// Rules are the bucket's rules: one entry each.
	Rules []QuotaRule
}

// QuotaRule is one rule's part of a QuotaRequest.
type QuotaRule struct {
	// Key names the rule's state for this bucket (every rule of a bucket
	// shares one hash tag). It holds every member's entry and the window's
	// usage.
	Key string
	// Demand is the member's demand, in units of cost per period of the
	// rule (what it would admit in one period at its reported rate).
	Demand float64
	// Limit is the rule's limit per period: the shares sum to at most it.
	Limit uint64
	// Window is the start of the current window (microseconds) for window
	// rules, whose usage is counted per window; 0 for rate rules, which
	// keep no usage.
	Window int64
	// Used is what the member reports it admitted since its last report,
	// added to the window's usage (window rules only).
	Used uint64
	// Keep is the instant (microseconds) until which the store keeps the
	// key after this report: the window's end for window rules (so that
	// its usage outlives a pause in reports), Now+Stale at least.
	Keep int64
}

// QuotaShare is the store's answer for one rule of a QuotaRequest.
type QuotaShare struct {
	// Share is the part of Limit granted to the member: at most its fair
	// target (FairTarget) and at most what the other members' shares leave.
	Share uint64
	// Used is the window's usage by all members after this report (window
	// rules; 0 for rate rules).
	Used uint64
	// Mine is the member's own usage in the window after this report
	// (window rules; 0 for rate rules).
	Mine uint64
	// Members counts the live members reporting the bucket, this one
	// included.
	Members int
	// Demand is the sum of the live members' demands, this one's included.
	Demand float64
}

// FairTarget returns the share of limit that max-min fairness over demands
// gives to demands[self]: the limit is filled from the smallest demand up,
// each member getting at most its demand and at most an equal part of what
// is left; what no demand takes is split equally between all members, so
// that every member has room to grow. The targets of all members sum to
// limit. Demands below zero count as zero.
//
// The Redis store computes the same in Lua (pkg/backend/redis, quota.lua);
// pkg/backend/backendtest holds both to one contract.
func FairTarget(demands []float64, self int, limit uint64) float64 {
	n := len(demands)
	if n == 0 || self < 0 || self >= n {
		return 0
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch da, db := max(demands[a], 0), max(demands[b], 0); {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return a - b
	})
	left := float64(limit)
	var mine float64
	for k, i := range order {
		fair := left / float64(n-k)
		got := math.Min(max(demands[i], 0), fair)
		left -= got
		if i == self {
			mine = got
		}
	}
	return mine + left/float64(n)
}
