package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/pkg/backend"
)

// quotaSource is the Rate Limit Quota Service's script (quota.lua).
//
//go:embed quota.lua
var quotaSource string

// quotaScript runs quotaSource by EVALSHA, loading it on NOSCRIPT.
var quotaScript = goredis.NewScript(quotaSource)

// QuotaKeyPrefix is what every Rate Limit Quota Service key starts with
// after Options.KeyPrefix: <prefix>rlqs:{<bucket identity>}:<rule id>.
const QuotaKeyPrefix = "rlqs:"

// QuotaStore is the Redis store of Rate Limit Quota Service state
// (backend.QuotaStore): every sluice instance on the same Redis (standalone,
// Sentinel or Cluster) and key prefix shares the clients' demands and
// shares. One report of one bucket is one script call on the bucket's slot.
type QuotaStore struct {
	b *Backend
}

var _ backend.QuotaStore = (*QuotaStore)(nil)

// QuotaStore returns the Rate Limit Quota Service store on b's Redis.
func (b *Backend) QuotaStore() *QuotaStore { return &QuotaStore{b: b} }

// QuotaKey returns the key of one rule's state for one bucket:
// <prefix>rlqs:{<bucket>}:<rule>. bucket is a descriptor identity
// (pkg/identity); the braces make every rule of a bucket share a slot.
func (s *QuotaStore) QuotaKey(bucket, rule string) string {
	return s.b.opts.KeyPrefix + QuotaKeyPrefix + "{" + bucket + "}:" + rule
}

// Share implements backend.QuotaStore.
func (s *QuotaStore) Share(ctx context.Context, req backend.QuotaRequest) ([]backend.QuotaShare, error) {
	if len(req.Rules) == 0 {
		return nil, nil
	}
	keys := make([]string, len(req.Rules))
	args := make([]any, 0, 3+5*len(req.Rules))
	args = append(args, req.Member, req.Now, req.Stale)
	for i, r := range req.Rules {
		keys[i] = r.Key
		keep := max(r.Keep, req.Now+req.Stale) / 1000
		args = append(args, strconv.FormatFloat(r.Demand, 'g', -1, 64), r.Limit, r.Window, r.Used, keep+1)
	}
	ctx, cancel := context.WithTimeout(ctx, s.b.opts.Timeout)
	defer cancel()
	v, err := quotaScript.Run(ctx, s.b.client, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("redis quota script: %w", err)
	}
	if len(v) != 5*len(req.Rules) {
		return nil, fmt.Errorf("redis quota script: %d values for %d rules", len(v), len(req.Rules))
	}
	out := make([]backend.QuotaShare, len(req.Rules))
	for i := range out {
		share, ok1 := v[5*i].(int64)
		used, ok2 := v[5*i+1].(int64)
		mine, ok5 := v[5*i+2].(int64)
		n, ok3 := v[5*i+3].(int64)
		sum, ok4 := v[5*i+4].(string)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
			return nil, errors.New("redis quota script: malformed reply")
		}
		d, err := strconv.ParseFloat(sum, 64)
		if err != nil {
			return nil, fmt.Errorf("redis quota script: demand %q: %w", sum, err)
		}
		out[i] = backend.QuotaShare{Share: uint64(max(share, 0)), Used: uint64(max(used, 0)), Mine: uint64(max(mine, 0)), Members: int(n), Demand: d}
	}
	return out, nil
}

// Leave implements backend.QuotaStore: one HDEL per key (keys of one
// bucket share a slot, but a caller may name several buckets).
func (s *QuotaStore) Leave(ctx context.Context, member string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.b.opts.Timeout)
	defer cancel()
	var errs []error
	for _, k := range keys {
		if err := s.b.client.HDel(ctx, k, "m"+member).Err(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("redis quota leave: %w", err)
	}
	return nil
}
