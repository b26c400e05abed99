package main

import (
	"io"
	"testing"

	"github.com/sluice-rl/sluice/internal/server"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/xdstest"
)

// TestRequestBoundSettings: SLUICE_MAX_REQUEST_BYTES defaults to the
// incumbent's 4 MiB, SLUICE_MAX_DESCRIPTORS and SLUICE_MAX_REQUEST_RULES
// to 8192, above what Envoy Gateway sends in one call, in Envoy Gateway's
// environment too; 0 means no bound (but the request's size); the flags
// win.
func TestRequestBoundSettings(t *testing.T) {
	tests := []struct {
		name      string
		args, env []string
		bytes     int
		bounds    service.RequestBounds // what the service is given
	}{
		{"defaults", nil, nil, 4 << 20, service.RequestBounds{MaxDescriptors: 8192, MaxRequestRules: 8192}},
		{"Envoy Gateway's environment", nil, xdstest.EnvoyGatewayEnv, 4 << 20, service.RequestBounds{MaxDescriptors: 8192, MaxRequestRules: 8192}},
		{"environment", nil, []string{"SLUICE_MAX_REQUEST_BYTES=1048576", "SLUICE_MAX_DESCRIPTORS=64", "SLUICE_MAX_REQUEST_RULES=100"},
			1 << 20, service.RequestBounds{MaxDescriptors: 64, MaxRequestRules: 100}},
		{"no bounds", nil, []string{"SLUICE_MAX_DESCRIPTORS=0", "SLUICE_MAX_REQUEST_RULES=0"}, 4 << 20, service.RequestBounds{MaxDescriptors: -1, MaxRequestRules: -1}},
		{"flags win", []string{"--max-request-bytes=8388608", "--max-descriptors=10000", "--max-request-rules=20000"}, []string{"SLUICE_MAX_DESCRIPTORS=64"},
			8 << 20, service.RequestBounds{MaxDescriptors: 10000, MaxRequestRules: 20000}},
	}
	if server.DefaultMaxRequestBytes != 4<<20 || service.DefaultMaxDescriptors != 8192 || service.DefaultMaxRequestRules != 8192 {
		t.Fatalf("defaults %d bytes, %d descriptors, %d rules", server.DefaultMaxRequestBytes, service.DefaultMaxDescriptors, service.DefaultMaxRequestRules)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(tt.args, tt.env, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if s.MaxRequestBytes != tt.bytes || s.requestBounds() != tt.bounds {
				t.Errorf("%d bytes, %+v; want %d, %+v", s.MaxRequestBytes, s.requestBounds(), tt.bytes, tt.bounds)
			}
		})
	}
}

// TestRequestBoundSettingErrors: a bad bound stops the start, naming the
// setting and the value.
func TestRequestBoundSettingErrors(t *testing.T) {
	tests := []struct {
		name      string
		args, env []string
		want      string
	}{
		{"request bytes too small", nil, []string{"SLUICE_MAX_REQUEST_BYTES=1000"}, "SLUICE_MAX_REQUEST_BYTES: 1000: must be at least 1024"},
		{"request bytes too large", []string{"--max-request-bytes=4294967296"}, nil, "--max-request-bytes: 4294967296: must be at least 1024 and at most 2147483647"},
		{"negative descriptors", nil, []string{"SLUICE_MAX_DESCRIPTORS=-1"}, "SLUICE_MAX_DESCRIPTORS: -1: must be 0 (no bound) or more"},
		{"descriptors not a number", nil, []string{"SLUICE_MAX_DESCRIPTORS=many"}, `SLUICE_MAX_DESCRIPTORS="many": want a whole number`},
		{"negative rules", []string{"--max-request-rules=-5"}, nil, "--max-request-rules: -5: must be 0 (no bound) or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parseServeCase(t, tt.args, tt.env, tt.want)
		})
	}
}
