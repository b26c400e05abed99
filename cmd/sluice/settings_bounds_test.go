package main

import (
	"io"
	"testing"

	"github.com/sluice-rl/sluice/internal/server"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/xdstest"
)

// TestRequestBoundSettings: SLUICE_MAX_REQUEST_BYTES defaults to the
// incumbent's 4 MiB and SLUICE_MAX_DESCRIPTORS to 4096, above what Envoy
// Gateway sends in one call, in Envoy Gateway's environment too; 0
// descriptors means no bound but the request's size; the flags win.
func TestRequestBoundSettings(t *testing.T) {
	tests := []struct {
		name      string
		args, env []string
		bytes     int
		desc      int // Settings.MaxDescriptors
		bound     int // what the service is given
	}{
		{"defaults", nil, nil, 4 << 20, 4096, 4096},
		{"Envoy Gateway's environment", nil, xdstest.EnvoyGatewayEnv, 4 << 20, 4096, 4096},
		{"environment", nil, []string{"SLUICE_MAX_REQUEST_BYTES=1048576", "SLUICE_MAX_DESCRIPTORS=64"}, 1 << 20, 64, 64},
		{"no descriptor bound", nil, []string{"SLUICE_MAX_DESCRIPTORS=0"}, 4 << 20, 0, -1},
		{"flags win", []string{"--max-request-bytes=8388608", "--max-descriptors=10000"}, []string{"SLUICE_MAX_DESCRIPTORS=64"}, 8 << 20, 10000, 10000},
	}
	if server.DefaultMaxRequestBytes != 4<<20 || service.DefaultMaxDescriptors != 4096 {
		t.Fatalf("defaults %d bytes, %d descriptors", server.DefaultMaxRequestBytes, service.DefaultMaxDescriptors)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(tt.args, tt.env, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if s.MaxRequestBytes != tt.bytes || s.MaxDescriptors != tt.desc || s.maxDescriptors() != tt.bound {
				t.Errorf("%d bytes, %d descriptors (service bound %d); want %d, %d (%d)",
					s.MaxRequestBytes, s.MaxDescriptors, s.maxDescriptors(), tt.bytes, tt.desc, tt.bound)
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parseServeCase(t, tt.args, tt.env, tt.want)
		})
	}
}
