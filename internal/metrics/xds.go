package metrics

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// XDS holds the families of the xDS configuration source. Its methods are
// safe for concurrent use; a nil *XDS records nothing.
type XDS struct {
	connected prometheus.Gauge
	version   *prometheus.GaugeVec // version
	acks      prometheus.Counter
	nacks     prometheus.Counter

	mu      sync.Mutex
	current string // the version label set to 1, "" before the first ACK
	set     bool
}

// RegisterXDS creates and registers the xDS source's families:
// sluice_xds_connected, sluice_xds_config_version_info and
// sluice_xds_responses_total{result}. Only a server whose configuration
// comes over xDS registers them. It fails if they are already registered.
func (m *Metrics) RegisterXDS() (*XDS, error) {
	if m == nil {
		return nil, nil
	}
	f := registrar{reg: m.reg}
	x := &XDS{
		connected: f.gauge("sluice_xds_connected",
			"1 while a stream to the xDS management server is open, 0 otherwise."),
		version: f.gaugeVec("sluice_xds_config_version_info",
			"1 for the version_info of the xDS configuration in use (absent before the first one).", "version"),
	}
	responses := f.counterVec("sluice_xds_responses_total",
		"xDS responses handled, by result: ack (applied) or nack (rejected; the previous configuration stays).", "result")
	if f.err != nil {
		return nil, fmt.Errorf("metrics: register the xDS families: %w", f.err)
	}
	x.acks = responses.WithLabelValues("ack")
	x.nacks = responses.WithLabelValues("nack")
	return x, nil
}

// Connected records a stream to the management server opened or ended.
func (x *XDS) Connected(up bool) {
	if x == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	x.connected.Set(v)
}

// Accepted records a response applied and ACKed: version is now in use.
func (x *XDS) Accepted(version string) {
	if x == nil {
		return
	}
	x.acks.Inc()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.set && x.current != version {
		x.version.DeleteLabelValues(x.current)
	}
	x.current, x.set = version, true
	x.version.WithLabelValues(version).Set(1)
}

// Rejected records a response NACKed; the version in use does not change.
func (x *XDS) Rejected(string, error) {
	if x == nil {
		return
	}
	x.nacks.Inc()
}
