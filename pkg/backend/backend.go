// Package backend defines the Backend interface every store of rate-limit
// state implements, and the Check and Result types that cross it.
//
// A backend owns state and time: it reads its clock (or Redis's), loads each
// rule's state, applies pkg/limit's semantics and stores the result. It knows
// nothing of gRPC, Envoy or configuration files, and it does not invent
// semantics: what a rule admits is pkg/limit's to say. The behaviour every
// backend must show is written once, in pkg/backend/backendtest.
//
// The backends: pkg/backend/memory (in-process) and pkg/backend/redis
// (Redis standalone, Sentinel or Cluster, through the scripts of
// pkg/scripts).
package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// Check asks for one descriptor's rules to be decided together. The zero
// Check has no rules: it is allowed with Binding -1 and touches no state.
type Check struct {
	// Identity names the descriptor's state: the output of
	// identity.Encode. Two checks with the same Identity and the same rule
	// IDs share state.
	Identity string
	// Rules are decided together: all admit the cost, or none consumes.
	// They are shared with the loaded config: a backend must treat them as
	// read-only.
	Rules []limit.Rule
	// Cost is what the request asks.
	Cost limit.Cost
}

// MaxOtherStates bounds the states a backend keeps for one identity beside
// those of the rules a check names, so the work of a check is bounded by
// its own rules whatever earlier checks sent (a limit override with a new
// unit_multiplier on every request names a new rule each time). After
// deciding a check, when more than MaxOtherStates states of its identity
// that it did not name are still live (sliding logs, which a store may keep
// apart, not counted), a backend keeps the MaxOtherStates
// that expire first (limit.State.Expires; ties: the smaller rule ID) and
// forgets the others, which restart empty. Legitimate sharing (a limit
// override beside the configured rules, instances on an older
// configuration during a rollout) stays far below it.
const MaxOtherStates = 16

// CountsBeside reports whether one of rules keeps its state beside other
// rules' (a rule with a period that is not a sliding log): only such a
// check trims the states beyond MaxOtherStates; a check of sliding logs
// alone never reads them.
func CountsBeside(rules []limit.Rule) bool {
	for _, r := range rules {
		if r.PeriodMicros() > 0 && r.Algorithm != limit.SlidingLog {
			return true
		}
	}
	return false
}

// SlidingLogWeight is what one sliding log rule weighs in Weight: its
// decision searches its sorted set by rank (a binary search of O(log n)
// commands, about 15 for 20,000 entries, each O(log n) itself; a refund
// searches twice), where any other rule reads and writes a few fields of
// one key. Measured on redis-server 7.0 (docs/operations.md, "Bounded
// work per request"), a denial on a full 20,000-entry log costs Redis
// about as much CPU as 20 fixed windows, a refund about 42; 64 leaves room
// for logs that charged costs grew to millions of entries.
const SlidingLogWeight = 64

// Weight is what deciding rules costs a store, in units of one rule of
// another algorithm: 1 per rule, SlidingLogWeight per sliding log. It
// bounds the work of one request (the service's per-request bound) and of
// one Redis call (the Redis backend's batches), so that neither holds a
// store for long however the rules are mixed.
func Weight(rules []limit.Rule) int {
	w := 0
	for i := range rules {
		if rules[i].Algorithm == limit.SlidingLog {
			w += SlidingLogWeight
		} else {
			w++
		}
	}
	return w
}

// Result is the answer to one Check. The zero Result carries the zero
// Decision and no error; backends always fill one of the two.
type Result struct {
	// Decision is valid when Err is nil.
	limit.Decision
	// Err reports why this check could not be decided (the store is
	// unreachable, timed out, ...). Errors wrap ErrUnavailable when retrying
	// later may succeed.
	Err error
}

// ErrUnavailable marks errors caused by the store being unreachable or too
// slow: the service turns them into gRPC Unavailable or applies the domain's
// failure mode.
var ErrUnavailable = errors.New("backend unavailable")

// ErrCircuitOpen marks a check failed at once by a backend's circuit
// breaker, without trying the store, because the store (or the part of it
// the check needed) kept failing. It wraps ErrUnavailable: errors.Is
// matches both, so callers that only know ErrUnavailable treat it alike,
// and metrics can tell fast failures from real attempts.
var ErrCircuitOpen = fmt.Errorf("%w: circuit open", ErrUnavailable)

// Backend decides checks against some store of state. Implementations are
// safe for concurrent use: the service calls Decide from every request's
// goroutine at once.
type Backend interface {
	// Decide decides every check, each one atomically and independently of
	// the others, and returns one Result per check in the same order. It
	// never returns fewer results than checks. Checks with no rules get an
	// allowed Decision with Binding -1.
	Decide(ctx context.Context, checks []Check) []Result
	// Ping reports whether the store is reachable now.
	Ping(ctx context.Context) error
	// Close releases the backend's resources. Decide must not be called
	// after Close.
	Close() error
}
