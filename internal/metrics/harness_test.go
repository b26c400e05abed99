package metrics

import (
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/internal/metrics/metricstest"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// t0 is the fake clock's start: the beginning of an hour, so that
// fixed windows do not roll over during a test.
var t0 = time.Date(2027, 1, 4, 10, 0, 0, 0, time.UTC)

// harness is a real service.Service on the memory backend, observed by a
// Metrics registered on its own registry.
type harness struct {
	reg   *prometheus.Registry
	m     *Metrics
	svc   *service.Service
	clock *testenv.Clock
}

// newRegistered returns Metrics made with opts on a fresh registry, and
// the registry.
func newRegistered(tb testing.TB, opts Options) (*Metrics, *prometheus.Registry) {
	tb.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return m, reg
}

// newHarness parses yaml into the config and builds the service.
// opts.Backend defaults to the memory backend, instrumented.
func newHarness(t *testing.T, mo Options, so service.Options, yaml string) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry(), clock: testenv.NewClock(t0)}
	if mo.Now == nil {
		mo.Now = h.clock.Now
	}
	if mo.Logger == nil {
		mo.Logger = stacktest.QuietLogger()
	}
	m, err := New(h.reg, mo)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	if so.Backend == nil {
		so.Backend = stacktest.Memory(t, memory.Options{Now: h.clock.Now, SweepInterval: -1})
	}
	so.Backend = m.InstrumentBackend(so.Backend)
	so.Observer = m
	if so.Logger == nil {
		so.Logger = stacktest.QuietLogger()
	}
	h.svc = service.New(so)
	cfg := parseConfig(t, yaml)
	h.svc.SetConfig(cfg)
	m.ConfigLoaded(len(cfg.Domains()))
	return h
}

// parseConfig builds a config from one YAML document.
func parseConfig(t testing.TB, yaml string) *descriptor.Config {
	t.Helper()
	return stacktest.ParseConfig(t, yaml)
}

// call sends one request; it returns the overall code, or the error.
func (h *harness) call(t *testing.T, req *rlsv3.RateLimitRequest) (rlsv3.RateLimitResponse_Code, error) {
	t.Helper()
	resp, err := h.svc.ShouldRateLimit(context.Background(), req)
	return resp.GetOverallCode(), err
}

// rq builds a request.
func rq(domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return stacktest.Request(domain, ds...)
}

// d builds a descriptor from key, value pairs.
func d(kv ...string) *rlv3.RateLimitDescriptor { return stacktest.Descriptor(kv...) }

// cost sets a descriptor's hits_addend.
func cost(n uint64, x *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	return stacktest.WithAddend(x, n)
}

// scrape fetches the registry's metrics over HTTP, as Prometheus would,
// through promhttp in the text exposition format, and parses them.
func scrape(t *testing.T, reg prometheus.Gatherer) families {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	return scrapeURL(t, srv.URL)
}

// scrapeURL fetches and parses the text exposition at url.
func scrapeURL(t *testing.T, url string) families {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s: %s", resp.Status, body)
	}
	return families(metricstest.Parse(t, resp.Body))
}

// families is a parsed scrape.
type families map[string]*dto.MetricFamily

// value returns the sample of family name whose labels are exactly
// labels ("k=v,k=v" sorted by key; "" for none): metricstest.Value.
func (f families) value(name, labels string) (float64, bool) {
	return metricstest.Value(f, name, labels)
}

// series lists the label sets of family name.
func (f families) series(name string) []string {
	var out []string
	if fam := f[name]; fam != nil {
		for _, m := range fam.Metric {
			out = append(out, metricstest.LabelKey(m.Label))
		}
	}
	sort.Strings(out)
	return out
}

// want is one expected sample.
type want struct {
	name, labels string
	value        float64
}

// check asserts every expected sample.
func (f families) check(t *testing.T, wants []want) {
	t.Helper()
	for _, w := range wants {
		got, ok := f.value(w.name, w.labels)
		if !ok {
			t.Errorf("%s{%s}: missing (have %q)", w.name, w.labels, f.series(w.name))
			continue
		}
		if got != w.value {
			t.Errorf("%s{%s} = %v, want %v", w.name, w.labels, got, w.value)
		}
	}
}

// churn sends each of reqs 200 times from its own goroutine while the
// service and the metrics apply cfgs in turn, 100 changes in all, then,
// once every request is answered, applies cfgs[0] once more.
func (h *harness) churn(t *testing.T, cfgs []*descriptor.Config, reqs ...*rlsv3.RateLimitRequest) {
	t.Helper()
	var wg sync.WaitGroup
	for _, req := range reqs {
		wg.Go(func() {
			for range 200 {
				if _, err := h.call(t, req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 100 {
		c := cfgs[i%len(cfgs)]
		h.svc.SetConfig(c)
		h.m.ConfigApplied(c)
	}
	wg.Wait()
	h.svc.SetConfig(cfgs[0])
	h.m.ConfigApplied(cfgs[0])
}
