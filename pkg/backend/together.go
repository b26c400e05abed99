package backend

import "context"

// TogetherDecider is implemented by a backend that can decide a request's
// checks as one: if any check is denied, none of them consumes anything,
// with no moment at which another caller sees the others charged. The
// service uses it, when the backend has it, for the request-level
// all-or-nothing of STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; other
// backends get Decide followed by compensating refunds.
type TogetherDecider interface {
	// DecideTogether decides checks like Decide, except that when any
	// check is denied, every check's decision is that of a peek (cost 0:
	// nothing consumed) and the denied ones stay denied. Results are in
	// check order, one per check; a check that failed carries Err, and the
	// others are then decided as if the failed one were absent.
	DecideTogether(ctx context.Context, checks []Check) []Result
}
