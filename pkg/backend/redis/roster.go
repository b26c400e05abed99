package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
)

// RosterKey is the sorted set, after the key prefix, in which the
// instances sharing a Redis list their admin listeners, so that any one
// of them can show the whole fleet. Each member is an address; its score
// is when the entry lapses, in Unix milliseconds of Redis's clock.
const RosterKey = "sluice:instances"

// Roster timing: an instance renews its entry every rosterEvery; an entry
// not renewed for rosterTTL (an instance that died without removing it)
// is no longer listed.
const (
	rosterEvery = 10 * time.Second
	rosterTTL   = 3 * rosterEvery
)

// Roster lists, in Redis, the admin listeners of the instances that share
// it: each instance's Run keeps its own entry fresh, Instances reads them
// all. The set is one key (one slot on a Cluster) that expires with its
// last entry.
type Roster struct {
	client goredis.UniversalClient
	key    string
	self   string
	log    *logrus.Entry
}

// NewRoster returns a Roster on b's Redis and key prefix, announcing self
// (an admin listener's address as other instances reach it; "" announces
// nothing and only reads).
func (b *Backend) NewRoster(self string) *Roster {
	return &Roster{client: b.client, key: b.opts.KeyPrefix + RosterKey, self: self, log: b.log.WithField("key", b.opts.KeyPrefix+RosterKey)}
}

// Run announces self at once and every 10 s until ctx is done, then
// removes it. A failure is logged at debug level (the backend's own
// health reports an unreachable Redis) and retried at the next tick.
func (r *Roster) Run(ctx context.Context) {
	if r.self == "" {
		return
	}
	t := time.NewTicker(rosterEvery)
	defer t.Stop()
	for {
		if err := r.announce(ctx); err != nil && ctx.Err() == nil {
			r.log.WithError(err).Debug("roster: announce failed")
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			r.client.ZRem(rctx, r.key, r.self)
			cancel()
			return
		case <-t.C:
		}
	}
}

// announce renews self's entry, drops lapsed ones and keeps the key alive
// as long as its newest entry.
func (r *Roster) announce(ctx context.Context) error {
	now, err := r.now(ctx)
	if err != nil {
		return err
	}
	until := now + rosterTTL.Milliseconds()
	_, err = r.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.ZAdd(ctx, r.key, goredis.Z{Score: float64(until), Member: r.self})
		p.ZRemRangeByScore(ctx, r.key, "-inf", "("+strconv.FormatInt(now, 10))
		p.PExpire(ctx, r.key, rosterTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("roster: announce %s: %w", r.self, err)
	}
	return nil
}

// Instances returns the addresses whose entries have not lapsed, self
// included, in address order.
func (r *Roster) Instances(ctx context.Context) ([]string, error) {
	now, err := r.now(ctx)
	if err != nil {
		return nil, err
	}
	out, err := r.client.ZRangeByScore(ctx, r.key, &goredis.ZRangeBy{Min: strconv.FormatInt(now, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("roster: list: %w", err)
	}
	return out, nil
}

// now is Redis's clock in Unix milliseconds, so that instances with skewed
// clocks agree on which entries lapsed.
func (r *Roster) now(ctx context.Context) (int64, error) {
	t, err := r.client.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("roster: TIME: %w", err)
	}
	return t.UnixMilli(), nil
}
