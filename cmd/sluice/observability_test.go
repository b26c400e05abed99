package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/metrics/metricstest"
)

// namedYearly limits k=<any> to n per year with a rule named per_k.
func namedYearly(domain string, n string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {name: per_k, unit: year, requests_per_unit: " + n + "}\n"
}

// rlClient dials the served gRPC port.
func rlClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func kv(domain, v string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: v}}},
	}}
}

// scrapeMetrics GETs /metrics and parses the text exposition.
func (s *served) scrapeMetrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := s.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	return metricstest.Parse(t, strings.NewReader(body))
}

// TestMetricsEndpoint runs `sluice serve` in process, sends traffic over
// gRPC and /json, reloads the configuration (a bad edit, then a good one),
// and checks what /metrics reports over HTTP.
func TestMetricsEndpoint(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", namedYearly("api", "20"))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "SLUICE_RELOAD_INTERVAL=20ms"})

	client := rlClient(t, s.grpc)
	over := 0
	for range 25 {
		resp, err := client.ShouldRateLimit(context.Background(), kv("api", "v"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	if over != 5 {
		t.Fatalf("%d of 25 over the limit of 20", over)
	}
	resp, err := http.Post("http://"+s.http+"/json", "application/json",
		strings.NewReader(`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"w"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	fams := s.scrapeMetrics(t)
	for _, w := range []struct {
		name, labels string
		want         float64
	}{
		{"sluice_decisions_total", "domain=api,outcome=ok", 20 + 1},
		{"sluice_decisions_total", "domain=api,outcome=over_limit", 5},
		{"sluice_decisions_near_limit_total", "domain=api", 4},
		{"sluice_rule_hits_total", "domain=api,rule=per_k", 26},
		{"sluice_rule_over_limit_total", "domain=api,rule=per_k", 5},
		{"sluice_requests_total", "code=OK", 26},
		{"sluice_requests_over_limit_total", "", 5},
		{"sluice_request_duration_seconds", "method=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 25},
		{"sluice_backend_checks_total", "", 26},
		{"sluice_backend_decide_duration_seconds", "", 26},
		{"sluice_config_reloads_total", "result=success", 1},
		{"sluice_config_reloads_total", "result=failure", 0},
		{"sluice_config_domains", "", 1},
		// A test binary has no version or revision stamped.
		{"sluice_build_info", "goversion=" + runtime.Version() + ",modified=false,revision=,version=dev", 1},
	} {
		if got, ok := metricstest.Value(fams, w.name, w.labels); !ok || got != w.want {
			t.Errorf("%s{%s} = %v (present %v), want %v", w.name, w.labels, got, ok, w.want)
		}
	}
	for _, f := range []string{"go_goroutines", "process_cpu_seconds_total", "sluice_config_last_reload_success_timestamp_seconds"} {
		if fams[f] == nil {
			t.Errorf("/metrics has no %s", f)
		}
	}

	// A bad edit is counted and the old config stays; a good one is counted.
	writeConfig(t, dir, "api.yaml", "domain: api\ndescriptors: [\n")
	waitFor(t, "the failed reload to be counted", func() bool {
		v, _ := metricstest.Value(s.scrapeMetrics(t), "sluice_config_reloads_total", "result=failure")
		return v == 1
	})
	writeConfig(t, dir, "api.yaml", namedYearly("api", "20"))
	writeConfig(t, dir, "other.yaml", namedYearly("other", "5"))
	waitFor(t, "the good reload to be counted", func() bool {
		fams := s.scrapeMetrics(t)
		v, _ := metricstest.Value(fams, "sluice_config_reloads_total", "result=success")
		d, _ := metricstest.Value(fams, "sluice_config_domains", "")
		return v >= 2 && d == 2
	})
}

func TestMetricsOff(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", namedYearly("api", "20"))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "SLUICE_METRICS=false"})
	if code, _ := s.get(t, "/metrics"); code != http.StatusNotFound {
		t.Fatalf("/metrics with SLUICE_METRICS=false: %d, want 404", code)
	}
}

// collector is a fake OTLP/HTTP trace collector.
type collector struct {
	mu    sync.Mutex
	spans []*tracepb.ResourceSpans
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.spans = append(c.spans, req.ResourceSpans...)
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// TestTracingExportsSpans runs serve with TRACING_ENABLED against a fake
// OTLP/HTTP collector, sends a call carrying a traceparent, stops serve
// (which flushes) and checks the exported spans.
func TestTracingExportsSpans(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")

	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", namedYearly("api", "20"))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "TRACING_ENABLED=true", "TRACING_SERVICE_NAME=sluice-e2e"})
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if _, err := rlClient(t, s.grpc).ShouldRateLimit(ctx, kv("api", "v")); err != nil {
		t.Fatal(err)
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, s.stderr)
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	var server, backend *tracepb.Span
	serviceName := ""
	for _, rs := range col.spans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				serviceName = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				switch sp.Name {
				case "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit":
					server = sp
				case "sluice.backend.Decide":
					backend = sp
				}
			}
		}
	}
	if server == nil || backend == nil {
		t.Fatalf("exported spans %v: want the ShouldRateLimit server span and the backend span", col.spans)
	}
	if got := hex.EncodeToString(server.TraceId); got != traceID {
		t.Errorf("server span trace %s, want %s", got, traceID)
	}
	if got := hex.EncodeToString(server.ParentSpanId); got != parentID {
		t.Errorf("server span parent %s, want %s", got, parentID)
	}
	if hex.EncodeToString(backend.ParentSpanId) != hex.EncodeToString(server.SpanId) {
		t.Errorf("backend span is not a child of the server span")
	}
	if serviceName != "sluice-e2e" {
		t.Errorf("service.name %q", serviceName)
	}
}

func TestObservabilitySettings(t *testing.T) {
	s, err := parseServe(nil, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Metrics || s.NearLimitRatio != 0.8 || s.Tracing || s.TracingServiceName != "sluice" || s.TracingProtocol != "" || s.TracingSamplingRate != 1 {
		t.Errorf("defaults: metrics %v ratio %v tracing %v name %q protocol %q rate %v",
			s.Metrics, s.NearLimitRatio, s.Tracing, s.TracingServiceName, s.TracingProtocol, s.TracingSamplingRate)
	}
	s, err = parseServe([]string{"--tracing-sampling-rate=0.5"}, []string{"SLUICE_METRICS=false", "NEAR_LIMIT_RATIO=0.9",
		"TRACING_ENABLED=true", "TRACING_SERVICE_NAME=rl", "TRACING_EXPORTER_PROTOCOL=GRPC", "TRACING_SAMPLING_RATE=0.1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.Metrics || s.NearLimitRatio != 0.9 || !s.Tracing || s.TracingServiceName != "rl" || s.TracingProtocol != "grpc" || s.TracingSamplingRate != 0.5 {
		t.Errorf("set: metrics %v ratio %v tracing %v name %q protocol %q rate %v",
			s.Metrics, s.NearLimitRatio, s.Tracing, s.TracingServiceName, s.TracingProtocol, s.TracingSamplingRate)
	}
	if len(s.ignored) != 0 {
		t.Errorf("implemented variables listed as ignored: %v", s.ignored)
	}
	for _, tt := range []struct{ env, want string }{
		{"NEAR_LIMIT_RATIO=high", `NEAR_LIMIT_RATIO="high"`},
		{"TRACING_SAMPLING_RATE=2", "TRACING_SAMPLING_RATE: 2"},
		{"TRACING_EXPORTER_PROTOCOL=zipkin", `TRACING_EXPORTER_PROTOCOL="zipkin"`},
	} {
		if _, err := parseServe(nil, []string{tt.env}, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.env, err, tt.want)
		}
	}
}
