package denycache

import (
	"context"
	"hash/maphash"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

var _ backend.TogetherDecider = (*Backend)(nil)

// DecideTogether answers a request decided together (backend.TogetherDecider)
// from the cache when a remembered denial answers every one of its checks:
// the store would then deny the request as a whole, so none of its checks
// would consume anything and each would keep its own denial, which is the
// answer remembered for it. Otherwise the whole request goes to the inner
// backend's DecideTogether: the answers of the checks without a remembered
// denial (a peek's decision when their cost fits, their own denial when it
// does not), and the refunds and charged costs among them, are the store's
// to give, and answering only the denied checks here would save no round
// trip. It learns from the store's answers as Decide does, except that it
// remembers no denial of an identity that an earlier check of the request
// also named (that denial counted the earlier check's cost, which was not
// charged). It declines when the inner backend has no DecideTogether or
// declines.
func (b *Backend) DecideTogether(ctx context.Context, checks []backend.Check) ([]backend.Result, bool) {
	td, ok := b.inner.(backend.TogetherDecider)
	if !ok {
		return nil, false
	}
	if b.closed.Load() || ctx.Err() != nil {
		return td.DecideTogether(ctx, checks)
	}
	now := b.now()
	if res, ok := b.answerAll(checks, now); ok {
		return res, true
	}
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

// answerAll answers checks from the cache when a remembered denial answers
// every one of them, counting each as a hit. Otherwise it answers nothing
// and counts every check that a denial could have answered (a cost, no
// refund, no charge, some rules) as a miss.
func (b *Backend) answerAll(checks []backend.Check, now limit.Micros) ([]backend.Result, bool) {
	var buf [maxInlinePending]variant
	found := buf[:0]
	outcomes := 0
	for i := range checks {
		c := &checks[i]
		if !cacheable(c) {
			break
		}
		v, ok := b.shard(maphash.String(b.seed, c.Identity)).find(c.Identity, c.Rules, c.Cost.N, now, false)
		if !ok {
			break
		}
		found = append(found, v)
		outcomes += len(c.Rules)
	}
	if len(found) < len(checks) || len(checks) == 0 {
		for i := range checks {
			if c := &checks[i]; cacheable(c) {
				b.shard(maphash.String(b.seed, c.Identity)).countMiss()
			}
		}
		return nil, false
	}
	results := make([]backend.Result, len(checks))
	out := make([]limit.Outcome, outcomes)
	for i := range checks {
		c := &checks[i]
		k := len(c.Rules)
		results[i].Decision = found[i].answer(c.Cost.N, now, out[:k:k])
		out = out[k:]
		b.shard(maphash.String(b.seed, c.Identity)).countHit()
	}
	return results, true
}
