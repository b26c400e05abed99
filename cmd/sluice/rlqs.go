package main

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/internal/rlqs"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// rlqsSettings configure the Rate Limit Quota Service (docs/rlqs.md).
type rlqsSettings struct {
	Enabled       bool
	AssignmentTTL time.Duration
	AbandonAfter  time.Duration
	DemandWindow  time.Duration
}

// rlqsFlags defines the Rate Limit Quota Service's settings.
func rlqsFlags(boolean func(*bool, string, string, bool, string), duration func(*time.Duration, string, string, time.Duration, string), r *rlqsSettings) {
	boolean(&r.Enabled, "rlqs", "SLUICE_RLQS", true,
		"serve Envoy's Rate Limit Quota Service (StreamRateLimitQuotas) on the gRPC listener, beside ShouldRateLimit")
	duration(&r.AssignmentTTL, "rlqs-assignment-ttl", "SLUICE_RLQS_ASSIGNMENT_TTL", rlqs.DefaultAssignmentTTL,
		"how long an assignment lives in Envoy without a newer one, in whole seconds (then Envoy's expired_assignment_behavior applies); also how long an Envoy's share is kept after its last report")
	duration(&r.AbandonAfter, "rlqs-abandon-after", "SLUICE_RLQS_ABANDON_AFTER", rlqs.DefaultAbandonAfter,
		"how long a bucket may report no request before Envoy is told to abandon it")
	duration(&r.DemandWindow, "rlqs-demand-window", "SLUICE_RLQS_DEMAND_WINDOW", rlqs.DefaultDemandWindow,
		"time constant of the moving average of an Envoy's reported demand that its share follows")
}

// newRLQS builds the Rate Limit Quota Service on b's quota store, or
// returns nil when it is off. reg may be nil (metrics off).
func newRLQS(s *settings, b *backends, config func() *descriptor.Config, reg prometheus.Registerer, log *logrus.Logger) (*rlqs.Service, error) {
	if !s.RLQS.Enabled {
		return nil, nil
	}
	var m *rlqs.Metrics
	if reg != nil {
		var err error
		if m, err = rlqs.NewMetrics(reg); err != nil {
			return nil, err
		}
	}
	svc, err := rlqs.New(rlqs.Options{
		Store:         b.quota,
		Config:        config,
		AssignmentTTL: s.RLQS.AssignmentTTL,
		AbandonAfter:  s.RLQS.AbandonAfter,
		DemandWindow:  s.RLQS.DemandWindow,
		Logger:        log,
		Metrics:       m,
	})
	if err != nil {
		return nil, fmt.Errorf("rate limit quota service: %w", err)
	}
	return svc, nil
}

// rlqsServices is the registration of svc for server.Options.Services.
func rlqsServices(svc *rlqs.Service) []func(grpc.ServiceRegistrar) {
	if svc == nil {
		return nil
	}
	return []func(grpc.ServiceRegistrar){svc.Register}
}

// registerer is o's metrics registry, or nil when metrics are off.
func (o *observability) registerer() prometheus.Registerer {
	if o.reg == nil {
		return nil
	}
	return o.reg
}
