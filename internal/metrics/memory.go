package metrics

import "github.com/prometheus/client_golang/prometheus"

// MemoryStats reads an embedded (memory) backend: the descriptors it holds
// now, and how many it evicted while their state still counted.
type MemoryStats func() (descriptors int, evictions uint64)

// RegisterMemoryBackend exports an embedded backend's size and evictions,
// read from stats at every scrape, as sluice_memory_descriptors and
// sluice_memory_evictions_total with the label role: "main" when it is the
// backend, "local" when it is the failure_mode local fallback.
func (m *Metrics) RegisterMemoryBackend(role string, stats MemoryStats) error {
	if m == nil || stats == nil {
		return nil
	}
	c := memoryCollector{
		stats: stats,
		size: prometheus.NewDesc("sluice_memory_descriptors",
			"Descriptors the embedded backend holds state for.", nil, prometheus.Labels{"role": role}),
		evictions: prometheus.NewDesc("sluice_memory_evictions_total",
			"Descriptors the embedded backend evicted while their state still counted (SLUICE_MEMORY_MAX_DESCRIPTORS reached): each restarts empty.",
			nil, prometheus.Labels{"role": role}),
	}
	return m.registerCollector("the "+role+" memory backend", c)
}

// memoryCollector turns MemoryStats into a gauge and a counter.
type memoryCollector struct {
	stats           MemoryStats
	size, evictions *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.evictions
}

// Collect implements prometheus.Collector.
func (c memoryCollector) Collect(ch chan<- prometheus.Metric) {
	n, ev := c.stats()
	ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(ev))
}
