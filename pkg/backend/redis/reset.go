package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

var _ backend.Resetter = (*Backend)(nil)

// resetScript is pkg/scripts' reset script, run with EVALSHA (EVAL when
// Redis has not cached it).
var resetScript = goredis.NewScript(scripts.ResetScript().Source)

// Reset forgets the state rules keep for identity with one script call on
// the descriptor's node (all its keys share one hash tag), so it is atomic
// with respect to the decide script: the rules' records, the sliding logs.
// Records of other rule ids in the counter key are kept.
func (b *Backend) Reset(ctx context.Context, identity string, rules []limit.Rule) error {
	keys, ids, err := resetArgs(b.opts.KeyPrefix, identity, rules)
	if err != nil {
		return fmt.Errorf("redis backend: reset: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	if err := resetScript.Run(ctx, b.client, keys, ids...).Err(); err != nil {
		return fmt.Errorf("redis backend: reset of %d rules: %w: %w", len(rules), backend.ErrUnavailable, err)
	}
	return nil
}
