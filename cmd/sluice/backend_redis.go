package main

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// newRedis builds the Redis backend from the REDIS_* settings.
func newRedis(ctx context.Context, s *settings, log *logrus.Logger) (backend.Backend, error) {
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
		Logger:                      log,
	})
	if err != nil {
		return nil, fmt.Errorf("redis backend: %w", err)
	}
	return r, nil
}
