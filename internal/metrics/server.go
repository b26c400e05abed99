package metrics

import "github.com/prometheus/client_golang/prometheus"

// ServerCounts is what the server's bounds see.
type ServerCounts struct {
	// InFlight is the calls open now; Shed the calls shed for being
	// beyond SLUICE_MAX_IN_FLIGHT; ShedConnection those shed for being
	// beyond their connection's share
	// (SLUICE_GRPC_MAX_IN_FLIGHT_PER_CONNECTION).
	InFlight             int64
	Shed, ShedConnection uint64
	// RequestTimeouts counts the calls cancelled for not sending their
	// request within SLUICE_GRPC_REQUEST_TIMEOUT.
	RequestTimeouts uint64
	// ResetConnsClosed counts the gRPC connections closed for resetting
	// calls beyond SLUICE_GRPC_MAX_EARLY_RESETS_PER_SECOND.
	ResetConnsClosed uint64
	// Conns is the open gRPC connections; ConnsRefused those closed for
	// being beyond SLUICE_GRPC_MAX_CONNECTIONS.
	Conns        int64
	ConnsRefused uint64
}

// ServerLoad reads what the server's bounds see.
type ServerLoad func() ServerCounts

// RegisterServerLoad exports the server's bounds' counts, read from load
// at every scrape, as sluice_calls_in_flight, sluice_calls_shed_total,
// sluice_calls_shed_connection_share_total,
// sluice_grpc_request_timeouts_total,
// sluice_grpc_connections_reset_closed_total, sluice_grpc_connections and
// sluice_grpc_connections_refused_total. It fails if a server is already
// registered.
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
	shedConnDesc = prometheus.NewDesc("sluice_calls_shed_connection_share_total",
		"gRPC calls answered ResourceExhausted at once because their connection held SLUICE_GRPC_MAX_IN_FLIGHT_PER_CONNECTION calls.", nil, nil)
	requestTimeoutsDesc = prometheus.NewDesc("sluice_grpc_request_timeouts_total",
		"gRPC calls cancelled (their stream reset) because their request message did not arrive within SLUICE_GRPC_REQUEST_TIMEOUT of their headers.", nil, nil)
	resetClosedDesc = prometheus.NewDesc("sluice_grpc_connections_reset_closed_total",
		"gRPC connections closed because they reset more calls before their request than SLUICE_GRPC_MAX_EARLY_RESETS_PER_SECOND in a second (HTTP/2 rapid reset).", nil, nil)
	connsDesc = prometheus.NewDesc("sluice_grpc_connections",
		"Open connections of the gRPC listener.", nil, nil)
	connsRefusedDesc = prometheus.NewDesc("sluice_grpc_connections_refused_total",
		"gRPC connections closed at once because SLUICE_GRPC_MAX_CONNECTIONS were open.", nil, nil)
)

// serverCollector turns ServerLoad into two gauges and five counters.
type serverCollector struct{ load ServerLoad }

// Describe implements prometheus.Collector.
func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inFlightDesc
	ch <- shedDesc
	ch <- shedConnDesc
	ch <- requestTimeoutsDesc
	ch <- resetClosedDesc
	ch <- connsDesc
	ch <- connsRefusedDesc
}

// Collect implements prometheus.Collector.
func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.load()
	ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(l.InFlight))
	ch <- prometheus.MustNewConstMetric(shedDesc, prometheus.CounterValue, float64(l.Shed))
	ch <- prometheus.MustNewConstMetric(shedConnDesc, prometheus.CounterValue, float64(l.ShedConnection))
	ch <- prometheus.MustNewConstMetric(requestTimeoutsDesc, prometheus.CounterValue, float64(l.RequestTimeouts))
	ch <- prometheus.MustNewConstMetric(resetClosedDesc, prometheus.CounterValue, float64(l.ResetConnsClosed))
	ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(l.Conns))
	ch <- prometheus.MustNewConstMetric(connsRefusedDesc, prometheus.CounterValue, float64(l.ConnsRefused))
}
