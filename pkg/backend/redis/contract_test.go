package redis

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/backendtest"
)

// The contract suite, against each way of reaching Redis, with coalescing
// on (the default) and off. Any difference from pkg/limit (and so from the
// memory backend) fails it.

func TestContractStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, co := range []bool{true, false} {
		t.Run("coalesce="+onOff(co), func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Backend {
				opts := Options{URL: srv.Addr(), KeyPrefix: "contract:", FakeRedisClock: now, Logger: quietLogger(), DisableCoalescing: !co}
				b, err := New(context.Background(), opts)
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return b
			})
		})
	}
}

func TestContractCluster(t *testing.T) {
	c := cluster.Get(t)
	for _, co := range []bool{true, false} {
		t.Run("coalesce="+onOff(co), func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Backend {
				opts := clusterOptions(c)
				opts.KeyPrefix, opts.FakeRedisClock, opts.Logger, opts.DisableCoalescing = "contract:", now, quietLogger(), !co
				b, err := New(context.Background(), opts)
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return b
			})
		})
	}
}

func TestContractSentinel(t *testing.T) {
	s := redistest.Sentinel(t)
	url := s.MasterName()
	for _, a := range s.SentinelAddrs() {
		url += "," + a
	}
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Backend {
		opts := Options{Type: TypeSentinel, URL: url, KeyPrefix: "contract:", FakeRedisClock: now, Logger: quietLogger()}
		b, err := New(context.Background(), opts)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return b
	})
}
