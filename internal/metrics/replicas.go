package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReplicaStat is one replica of a Redis master as the master reports it.
type ReplicaStat struct {
	// Master and Replica name the master and the replica (addresses, or
	// the Sentinel master name).
	Master, Replica string
	// Lag is the time since the replica last acknowledged the master's
	// replication stream; Behind the bytes of it the replica has not
	// acknowledged.
	Lag    time.Duration
	Behind int64
}

// ReplicaStats reads the replicas of every master now; it returns what it
// could read when some master did not answer.
type ReplicaStats func(ctx context.Context) ([]ReplicaStat, error)

// RegisterReplicas exports, read from stats at every scrape (bounded by
// timeout), each replica's lag as sluice_redis_replica_lag_seconds and
// sluice_redis_replica_behind_bytes{master, replica}: what a failover to
// that replica would forget (docs/operations.md, "Failover"). A master
// that does not answer has no series in that scrape.
func (m *Metrics) RegisterReplicas(stats ReplicaStats, timeout time.Duration) error {
	if m == nil || stats == nil {
		return nil
	}
	return m.registerCollector("the Redis replicas", replicaCollector{stats, timeout})
}

var (
	replicaLagDesc = prometheus.NewDesc("sluice_redis_replica_lag_seconds",
		"Seconds since the Redis replica last acknowledged its master's replication stream (INFO replication's lag, whole seconds).",
		[]string{"master", "replica"}, nil)
	replicaBehindDesc = prometheus.NewDesc("sluice_redis_replica_behind_bytes",
		"Bytes of its master's replication stream the Redis replica has not acknowledged: the writes a failover to it would forget.",
		[]string{"master", "replica"}, nil)
)

// replicaCollector turns ReplicaStats into two gauges per replica.
type replicaCollector struct {
	stats   ReplicaStats
	timeout time.Duration
}

// Describe implements prometheus.Collector.
func (c replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- replicaLagDesc
	ch <- replicaBehindDesc
}

// Collect implements prometheus.Collector.
func (c replicaCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rs, _ := c.stats(ctx)
	for _, r := range rs {
		ch <- prometheus.MustNewConstMetric(replicaLagDesc, prometheus.GaugeValue, r.Lag.Seconds(), r.Master, r.Replica)
		ch <- prometheus.MustNewConstMetric(replicaBehindDesc, prometheus.GaugeValue, float64(r.Behind), r.Master, r.Replica)
	}
}
