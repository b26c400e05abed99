package rlqs

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// Metrics are the Rate Limit Quota Service's Prometheus metrics. A nil
// *Metrics counts nothing.
type Metrics struct {
	streams     prometheus.Gauge
	buckets     prometheus.Gauge
	reports     prometheus.Counter
	assignments *prometheus.CounterVec
	requests    *prometheus.CounterVec
	storeErrors prometheus.Counter
}

// NewMetrics registers the metrics on reg:
//
//	sluice_rlqs_streams                          open streams
//	sluice_rlqs_buckets                          buckets reported on open streams
//	sluice_rlqs_reports_total                    usage reports received
//	sluice_rlqs_assignments_total{action}        actions sent: token_bucket, deny_all, allow_all, abandon
//	sluice_rlqs_requests_total{domain,descriptor,outcome}
//	                                             requests Envoy reported allowed or denied, per
//	                                             matched config node ("" when unmatched)
//	sluice_rlqs_store_errors_total               quota store calls that failed
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rlqs_streams", Help: "Open Rate Limit Quota Service streams."}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rlqs_buckets", Help: "Buckets reported on the open Rate Limit Quota Service streams."}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rlqs_reports_total", Help: "Rate Limit Quota Service usage reports received."}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_assignments_total",
			Help: "Rate Limit Quota Service bucket actions sent, by action (token_bucket, deny_all, allow_all, abandon)."}, []string{"action"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_requests_total",
			Help: "Requests Envoy reported over the Rate Limit Quota Service, by domain, matched descriptor (empty when unmatched) and outcome (allowed, denied)."},
			[]string{"domain", "descriptor", "outcome"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rlqs_store_errors_total", Help: "Rate Limit Quota Service quota store calls that failed."}),
	}
	for _, c := range []prometheus.Collector{m.streams, m.buckets, m.reports, m.assignments, m.requests, m.storeErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rlqs metrics: %w", err)
		}
	}
	for _, a := range []string{"token_bucket", "deny_all", "allow_all", "abandon"} {
		m.assignments.WithLabelValues(a)
	}
	return m, nil
}

func (m *Metrics) streamOpened() {
	if m != nil {
		m.streams.Inc()
	}
}

func (m *Metrics) streamClosed(buckets int) {
	if m != nil {
		m.streams.Dec()
		m.buckets.Sub(float64(buckets))
	}
}

func (m *Metrics) bucketAdded() {
	if m != nil {
		m.buckets.Inc()
	}
}

func (m *Metrics) bucketRemoved() {
	if m != nil {
		m.buckets.Dec()
	}
}

func (m *Metrics) reported() {
	if m != nil {
		m.reports.Inc()
	}
}

func (m *Metrics) assigned(action string) {
	if m != nil {
		m.assignments.WithLabelValues(action).Inc()
	}
}

func (m *Metrics) storeFailed() {
	if m != nil {
		m.storeErrors.Inc()
	}
}

// usage counts one bucket's reported requests under its node's path.
// Unmatched buckets count under an empty descriptor, so that their values
// (any header's) never make series.
func (m *Metrics) usage(domain string, node *descriptor.Node, allowed, denied uint64) {
	if m == nil || allowed+denied == 0 {
		return
	}
	path := ""
	if node != nil {
		path = node.Path()
	} else {
		domain = "" // a domain the config lacks is the client's to name
	}
	if allowed > 0 {
		m.requests.WithLabelValues(domain, path, "allowed").Add(float64(allowed))
	}
	if denied > 0 {
		m.requests.WithLabelValues(domain, path, "denied").Add(float64(denied))
	}
}
