package main

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
)

// With Redis, /metrics carries each replica's lag as its master reports
// it: the Sentinel set's one replica, under the master name.
func TestServeReplicaLagMetric(t *testing.T) {
	set := redistest.Sentinel(t)
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(5))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "REDIS_TYPE=sentinel",
		"REDIS_URL=" + set.MasterName() + "," + strings.Join(set.SentinelAddrs(), ",")})
	series := `{master="` + set.MasterName() + `",replica="` + set.ReplicaAddr() + `"}`
	var text string
	waitFor(t, "the replica's series on /metrics", func() bool {
		text = s.scrapeMetricsText(t)
		return strings.Contains(text, "sluice_redis_replica_lag_seconds"+series) &&
			strings.Contains(text, "sluice_redis_replica_behind_bytes"+series)
	})
}
