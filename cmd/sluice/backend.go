package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// backends are the stores the service decides with.
type backends struct {
	// main decides every check.
	main backend.Backend
	// local decides for failure_mode local domains when main fails; nil
	// with the memory backend, which does not fail.
	local backend.Backend
}

// newBackends builds the backend s selects. A Redis that is down at start
// is not an error: the backend keeps retrying, health reports it, and each
// domain's failure mode answers meanwhile.
func newBackends(ctx context.Context, s *settings, log *logrus.Logger) (*backends, error) {
	if s.backend() == "memory" {
		log.Info("backend: memory (in-process; limits are per instance)")
		return &backends{main: memory.New(memory.Options{})}, nil
	}
	socket := s.Redis.SocketType
	if socket == "" {
		socket = "tcp"
		if strings.HasPrefix(s.Redis.URL, "/") {
			socket = "unix"
		}
	}
	r, err := redis.New(ctx, redis.Options{
		Type:                        s.Redis.Type,
		URL:                         s.Redis.URL,
		SocketType:                  socket,
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
	log.WithFields(logrus.Fields{"type": s.Redis.Type, "url": s.Redis.URL, "socket": socket}).Info("backend: redis")
	return &backends{main: r, local: memory.New(memory.Options{})}, nil
}

// close releases the backends, logging failures.
func (b *backends) close(log *logrus.Logger) {
	for _, be := range []backend.Backend{b.main, b.local} {
		if be == nil {
			continue
		}
		if err := be.Close(); err != nil {
			log.WithError(err).Warn("closing backend")
		}
	}
}
