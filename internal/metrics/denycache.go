package metrics

import "github.com/prometheus/client_golang/prometheus"

// DenyCacheStats reads the local denial cache's running totals: lookups
// answered from the cache, lookups that missed, and entries evicted before
// they expired.
type DenyCacheStats func() (hits, misses, evictions uint64)

// RegisterDenyCache exports the local denial cache's totals, read from
// stats at every scrape, as sluice_denycache_hits_total,
// sluice_denycache_misses_total and sluice_denycache_evictions_total. It
// fails if a denial cache is already registered.
func (m *Metrics) RegisterDenyCache(stats DenyCacheStats) error {
	if m == nil || stats == nil {
		return nil
	}
	return m.registerCollector("the denial cache", denyCacheCollector{stats})
}

var (
	denyHitsDesc = prometheus.NewDesc("sluice_denycache_hits_total",
		"Checks answered over-limit by the local denial cache without a backend call.", nil, nil)
	denyMissesDesc = prometheus.NewDesc("sluice_denycache_misses_total",
		"Checks the local denial cache did not hold, sent to the backend.", nil, nil)
	denyEvictionsDesc = prometheus.NewDesc("sluice_denycache_evictions_total",
		"Denials evicted from the local denial cache before they expired (the cache was full).", nil, nil)
)

// denyCacheCollector turns DenyCacheStats into three counters.
type denyCacheCollector struct{ stats DenyCacheStats }

// Describe implements prometheus.Collector.
func (c denyCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- denyHitsDesc
	ch <- denyMissesDesc
	ch <- denyEvictionsDesc
}

// Collect implements prometheus.Collector.
func (c denyCacheCollector) Collect(ch chan<- prometheus.Metric) {
	hits, misses, evictions := c.stats()
	ch <- prometheus.MustNewConstMetric(denyHitsDesc, prometheus.CounterValue, float64(hits))
	ch <- prometheus.MustNewConstMetric(denyMissesDesc, prometheus.CounterValue, float64(misses))
	ch <- prometheus.MustNewConstMetric(denyEvictionsDesc, prometheus.CounterValue, float64(evictions))
}
