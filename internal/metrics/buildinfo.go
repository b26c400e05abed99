package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo describes the running binary for the sluice_build_info gauge.
type BuildInfo struct {
	// Version is the release tag, or the version Go stamped ("dev" when
	// none).
	Version string
	// Revision is the VCS commit built, "" when unknown.
	Revision string
	// Modified says the tree built had changes not committed.
	Modified bool
	// GoVersion is the Go release that built the binary.
	GoVersion string
}

// RegisterBuildInfo exports sluice_build_info{version, revision, modified,
// goversion}, always 1: which build runs, for dashboards and to tell the
// instances of a rolling upgrade apart.
func (m *Metrics) RegisterBuildInfo(b BuildInfo) error {
	if m == nil {
		return nil
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_build_info",
		Help: "Always 1; its labels say which build of sluice runs: the version (release tag, or the version Go stamped), the VCS revision, whether the tree built was modified, and the Go release.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision,
			"modified": strconv.FormatBool(b.Modified), "goversion": b.GoVersion},
	})
	g.Set(1)
	return m.registerCollector("the build information", g)
}
