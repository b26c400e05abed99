package backend

import "context"

// TogetherDecider is implemented by a backend that can decide a request's
// checks as one: if any check is denied, none of them consumes anything,
// with no moment at which another caller sees the others charged. The
// service uses it, when the backend has it, for the request-level
// all-or-nothing of STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; other
// backends, and calls a backend declines, get Decide followed by
// compensating refunds.
type TogetherDecider interface {
	// DecideTogether decides checks like Decide, except that when any
	// check is denied, no check consumes anything: every check's decision
	// is that of a peek (cost 0) and the denied ones keep their denial.
	// Two kinds of check keep their effect even then, as they would under
	// Decide followed by refunds: a refund (Cost.Refund) is applied, and a
	// charged cost (Cost.Charge) that is itself denied is charged. Results
	// are in check order, one per check; a check that failed carries Err,
	// and the others are then decided as if the failed one were absent.
	//
	// ok is false when the backend cannot decide these checks as one (a
	// Redis backend whose checks live on different nodes, a wrapper around
	// a backend without the method): then nothing was decided or
	// consumed, results is nil, and the caller must use Decide.
	DecideTogether(ctx context.Context, checks []Check) (results []Result, ok bool)
}
