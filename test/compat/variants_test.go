package compat

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
	"github.com/sluice-rl/sluice/internal/testkit/testpki"
)

// variant is a backend and the settings the incumbent's tests run its
// scenarios under.
type variant struct {
	name string
	// redis is set for every Redis deployment.
	redis bool
	// stopIncrement is set when STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is.
	stopIncrement bool
	// env starts what the variant needs (stopped when t ends) and returns
	// sluice's settings for it. Checks of the variant's own (keys under the
	// prefix, ...) run when t ends.
	env func(t *testing.T) map[string]string
}

// memory is the embedded backend.
var memory = variant{name: "memory", env: func(*testing.T) map[string]string {
	return map[string]string{"BACKEND_TYPE": "memory"}
}}

// standalone is one plain redis-server.
var standalone = variant{name: "redis", redis: true, env: func(t *testing.T) map[string]string {
	return redisEnv(redistest.Standalone(t).Addr())
}}

// clustered is the shared Redis Cluster with a password.
var clustered = variant{name: "cluster-auth", redis: true, env: func(t *testing.T) map[string]string {
	c := cluster.Get(t)
	return map[string]string{
		"BACKEND_TYPE":          "redis",
		"REDIS_TYPE":            "cluster",
		"REDIS_URL":             strings.Join(c.Addrs(), ","),
		"REDIS_AUTH":            password,
		"REDIS_PIPELINE_WINDOW": "150us",
		"CACHE_KEY_PREFIX":      sluicetest.KeyPrefix(t),
	}
}}

// core are the variants every scenario runs on.
var core = []variant{memory, standalone, clustered}

// basicVariants are the settings variants of the incumbent's basic
// integration scenario (TestBasicConfig, TestBasicAuthConfig,
// TestBasicTLSConfig, TestBasicAuthConfigWithRedisCluster,
// TestBasicAuthConfigWithRedisSentinel), plus the embedded backend.
var basicVariants = []variant{
	memory,
	standalone,
	{name: "local-cache", redis: true, env: func(t *testing.T) map[string]string {
		return with(redisEnv(redistest.Standalone(t).Addr()), "LOCAL_CACHE_SIZE_IN_BYTES", "1000")
	}},
	{name: "cache-prefix", redis: true, env: func(t *testing.T) map[string]string {
		s := redistest.Standalone(t)
		t.Cleanup(func() { checkPrefixed(t, s, "prefix:") })
		return with(redisEnv(s.Addr()), "CACHE_KEY_PREFIX", "prefix:")
	}},
	{name: "stop-increment", redis: true, stopIncrement: true, env: func(t *testing.T) map[string]string {
		return with(redisEnv(redistest.Standalone(t).Addr()), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")
	}},
	{name: "stop-increment-local-cache", redis: true, stopIncrement: true, env: func(t *testing.T) map[string]string {
		return with(with(redisEnv(redistest.Standalone(t).Addr()),
			"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"), "LOCAL_CACHE_SIZE_IN_BYTES", "1000")
	}},
	{name: "per-second-redis", redis: true, env: func(t *testing.T) map[string]string {
		main, perSecond := redistest.Standalone(t), redistest.Standalone(t)
		t.Cleanup(func() {
			n, err := perSecond.Client().DBSize(context.Background()).Result()
			if err != nil {
				t.Errorf("DBSIZE of the per-second Redis: %v", err)
				return
			}
			// The incumbent keeps per-second counters in REDIS_PERSECOND_URL.
			expect(t, "per-second counters in the per-second Redis", n > 0, true, because(devPerSecond, false))
		})
		env := redisEnv(main.Addr())
		env["REDIS_PERSECOND"] = "true"
		env["REDIS_PERSECOND_URL"] = perSecond.Addr()
		env["REDIS_PERSECOND_SOCKET_TYPE"] = "tcp"
		return env
	}},
	{name: "auth", redis: true, env: func(t *testing.T) map[string]string {
		s := redistest.Standalone(t, "--requirepass", password)
		return with(redisEnv(s.Addr()), "REDIS_AUTH", password)
	}},
	{name: "tls-auth", redis: true, env: func(t *testing.T) map[string]string {
		ca := testpki.NewCA(t, "redis")
		srv := ca.Server(t, "redis")
		s := redistest.StandaloneTLS(t, redistest.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile, CAFile: ca.CertFile},
			"--requirepass", password)
		env := with(redisEnv(s.Addr()), "REDIS_AUTH", password)
		env["REDIS_TLS"] = "true"
		env["REDIS_TLS_CACERT"] = ca.CertFile
		return env
	}},
	{name: "tls-client-cert", redis: true, env: func(t *testing.T) map[string]string {
		ca := testpki.NewCA(t, "redis")
		srv := ca.Server(t, "redis")
		client := ca.Client(t, "sluice", "")
		s := redistest.StandaloneTLS(t, redistest.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile, CAFile: ca.CertFile, RequireClientCert: true},
			"--requirepass", password)
		env := with(redisEnv(s.Addr()), "REDIS_AUTH", password)
		env["REDIS_TLS"] = "true"
		env["REDIS_TLS_CACERT"] = ca.CertFile
		env["REDIS_TLS_CLIENT_CERT"] = client.CertFile
		env["REDIS_TLS_CLIENT_KEY"] = client.KeyFile
		return env
	}},
	clustered,
	{name: "sentinel-auth", redis: true, env: func(t *testing.T) map[string]string {
		s := redistest.Sentinel(t, "--requirepass", password)
		return map[string]string{
			"BACKEND_TYPE": "redis",
			"REDIS_TYPE":   "sentinel",
			"REDIS_URL":    s.MasterName() + "," + strings.Join(s.SentinelAddrs(), ","),
			"REDIS_AUTH":   password,
		}
	}},
}

// redisEnv points sluice at a standalone Redis over TCP.
func redisEnv(addr string) map[string]string {
	return map[string]string{"BACKEND_TYPE": "redis", "REDIS_TYPE": "single", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": addr}
}

// with returns env with k set to v.
func with(env map[string]string, k, v string) map[string]string {
	env[k] = v
	return env
}

// checkPrefixed checks that every key in s starts with prefix, as every
// key of the incumbent does with CACHE_KEY_PREFIX.
func checkPrefixed(t *testing.T, s *redistest.Server, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := s.Client().Keys(ctx, "*").Result()
	if err != nil {
		t.Errorf("KEYS: %v", err)
		return
	}
	if len(keys) == 0 {
		t.Errorf("no keys in Redis after the scenario")
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix) {
			t.Errorf("key %q does not start with CACHE_KEY_PREFIX %q", k, prefix)
		}
	}
}
