package main

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

func TestHealthProbe(t *testing.T) {
	domain := func(name, mode string) string {
		y := "domain: " + name + "\n"
		if mode != "" {
			y += "failure_mode: " + mode + "\n"
		}
		return y + "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	}
	tests := []struct {
		name     string
		domains  []string
		pingFail bool
		require  bool // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
		want     bool
	}{
		{"ping works", []string{domain("a", "")}, false, false, true},
		{"ping fails, default failure mode", []string{domain("a", "")}, true, false, false},
		{"ping fails, error", []string{domain("a", "error")}, true, false, false},
		{"ping fails, deny", []string{domain("a", "deny")}, true, false, false},
		{"ping fails, allow", []string{domain("a", "allow")}, true, false, true},
		{"ping fails, local", []string{domain("a", "local")}, true, false, true},
		{"ping fails, one domain needs the backend", []string{domain("a", "allow"), domain("b", "error")}, true, false, false},
		{"ping fails, no domains", nil, true, false, true},
		{"no domains, one required", nil, false, true, false},
		{"a domain, one required", []string{domain("a", "")}, false, true, true},
		{"a domain in allow mode, one required, ping fails", []string{domain("a", "allow")}, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := stacktest.ParseConfig(t, tt.domains...)
			mem := memory.New(memory.Options{})
			if tt.pingFail {
				mem.Close() // a closed backend fails its Ping
			}
			defer mem.Close()
			log := logrus.New()
			log.SetOutput(io.Discard)
			var got []bool
			p := &healthProbe{
				backend:  mem,
				config:   func() *descriptor.Config { return cfg },
				set:      func(ok bool) { got = append(got, ok) },
				interval: time.Second,
				log:      log,

				requireDomains: tt.require,
			}
			p.check(context.Background())
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("serving %v, want [%v]", got, tt.want)
			}
		})
	}
}

// flakyBackend is the embedded backend with a Ping that fails while down
// is set, so one probe can see a backend come and go.
type flakyBackend struct {
	*memory.Backend
	down bool
}

func (b *flakyBackend) Ping(ctx context.Context) error {
	if b.down {
		return errors.New("backend down")
	}
	return b.Backend.Ping(ctx)
}

// TestHealthProbeAfterStart: like the reference, health fails until the
// backend first answers and then no longer follows it, so that a liveness
// probe on /healthcheck (Envoy Gateway's) does not restart every pod while
// Redis is down; with follow (SLUICE_HEALTH_FOLLOWS_BACKEND) it follows
// every ping.
func TestHealthProbeAfterStart(t *testing.T) {
	tests := []struct {
		name   string
		follow bool
		pings  []bool // ping works
		want   []bool // serving after each ping
	}{
		{"down from the start", false, []bool{false, false}, []bool{false, false}},
		{"down from the start, then up", false, []bool{false, true, false}, []bool{false, true, true}},
		{"up, then down", false, []bool{true, false, false, true}, []bool{true, true, true, true}},
		{"following: down from the start", true, []bool{false, true}, []bool{false, true}},
		{"following: up, then down, then up", true, []bool{true, false, true}, []bool{true, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := stacktest.ParseConfig(t, "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
			b := &flakyBackend{Backend: memory.New(memory.Options{})}
			defer b.Close()
			log := logrus.New()
			log.SetOutput(io.Discard)
			var got []bool
			p := &healthProbe{
				backend:  b,
				config:   func() *descriptor.Config { return cfg },
				set:      func(ok bool) { got = append(got, ok) },
				interval: time.Second,
				log:      log,
				follow:   tt.follow,
			}
			for _, up := range tt.pings {
				b.down = !up
				p.check(context.Background())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("pings %v: serving %v, want %v", tt.pings, got, tt.want)
			}
		})
	}
}
