package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/internal/denycache"
	"github.com/sluice-rl/sluice/internal/metrics"
	"github.com/sluice-rl/sluice/internal/server"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// tracingShutdownTimeout bounds the flush of buffered spans at exit.
const tracingShutdownTimeout = 5 * time.Second

// observability is what serve wires in for metrics and tracing. Its
// methods do nothing for the parts that are off.
type observability struct {
	reg     *prometheus.Registry
	metrics *metrics.Metrics // nil when SLUICE_METRICS=false
	tracing *tracing.Tracing // disabled unless TRACING_ENABLED=true
}

// newObservability builds the metrics registry (sluice's families and the
// Go runtime and process collectors) and the tracer, as s says.
func newObservability(ctx context.Context, s *settings, log *logrus.Logger) (*observability, error) {
	o := &observability{}
	if s.Metrics {
		o.reg = prometheus.NewRegistry()
		if err := o.reg.Register(collectors.NewGoCollector()); err != nil {
			return nil, fmt.Errorf("metrics: register the Go collector: %w", err)
		}
		if err := o.reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
			return nil, fmt.Errorf("metrics: register the process collector: %w", err)
		}
		// USE_PROMETHEUS=true (PrometheusAddr set): the reference's names
		// too, which dashboards and alerts written for it query.
		values, err := metrics.ParseDetailedValues(s.DetailedValues)
		if err != nil {
			return nil, err
		}
		m, err := metrics.New(o.reg, metrics.Options{NearLimitRatio: nearLimitRatio(s.NearLimitRatio), IncumbentNames: s.PrometheusAddr != "",
			DetailedValues: values, Logger: log})
		if err != nil {
			return nil, err
		}
		o.metrics = m
		bv := readBuildVersion()
		if err := m.RegisterBuildInfo(metrics.BuildInfo{Version: bv.Version, Revision: bv.Revision,
			Modified: bv.Modified, GoVersion: bv.GoVersion}); err != nil {
			return nil, err
		}
	}
	tr, err := tracing.Setup(ctx, tracing.Options{
		Enabled:           s.Tracing,
		ServiceName:       s.TracingServiceName,
		ServiceVersion:    version,
		ServiceNamespace:  s.TracingServiceNamespace,
		ServiceInstanceID: s.TracingServiceInstanceID,
		Protocol:          s.TracingProtocol,
		SamplingRatio:     &s.TracingSamplingRate,
	})
	if err != nil {
		return nil, err
	}
	o.tracing = tr
	if tr.Enabled() {
		log.WithField("service_name", s.TracingServiceName).Info("tracing: exporting spans over OTLP (OTEL_* settings)")
	}
	return o, nil
}

// backend decorates b with the metrics and tracing backend decorators.
func (o *observability) backend(b backend.Backend) backend.Backend {
	return o.tracing.InstrumentBackend(o.metrics.InstrumentBackend(b))
}

// batchObserver returns the hook the Redis backend calls with each
// pipeline's size, or nil when metrics are off.
func (o *observability) batchObserver() func(int) {
	if o.metrics == nil {
		return nil
	}
	return o.metrics.ObserveBatch
}

// registerDenyCache exports the local denial cache's counters.
func (o *observability) registerDenyCache(c *denycache.Backend) error {
	return o.metrics.RegisterDenyCache(func() (hits, misses, evictions uint64) {
		st := c.Stats()
		return st.Hits, st.Misses, st.Evictions
	})
}

// registerAnnouncements exports the announcer's totals.
func (o *observability) registerAnnouncements(a *redis.Announcer) error {
	return o.metrics.RegisterAnnouncements(func() (published, failed, dropped, received uint64) {
		st := a.Stats()
		return st.Published, st.Failed, st.Dropped, st.Received
	})
}

// registerReplicas exports the replicas' lag as their masters report it.
func (o *observability) registerReplicas(b *redis.Backend, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = redis.DefaultTimeout
	}
	return o.metrics.RegisterReplicas(func(ctx context.Context) ([]metrics.ReplicaStat, error) {
		rs, err := b.Replicas(ctx)
		out := make([]metrics.ReplicaStat, len(rs))
		for i, r := range rs {
			out[i] = metrics.ReplicaStat{Master: r.Master, Replica: r.Replica, Lag: r.Lag, Behind: r.Behind}
		}
		return out, err
	}, timeout)
}

// registerMemory exports an embedded backend's size and evictions.
func (o *observability) registerMemory(role string, b *memory.Backend) error {
	return o.metrics.RegisterMemoryBackend(role, func() (int, uint64) { return b.Len(), b.Evictions() })
}

// observer is the service's Observer: nil (not a nil *Metrics) when
// metrics are off, so the service skips building events.
func (o *observability) observer() service.Observer {
	if o.metrics == nil {
		return nil
	}
	return o.metrics
}

// load wraps a config loader to count failed loads.
func (o *observability) load(f func() (*descriptor.Config, error)) func() (*descriptor.Config, error) {
	return func() (*descriptor.Config, error) {
		c, err := f()
		if err != nil {
			o.metrics.ConfigLoadFailed()
		}
		return c, err
	}
}

// apply wraps the config setter to count successful loads.
func (o *observability) apply(f func(*descriptor.Config)) func(*descriptor.Config) {
	return func(c *descriptor.Config) {
		f(c)
		o.metrics.ConfigLoaded(len(c.Domains()))
		o.metrics.ConfigApplied(c)
	}
}

// serverOptions returns the gRPC interceptors and server options.
func (o *observability) serverOptions() ([]grpc.UnaryServerInterceptor, []grpc.ServerOption) {
	var in []grpc.UnaryServerInterceptor
	if o.metrics != nil {
		in = append(in, o.metrics.UnaryServerInterceptor())
	}
	return in, o.tracing.ServerOptions()
}

// mount serves /metrics on srv's HTTP server.
func (o *observability) mount(srv *server.Server, log *logrus.Logger) {
	if o.reg == nil {
		return
	}
	srv.Handle("/metrics", o.metricsHandler(log))
}

// metricsHandler serves the registry in Prometheus' text format.
func (o *observability) metricsHandler(log *logrus.Logger) http.Handler {
	return promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{
		ErrorLog:            log,
		MaxRequestsInFlight: 4,
	})
}

// startPrometheus serves the metrics on a listener of their own at addr,
// under path (the reference's USE_PROMETHEUS listener).
func (o *observability) startPrometheus(addr, path string, limits server.HTTPLimits, log *logrus.Logger) (*auxServer, error) {
	mux := http.NewServeMux()
	mux.Handle(path, o.metricsHandler(log))
	return startAux("metrics (USE_PROMETHEUS)", addr, mux, limits, log)
}

// shutdown flushes the spans still buffered.
func (o *observability) shutdown(log *logrus.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	if err := o.tracing.Shutdown(ctx); err != nil {
		log.WithError(err).Warn("tracing: spans lost at shutdown")
	}
}

// nearLimitRatio is NEAR_LIMIT_RATIO for metrics.Options, where 0 means
// the default: the incumbent's 0 (every admitted descriptor that used
// anything is near its limit, floor(capacity × 0) = 0) is passed as the
// smallest positive number, whose product with any capacity also floors
// to 0.
func nearLimitRatio(r float64) float64 {
	if r == 0 {
		return math.SmallestNonzeroFloat64
	}
	return r
}
