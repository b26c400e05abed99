package denycache

import (
	"context"
	"hash/maphash"

	"github.com/sluice-rl/sluice/pkg/backend"
)

var _ backend.TogetherDecider = (*Backend)(nil)

// DecideTogether passes the whole request to the inner backend's
// DecideTogether (backend.TogetherDecider), without answering any check
// from the cache: a cached denial of one check would still leave the
// others to be peeked in the store. It learns from the answers as Decide
// does, except that it remembers no denial of an identity that an earlier
// check of the request also named (that denial counted the earlier check's
// cost, which was not charged). It declines when the inner backend has no
// DecideTogether or declines.
func (b *Backend) DecideTogether(ctx context.Context, checks []backend.Check) ([]backend.Result, bool) {
	td, ok := b.inner.(backend.TogetherDecider)
	if !ok {
		return nil, false
	}
	if b.closed.Load() || ctx.Err() != nil {
		return td.DecideTogether(ctx, checks)
	}
	now := b.now()
	var buf [maxInlinePending]pending
	passed := buf[:0]
	for i := range checks {
		h := maphash.String(b.seed, checks[i].Identity)
		passed = append(passed, pending{i: i, hash: h, gen: b.gens[stripe(h)].Load()})
	}
	res, ok := td.DecideTogether(ctx, checks)
	if !ok {
		return nil, false
	}
	if n := len(res); n < len(checks) { // a broken inner backend: never return fewer results
		res = append(res, make([]backend.Result, len(checks)-n)...)
		for i := n; i < len(checks); i++ {
			res[i].Err = errShort
		}
	}
	for k, p := range passed {
		if !res[p.i].Allowed && passedBefore(checks, passed[:k], checks[p.i].Identity) {
			continue
		}
		b.learn(&checks[p.i], &res[p.i], p, now)
	}
	return res, true
}
