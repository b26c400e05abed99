package memory

import (
	"context"
	"hash/maphash"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

var _ backend.Resetter = (*Backend)(nil)

// Reset forgets the state rules keep for identity, under the identity's
// shard lock, so it is ordered with every check of that identity. The
// entry goes away when no other rule's state is left in it.
func (b *Backend) Reset(ctx context.Context, identity string, rules []limit.Rule) error {
	if b.closed.Load() {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := &b.shards[maphash.String(b.seed, identity)&b.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entries[identity]
	if e == nil {
		return nil
	}
	kept := e.rules[:0]
	for _, rs := range e.rules {
		if !names(rules, rs.key) {
			kept = append(kept, rs)
		}
	}
	clear(e.rules[len(kept):])
	e.rules = kept
	if len(kept) == 0 {
		sh.remove(e)
	}
	return nil
}
