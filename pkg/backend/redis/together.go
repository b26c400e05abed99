package redis

import (
	"context"

	"github.com/sluice-rl/sluice/pkg/backend"
)

var _ backend.TogetherDecider = (*Backend)(nil)

// DecideTogether decides a request's checks as one
// (backend.TogetherDecider) when they all live on one Redis node: on a
// standalone server or a Sentinel master, in the one batched script call
// Decide sends anyway, with the batch's together flag (the script decides
// every check before writing anything and writes only when none is denied;
// otherwise it decides the others as peeks). A request with one check is decided by
// Decide, atomic on its own. On a cluster, where each check's keys hash to
// their own slot and a script may not span slots, it declines (ok false)
// a request of several checks, and the caller refunds instead.
func (b *Backend) DecideTogether(ctx context.Context, checks []backend.Check) ([]backend.Result, bool) {
	n := 0
	for i := range checks {
		if len(checks[i].Rules) > 0 {
			n++
		}
	}
	if n <= 1 {
		return b.decide(ctx, checks, false), true
	}
	if b.cluster != nil {
		return nil, false
	}
	return b.decide(ctx, checks, true), true
}
