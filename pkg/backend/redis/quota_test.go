package redis

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/backendtest"
)

// The Rate Limit Quota Service store's contract, on every way of reaching
// Redis: the same suite as the embedded store's.
func TestQuotaContract(t *testing.T) {
	cases := []struct {
		name string
		opts func(t *testing.T) Options
	}{
		{"standalone", func(t *testing.T) Options { return Options{URL: redistest.Standalone(t).Addr()} }},
		{"cluster", func(t *testing.T) Options { return clusterOptions(cluster.Get(t)) }},
		{"sentinel", func(t *testing.T) Options {
			s := redistest.Sentinel(t)
			url := s.MasterName()
			for _, a := range s.SentinelAddrs() {
				url += "," + a
			}
			return Options{Type: TypeSentinel, URL: url}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts(t)
			opts.KeyPrefix = "quota:"
			b := newBackend(t, opts)
			backendtest.RunQuota(t, func(t *testing.T) (backend.QuotaStore, func(bucket, rule string) string) {
				s := b.QuotaStore()
				return s, s.QuotaKey
			})
		})
	}
}
