package main

import (
	"context"
	"net/url"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/denycache"
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
	// cache is the local denial cache wrapped around a Redis main backend;
	// nil when off or with the memory backend (which needs no cache).
	cache *denycache.Backend
	// announcer tells the other instances of this one's refunds and
	// resets, and this one's cache of theirs; nil with the memory backend.
	announcer *redis.Announcer
	// stopCache stops what keeps the cache in step with other instances.
	stopCache func()
	// redis is the Redis backend under main; nil with the memory backend.
	redis *redis.Backend
	// quota keeps the Rate Limit Quota Service's shares: in process with
	// the memory backend, on the Redis backend's Redis otherwise.
	quota backend.QuotaStore
}

// newBackends builds the backend s selects. A Redis that is down at start
// is not an error: the backend keeps retrying, health reports it, and each
// domain's failure mode answers meanwhile.
func newBackends(ctx context.Context, s *settings, log *logrus.Logger, observeBatch func(int)) (*backends, error) {
	why := "BACKEND_TYPE"
	if s.BackendType == "" {
		why = "default without REDIS_URL"
		if s.Redis.URL != "" {
			why = "default with REDIS_URL"
		}
	}
	if s.backend() == "memory" {
		log.WithField("chosen_by", why).Info("backend: memory (in-process; limits are per instance)")
		return &backends{main: memory.New(memory.Options{MaxDescriptors: s.MemoryMaxDescriptors}), quota: memory.NewQuotaStore()}, nil
	}
	main, err := newRedis(ctx, s, log, observeBatch)
	if err != nil {
		return nil, err
	}
	log.WithFields(logrus.Fields{"chosen_by": why, "type": s.Redis.Type, "url": redactURL(s.Redis.URL), "socket": s.Redis.SocketType}).
		Info("backend: redis")
	b := &backends{main: main, local: memory.New(memory.Options{MaxDescriptors: s.MemoryMaxDescriptors}), redis: main, quota: main.QuotaStore()}
	if s.LocalCache {
		// Known denials are answered in process until Redis said they end,
		// so an abusive client costs no round trip (internal/denycache).
		b.cache, b.announcer, b.stopCache = newDenyCache(ctx, s, main, log)
		b.main = b.cache
	} else {
		// No cache here, but the other instances' caches must still hear
		// of this instance's refunds and resets.
		b.main, b.announcer, b.stopCache = newAnnouncing(ctx, main)
	}
	return b, nil
}

// memoryBackend is an embedded backend in use and its role for metrics.
type memoryBackend struct {
	role string
	b    *memory.Backend
}

// memories lists the embedded backends in use: the main one (BACKEND_TYPE
// memory) or the failure_mode local fallback.
func (b *backends) memories() []memoryBackend {
	var out []memoryBackend
	if m, ok := b.main.(*memory.Backend); ok {
		out = append(out, memoryBackend{"main", m})
	}
	if m, ok := b.local.(*memory.Backend); ok {
		out = append(out, memoryBackend{"local", m})
	}
	return out
}

// close releases the backends, logging failures.
func (b *backends) close(log *logrus.Logger) {
	if b.stopCache != nil {
		b.stopCache()
	}
	for _, be := range []backend.Backend{b.main, b.local} {
		if be == nil {
			continue
		}
		if err := be.Close(); err != nil {
			log.WithError(err).Warn("closing backend")
		}
	}
}

// redactURL hides the password of every redis://user:pass@host element of
// a REDIS_URL, for logging.
func redactURL(v string) string {
	parts := strings.Split(v, ",")
	for i, p := range parts {
		if u, err := url.Parse(p); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
