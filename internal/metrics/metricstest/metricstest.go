// Package metricstest reads Prometheus's text exposition for tests: it
// parses a scrape and finds one sample by its labels. It knows nothing of
// which metrics sluice exports (internal/metrics owns those).
package metricstest

import (
	"io"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse parses the text exposition r into metric families by name, or
// fails t.
func Parse(t testing.TB, r io.Reader) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse the metrics scrape: %v", err)
	}
	return fams
}

// LabelKey formats label pairs as "k=v,k=v", sorted by name, the form
// Value matches.
func LabelKey(ls []*dto.LabelPair) string {
	parts := make([]string, 0, len(ls))
	for _, l := range ls {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// Value returns the sample of family name whose labels are exactly labels
// (LabelKey's form; "" for none): a counter's or gauge's value, or a
// histogram's sample count. ok is false when there is no such sample.
func Value(fams map[string]*dto.MetricFamily, name, labels string) (v float64, ok bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.Metric {
		if LabelKey(m.Label) != labels {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}
