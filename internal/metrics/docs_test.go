package metrics

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/rlqs"
)

// recordingRegisterer keeps what is registered on it.
type recordingRegisterer struct{ cs []prometheus.Collector }

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.cs = append(r.cs, c)
	return nil
}
func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *recordingRegisterer) Unregister(prometheus.Collector) bool    { return false }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// families returns every family name Metrics can export, from the
// collectors' descriptions.
func allFamilies(t *testing.T) []string {
	t.Helper()
	reg := &recordingRegisterer{}
	m, err := New(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterDenyCache(func() (uint64, uint64, uint64) { return 0, 0, 0 }); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterAnnouncements(func() (uint64, uint64, uint64, uint64) { return 0, 0, 0, 0 }); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterServerLoad(func() ServerCounts { return ServerCounts{} }); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterBuildInfo(BuildInfo{Version: "dev"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RegisterXDS(); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterMemoryBackend("main", func() (int, uint64) { return 0, 0 }); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterReplicas(func(context.Context) ([]ReplicaStat, error) { return nil, nil }, time.Second); err != nil {
		t.Fatal(err)
	}
	// The Rate Limit Quota Service's families live with the service.
	if _, err := rlqs.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range reg.cs {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			mm := fqName.FindStringSubmatch(d.String())
			if mm == nil {
				t.Fatalf("no fqName in %s", d)
			}
			names = append(names, mm[1])
		}
	}
	slices.Sort(names)
	return names
}

// TestDocsListEveryFamily holds docs/metrics.md to the code: every family
// has a section, and every sluice_ name the page mentions exists.
func TestDocsListEveryFamily(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	fams := allFamilies(t)
	var headed []string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "### ") {
			headed = append(headed, regexp.MustCompile(`sluice_[a-z_]+`).FindAllString(line, -1)...)
		}
	}
	for _, f := range fams {
		if !slices.Contains(headed, f) {
			t.Errorf("docs/metrics.md has no section for %s", f)
		}
	}
	for _, name := range regexp.MustCompile(`sluice_[a-z_]+`).FindAllString(string(doc), -1) {
		if !knownName(fams, name) {
			t.Errorf("docs/metrics.md mentions %s, which is not exported", name)
		}
	}
}

// knownName reports whether name is a family, or a histogram's series.
func knownName(fams []string, name string) bool {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(fams, base) {
			return true
		}
	}
	return false
}

// TestDashboardQueriesExist checks that every query of the Grafana
// dashboard uses only families sluice exports (and the standard Go and
// process collectors' families).
func TestDashboardQueriesExist(t *testing.T) {
	data, err := os.ReadFile("../../examples/grafana/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	fams := allFamilies(t)
	runtime := []string{"process_resident_memory_bytes", "process_cpu_seconds_total", "go_memstats_heap_inuse_bytes", "go_goroutines"}
	name := regexp.MustCompile(`\b(sluice|go|process)_[a-z_]+`)
	exprs := 0
	check := func(where, expr string) {
		for _, n := range name.FindAllString(expr, -1) {
			if !knownName(fams, n) && !slices.Contains(runtime, n) {
				t.Errorf("%s: %s is not an exported family", where, n)
			}
		}
	}
	for _, p := range dash.Panels {
		if p.Type != "row" && p.Type != "text" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		check("variable", v.Definition)
	}
	if exprs < 20 {
		t.Errorf("only %d queries", exprs)
	}
}

// TestPrometheusRulesUseExportedFamilies checks that the example rule file
// (examples/prometheus/sluice-rules.yaml, parsed and evaluated by
// Prometheus's own packages in examples/prometheus/validate) names only
// families sluice exports.
func TestPrometheusRulesUseExportedFamilies(t *testing.T) {
	data, err := os.ReadFile("../../examples/prometheus/sluice-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fams := allFamilies(t)
	names := regexp.MustCompile(`\bsluice_[a-z_]+`).FindAllString(string(data), -1)
	for _, n := range names {
		if !knownName(fams, n) {
			t.Errorf("sluice-rules.yaml names %s, which is not exported", n)
		}
	}
	if len(names) < 5 {
		t.Errorf("only %d family names in the rule file", len(names))
	}
}
