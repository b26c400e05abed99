package metrics

import "github.com/prometheus/client_golang/prometheus"

// AnnouncementStats reads the running totals of the announcements that
// keep the instances' denial caches in step: sent, that could not be sent,
// dropped because the queue was full, and received from other instances.
type AnnouncementStats func() (published, failed, dropped, received uint64)

// RegisterAnnouncements exports the announcement totals, read from stats
// at every scrape, as sluice_denycache_announcements_total{result}. It
// fails if announcements are already registered.
func (m *Metrics) RegisterAnnouncements(stats AnnouncementStats) error {
	if m == nil || stats == nil {
		return nil
	}
	return m.registerCollector("the denial cache announcements", announceCollector{stats})
}

var announceDesc = prometheus.NewDesc("sluice_denycache_announcements_total",
	"Refunds and resets announced to, or heard from, the other instances sharing the Redis, by result.",
	[]string{"result"}, nil)

// announceCollector turns AnnouncementStats into one counter per result.
type announceCollector struct{ stats AnnouncementStats }

// Describe implements prometheus.Collector.
func (c announceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- announceDesc }

// Collect implements prometheus.Collector.
func (c announceCollector) Collect(ch chan<- prometheus.Metric) {
	published, failed, dropped, received := c.stats()
	for _, r := range []struct {
		name string
		v    uint64
	}{{"published", published}, {"failed", failed}, {"dropped", dropped}, {"received", received}} {
		ch <- prometheus.MustNewConstMetric(announceDesc, prometheus.CounterValue, float64(r.v), r.name)
	}
}
