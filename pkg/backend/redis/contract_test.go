package redis

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
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
			runContract(t, Options{URL: srv.Addr(), DisableCoalescing: !co})
		})
	}
}

func TestContractCluster(t *testing.T) {
	c := cluster.Get(t)
	for _, co := range []bool{true, false} {
		t.Run("coalesce="+onOff(co), func(t *testing.T) {
			opts := clusterOptions(c)
			opts.DisableCoalescing = !co
			runContract(t, opts)
		})
	}
}

func TestContractSentinel(t *testing.T) {
	s := redistest.Sentinel(t)
	url := s.MasterName()
	for _, a := range s.SentinelAddrs() {
		url += "," + a
	}
	runContract(t, Options{Type: TypeSentinel, URL: url})
}

// runContract runs the contract suite against backends built from base
// with the suite's clock as Redis's, keys under "contract:" and a quiet
// logger.
func runContract(t *testing.T, base Options) {
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Backend {
		opts := base
		opts.KeyPrefix, opts.FakeRedisClock, opts.Logger = "contract:", now, quietLogger()
		b, err := New(context.Background(), opts)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return b
	})
}
