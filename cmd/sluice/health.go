package main

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// healthProbe pings the backend every interval and reports the server
// healthy unless the backend is down and some domain needs it, or
// requireDomains is set and the config has no domain.
//
// The backend counts as down while it has never answered a ping (as the
// reference is unhealthy until its first Redis PING succeeds) and, only
// when follow is set, whenever the last ping failed. The reference's
// health does not follow Redis after that first PING (unless
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION), and Envoy Gateway probes
// liveness on /healthcheck: following Redis by default would restart
// every pod during a Redis outage.
type healthProbe struct {
	backend  backend.Backend
	config   func() *descriptor.Config
	set      func(serving bool)
	interval time.Duration
	log      logrus.FieldLogger
	// requireDomains keeps health failing while the config has no domain
	// (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	requireDomains bool
	// follow keeps health following every ping, not only until the first
	// that works (SLUICE_HEALTH_FOLLOWS_BACKEND).
	follow bool
	// ready reports whether the configuration source allows serving
	// (false until the first xDS configuration); nil means always.
	ready func() bool

	lastErr string // the last ping error logged, "" when the last ping worked

	mu       sync.Mutex // orders report calls from the probe and from reloads
	pingDown bool       // the last ping failed
	answered bool       // some ping has worked
}

// run probes every interval until ctx is done.
func (p *healthProbe) run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.check(ctx)
		}
	}
}

// check pings the backend once and reports the result.
func (p *healthProbe) check(ctx context.Context) {
	pingCtx, cancel := context.WithTimeout(ctx, min(p.interval, 2*time.Second))
	defer cancel()
	err := p.backend.Ping(pingCtx)
	if ctx.Err() != nil {
		return // shutting down: not the backend's fault
	}
	switch {
	case err != nil && err.Error() != p.lastErr:
		p.lastErr = err.Error()
		p.log.WithError(err).Warn("backend ping failed")
	case err == nil && p.lastErr != "":
		p.lastErr = ""
		p.log.Info("backend ping works again")
	}
	p.mu.Lock()
	p.pingDown = err != nil
	p.answered = p.answered || err == nil
	p.mu.Unlock()
	p.report()
}

// report tells set the health from the last ping and the current config.
// The reload path calls it after every config change.
func (p *healthProbe) report() {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.config()
	down := p.pingDown && (p.follow || !p.answered)
	ok := !down || !needsBackend(c)
	if p.requireDomains && (c == nil || len(c.Domains()) == 0) {
		ok = false
	}
	if p.ready != nil && !p.ready() {
		ok = false
	}
	p.set(ok)
}

// needsBackend reports whether some domain of c answers badly without its
// backend: failure_mode error (Unavailable) or deny (everything over the
// limit). Domains in allow or local mode, and unknown domains, answer
// usefully without it, so an instance serving only those stays healthy.
func needsBackend(c *descriptor.Config) bool {
	for _, name := range c.Domains() {
		switch c.Domain(name).FailureMode {
		case descriptor.FailureError, descriptor.FailureDeny:
			return true
		}
	}
	return false
}
