package main

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// newRedis builds the Redis backend from the REDIS_* settings. observeBatch,
// when not nil, receives the size of every pipeline sent (for metrics).
func newRedis(ctx context.Context, s *settings, log *logrus.Logger, observeBatch func(int)) (backend.Backend, error) {
	// go-redis has one process-wide logger (dial failures, pool events);
	// route it through ours so its lines follow LOG_FORMAT. This is main's
	// wiring, the one place global state is allowed.
	goredis.SetLogger(redisLogger{log.WithField("component", "go-redis")})
	r, err := redis.New(ctx, redis.Options{
		Type:                        s.Redis.Type,
		URL:                         s.Redis.URL,
		SocketType:                  s.Redis.SocketType,
		Auth:                        s.Redis.Auth,
		SentinelAuth:                s.Redis.SentinelAuth,
		TLS:                         s.Redis.TLS,
		TLSCACert:                   s.Redis.TLSCACert,
		TLSClientCert:               s.Redis.TLSClientCert,
		TLSClientKey:                s.Redis.TLSClientKey,
		TLSSkipHostnameVerification: s.Redis.TLSSkipHostnameVerification,
		PoolSize:                    s.Redis.PoolSize,
		Timeout:                     s.Redis.Timeout,
		KeyPrefix:                   s.Redis.KeyPrefix,
		DisableCoalescing:           !s.Redis.Coalesce,
		PipelineWindow:              s.Redis.PipelineWindow,
		PipelineLimit:               s.Redis.PipelineLimit,
		ObserveBatch:                observeBatch,
		Breaker:                     s.Redis.breaker(),
		Logger:                      log,
	})
	if err != nil {
		return nil, fmt.Errorf("redis backend: %w", err)
	}
	return r, nil
}

// breaker maps the breaker settings onto the backend's options, where 0
// failures means the default and a negative count disables the breakers.
func (r redisSettings) breaker() redis.BreakerOptions {
	b := redis.BreakerOptions{Failures: r.BreakerFailures, OpenFor: r.BreakerOpen}
	if r.BreakerFailures == 0 {
		b.Failures = -1
	}
	return b
}

// redisLogger adapts logrus to go-redis's logging interface.
type redisLogger struct{ entry *logrus.Entry }

// Printf logs one go-redis message at warning level: go-redis only logs
// what went wrong (failed dials, bad replies).
func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.entry.Warnf(format, v...)
}
