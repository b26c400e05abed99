package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// registrar creates metric families and registers each one on reg as it is
// made, so a constructor states a family's name, help and labels once and
// checks one error at the end. After the first failed registration it
// registers nothing more and err holds that failure.
type registrar struct {
	reg prometheus.Registerer
	err error
}

// add registers c unless an earlier registration failed, and returns c.
func add[C prometheus.Collector](f *registrar, c C) C {
	if f.err == nil {
		f.err = f.reg.Register(c)
	}
	return c
}

// counter creates and registers a counter without labels.
func (f *registrar) counter(name, help string) prometheus.Counter {
	return add(f, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

// counterVec creates and registers a counter family with the given labels.
func (f *registrar) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return add(f, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// gauge creates and registers a gauge without labels.
func (f *registrar) gauge(name, help string) prometheus.Gauge {
	return add(f, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// gaugeVec creates and registers a gauge family with the given labels.
func (f *registrar) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return add(f, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// histogram creates and registers a histogram without labels.
func (f *registrar) histogram(name, help string, buckets []float64) prometheus.Histogram {
	return add(f, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

// histogramVec creates and registers a histogram family with the given
// labels.
func (f *registrar) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return add(f, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}

// registerCollector registers c, the collector of what an error message
// names (the denial cache, ...), on m's registry.
func (m *Metrics) registerCollector(what string, c prometheus.Collector) error {
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: register %s: %w", what, err)
	}
	return nil
}
