package main

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/denycache"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// newDenyCache wraps a Redis backend in the local denial cache, wired to
// the other instances sharing the Redis: this instance announces its
// refunds and resets on a pub/sub channel and forgets the denials the
// others announce (pkg/backend/redis.Announcer). It returns the cache, the
// announcer (nil without Redis) and a function that stops the announcer and
// waits for it.
func newDenyCache(ctx context.Context, s *settings, main backend.Backend, log *logrus.Logger) (*denycache.Backend, *redis.Announcer, func()) {
	opts := denycache.Options{Size: s.LocalCacheSize, MaxAge: s.LocalCacheMaxAge}
	r, ok := main.(*redis.Backend)
	if !ok {
		return denycache.New(main, opts), nil, func() {}
	}
	ann := r.NewAnnouncer()
	opts.Announce = ann.Announce
	cache := denycache.New(main, opts)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		ann.Run(ctx, cache.Forget, cache.ForgetAll)
	}()
	log.WithField("max_age", s.LocalCacheMaxAge).Info("local denial cache on: refunds and resets are announced to the other instances over Redis pub/sub")
	return cache, ann, func() { cancel(); <-done }
}

// newAnnouncing wraps a Redis backend of an instance without the local
// cache so that it still announces its refunds and resets: the other
// instances' caches must hear of them whatever this one caches. It returns
// main itself (and a nil announcer) for any other backend.
func newAnnouncing(ctx context.Context, main backend.Backend) (backend.Backend, *redis.Announcer, func()) {
	r, ok := main.(*redis.Backend)
	if !ok {
		return main, nil, func() {}
	}
	ann := r.NewAnnouncer()
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		ann.Run(ctx, func(string) {}, func() {}) // nothing cached here to forget
	}()
	return ann.Announcing(), ann, func() { cancel(); <-done }
}
