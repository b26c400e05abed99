package metrics

import "github.com/prometheus/client_golang/prometheus"

// ServerLoad reads what the server's bounds see: the calls open now and
// the calls shed for being beyond SLUICE_MAX_IN_FLIGHT, the open gRPC
// connections and the connections closed for being beyond
// SLUICE_GRPC_MAX_CONNECTIONS.
type ServerLoad func() (inFlight int64, shed uint64, conns int64, connsRefused uint64)

// RegisterServerLoad exports the server's bounds' counts, read from load
// at every scrape, as sluice_calls_in_flight, sluice_calls_shed_total,
// sluice_grpc_connections and sluice_grpc_connections_refused_total. It
// fails if a server is already registered.
func (m *Metrics) RegisterServerLoad(load ServerLoad) error {
	if m == nil || load == nil {
		return nil
	}
	return m.registerCollector("the server's load", serverCollector{load})
}

var (
	inFlightDesc = prometheus.NewDesc("sluice_calls_in_flight",
		"Calls open now (gRPC from their headers to their answer, /json decisions), counted against SLUICE_MAX_IN_FLIGHT (0 when it is 0).", nil, nil)
	shedDesc = prometheus.NewDesc("sluice_calls_shed_total",
		"Calls answered ResourceExhausted (503 on /json) at once because SLUICE_MAX_IN_FLIGHT calls were open.", nil, nil)
	connsDesc = prometheus.NewDesc("sluice_grpc_connections",
		"Open connections of the gRPC listener.", nil, nil)
	connsRefusedDesc = prometheus.NewDesc("sluice_grpc_connections_refused_total",
		"gRPC connections closed at once because SLUICE_GRPC_MAX_CONNECTIONS were open.", nil, nil)
)

// serverCollector turns ServerLoad into two gauges and two counters.
type serverCollector struct{ load ServerLoad }

// Describe implements prometheus.Collector.
func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inFlightDesc
	ch <- shedDesc
	ch <- connsDesc
	ch <- connsRefusedDesc
}

// Collect implements prometheus.Collector.
func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	inFlight, shed, conns, refused := c.load()
	ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(inFlight))
	ch <- prometheus.MustNewConstMetric(shedDesc, prometheus.CounterValue, float64(shed))
	ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(conns))
	ch <- prometheus.MustNewConstMetric(connsRefusedDesc, prometheus.CounterValue, float64(refused))
}
