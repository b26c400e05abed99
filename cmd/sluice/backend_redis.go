package main

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// newRedis builds the Redis backend from the REDIS_* settings. observeBatch,
// when not nil, receives the size of every pipeline sent (for metrics).
func newRedis(ctx context.Context, s *settings, log *logrus.Logger, observeBatch func(int)) (*redis.Backend, error) {
	// go-redis has one process-wide logger (dial failures, pool events);
	// route it through ours so its lines follow LOG_FORMAT. This is main's
	// wiring, the one place global state is allowed.
	goredis.SetLogger(redisLogger{log.WithField("component", "go-redis")})
	opts := s.Redis
	opts.ObserveBatch = observeBatch
	opts.Logger = log
	r, err := redis.New(ctx, opts)
	if err != nil {
		return nil, err // its text starts with "redis backend:"
	}
	return r, nil
}

// redisLogger adapts logrus to go-redis's logging interface.
type redisLogger struct{ entry *logrus.Entry }

// Printf logs one go-redis message at warning level: go-redis only logs
// what went wrong (failed dials, bad replies).
func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.entry.Warnf(format, v...)
}
