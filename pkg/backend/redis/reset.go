package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

var _ backend.Resetter = (*Backend)(nil)

// resetScript forgets rules' state for one descriptor in one atomic step:
// it drops the records of the rule ids in ARGV from the counter string
// KEYS[1] (keeping the other rules' records and the key's TTL, and
// deleting the key when nothing is left) and deletes the sliding-log keys
// KEYS[2..]. A counter key of another type is not sluice's and is left
// alone. It returns how many records and keys it removed.
var resetScript = goredis.NewScript(`
local removed = 0
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  local drop = {}
  for i = 1, #ARGV do drop[ARGV[i]] = true end
  local kept = {}
  for rec in string.gmatch(redis.call('GET', KEYS[1]), '[^|]+') do
    if drop[string.match(rec, '^[^ ]*')] then
      removed = removed + 1
    else
      kept[#kept + 1] = rec
    end
  end
  if #kept == 0 then
    redis.call('DEL', KEYS[1])
  elseif removed > 0 then
    redis.call('SET', KEYS[1], table.concat(kept, '|'), 'KEEPTTL')
  end
end
for i = 2, #KEYS do
  removed = removed + redis.call('DEL', KEYS[i])
end
return removed
`)

// Reset forgets the state rules keep for identity with one script call on
// the descriptor's node (all its keys share one hash tag), so it is atomic
// with respect to the decide script. Records of other rule ids in the
// counter key are kept.
func (b *Backend) Reset(ctx context.Context, identity string, rules []limit.Rule) error {
	if err := checkIdentity(identity); err != nil {
		return fmt.Errorf("redis reset: %w", err)
	}
	keys := []string{CounterKey(b.opts.KeyPrefix, identity)}
	var ids []any
	seen := map[string]bool{}
	for _, r := range rules {
		if err := checkRule(r); err != nil {
			return fmt.Errorf("redis reset: %w", err)
		}
		id := r.ID()
		if seen[id] {
			continue
		}
		seen[id] = true
		if k := Key(b.opts.KeyPrefix, identity, r); k != keys[0] {
			keys = append(keys, k)
			continue
		}
		ids = append(ids, id)
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	if err := resetScript.Run(ctx, b.client, keys, ids...).Err(); err != nil {
		return fmt.Errorf("redis reset of %d rules: %w: %w", len(rules), backend.ErrUnavailable, err)
	}
	return nil
}
