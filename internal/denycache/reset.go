package denycache

import (
	"context"
	"fmt"
	"hash/maphash"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

var _ backend.Resetter = (*Backend)(nil)

// Reset resets identity's rules in the inner backend, which must be a
// backend.Resetter, and forgets every denial remembered for identity
// here, whatever its rules. The generation moves before the inner reset,
// so a denial decided before the reset and learnt after it is not kept.
func (b *Backend) Reset(ctx context.Context, identity string, rules []limit.Rule) error {
	r, ok := b.inner.(backend.Resetter)
	if !ok {
		return fmt.Errorf("denial cache: the inner backend %T cannot reset state", b.inner)
	}
	b.Forget(identity)
	err := r.Reset(ctx, identity, rules)
	b.Forget(identity)
	if b.announce != nil {
		b.announce(identity) // even after an error: part of it may have happened
	}
	return err
}

// Forget drops every denial remembered for identity, as a refund does:
// the next check of identity reaches the inner backend. It is the hook for
// whatever changes identity's state behind this cache's back: another
// instance's refund or reset, announced over the store (see
// Options.Announce), or an operator's reset.
func (b *Backend) Forget(identity string) {
	h := maphash.String(b.seed, identity)
	b.gens[stripe(h)].Add(1)
	b.shard(h).invalidate(identity)
}

// ForgetAll drops every denial remembered, for when announcements may
// have been lost (the channel carrying them was reconnected).
func (b *Backend) ForgetAll() {
	for i := range b.gens {
		b.gens[i].Add(1)
	}
	for i := range b.shards {
		b.shards[i].clear()
	}
}
