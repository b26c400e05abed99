package metrics

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestReplicas: each replica read at the scrape is two gauges labelled by
// master and replica; a read that fails exports what it did read.
func TestReplicas(t *testing.T) {
	tests := []struct {
		name   string
		stats  []ReplicaStat
		err    error
		wants  []want
		series []string
	}{
		{"two", []ReplicaStat{
			{Master: "10.0.0.1:6379", Replica: "10.0.0.2:6379", Lag: 7 * time.Second, Behind: 1 << 20},
			{Master: "10.0.0.3:6379", Replica: "10.0.0.4:6379"},
		}, nil, []want{
			{"sluice_redis_replica_lag_seconds", "master=10.0.0.1:6379,replica=10.0.0.2:6379", 7},
			{"sluice_redis_replica_behind_bytes", "master=10.0.0.1:6379,replica=10.0.0.2:6379", 1 << 20},
			{"sluice_redis_replica_lag_seconds", "master=10.0.0.3:6379,replica=10.0.0.4:6379", 0},
			{"sluice_redis_replica_behind_bytes", "master=10.0.0.3:6379,replica=10.0.0.4:6379", 0},
		}, []string{"master=10.0.0.1:6379,replica=10.0.0.2:6379", "master=10.0.0.3:6379,replica=10.0.0.4:6379"}},
		{"a master did not answer", []ReplicaStat{{Master: "m", Replica: "r", Behind: 5}}, errors.New("INFO of n: refused"), []want{
			{"sluice_redis_replica_behind_bytes", "master=m,replica=r", 5},
		}, []string{"master=m,replica=r"}},
		{"none", nil, errors.New("down"), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := New(reg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			stats := func(ctx context.Context) ([]ReplicaStat, error) {
				if _, ok := ctx.Deadline(); !ok {
					t.Error("the read has no deadline")
				}
				return tt.stats, tt.err
			}
			if err := m.RegisterReplicas(stats, time.Second); err != nil {
				t.Fatal(err)
			}
			f := scrape(t, reg)
			f.check(t, tt.wants)
			if got := f.series("sluice_redis_replica_lag_seconds"); !slices.Equal(got, tt.series) {
				t.Errorf("series %q, want %q", got, tt.series)
			}
		})
	}
}
