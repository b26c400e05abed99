package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/stacktest"
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
