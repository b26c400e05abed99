package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

var _ backend.TogetherDecider = (*Backend)(nil)

// DecideTogether decides checks as one (backend.TogetherDecider): it holds
// the locks of every shard the checks touch, taken in shard order so that
// two such calls cannot deadlock, for the whole call. Under them it first
// decides every check on copies of the states (each check seeing what the
// checks before it would charge); when all are admitted it decides them
// for real, which gives the same answers, and when any is denied it
// decides the others as peeks and keeps the denials. No other caller sees
// a request's checks partly charged. It always decides (ok is true).
func (b *Backend) DecideTogether(ctx context.Context, checks []backend.Check) ([]backend.Result, bool) {
	results := make([]backend.Result, len(checks))
	if err := b.unavailable(ctx); err != nil {
		for i := range results {
			results[i].Err = err
		}
		return results, true
	}
	idx := make([]uint64, 0, len(checks))
	for i := range checks {
		if len(checks[i].Rules) > 0 {
			idx = append(idx, b.shardIndex(checks[i].Identity))
		}
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, j := range idx {
		b.shards[j].mu.Lock()
	}
	defer func() {
		for _, j := range slices.Backward(idx) {
			b.shards[j].mu.Unlock()
		}
	}()

	now := limit.MicrosOf(b.now())
	denied := b.trial(checks, now, results)
	for i := range checks {
		c := &checks[i]
		if denied && results[i].Allowed && !c.Cost.Refund {
			peek := *c
			peek.Cost = limit.Cost{}
			c = &peek
		} else if denied && !results[i].Allowed && !c.Cost.Charge {
			continue // keeps its trial denial; a denial consumes nothing
		}
		if len(c.Rules) == 0 {
			results[i].Decision = limit.Decide(nil, nil, now, c.Cost)
			continue
		}
		results[i].Decision = b.decideLocked(&b.shards[b.shardIndex(c.Identity)], c, now)
	}
	return results, true
}

// unavailable is the error every check gets when the backend cannot
// decide at all: after Close, or with ctx done.
func (b *Backend) unavailable(ctx context.Context) error {
	if b.closed.Load() {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory backend: %w", err)
	}
	return nil
}

// trialKey names one rule's state of one identity among trial copies.
type trialKey struct {
	identity string
	key      limit.StateKey
}

// trial decides every check on copies of the stored states, in order (a
// check sees what earlier checks of the call charged), writes each
// decision into results and reports whether any check was denied. The
// caller holds the locks of every shard the checks touch; nothing stored
// changes.
func (b *Backend) trial(checks []backend.Check, now limit.Micros, results []backend.Result) bool {
	copies := make(map[trialKey]*limit.State)
	denied := false
	for i := range checks {
		c := &checks[i]
		states := make([]*limit.State, len(c.Rules))
		for j, r := range c.Rules {
			k := trialKey{c.Identity, r.Key()}
			st := copies[k]
			if st == nil {
				st = b.stored(c.Identity, k.key, now)
				copies[k] = st
			}
			states[j] = st
		}
		results[i].Decision = limit.Decide(c.Rules, states, now, c.Cost)
		denied = denied || !results[i].Allowed
	}
	return denied
}

// stored returns a copy of identity's state under k as decideLocked would
// find it (a zero State when there is none or the entry has expired). The
// caller holds the identity's shard lock.
func (b *Backend) stored(identity string, k limit.StateKey, now limit.Micros) *limit.State {
	st := &limit.State{}
	e := b.shards[b.shardIndex(identity)].entries[identity]
	if e == nil || e.expiry <= now {
		return st
	}
	for j := range e.rules {
		if e.rules[j].key == k {
			*st = e.rules[j].state
			st.Log = slices.Clone(st.Log)
			break
		}
	}
	return st
}
