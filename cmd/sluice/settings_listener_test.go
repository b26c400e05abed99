package main

import (
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/server"
)

var mtls = []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/c", "GRPC_SERVER_TLS_KEY=/k", "GRPC_CLIENT_TLS_CACERT=/ca"}

func TestListenerSettings(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		env    []string
		access server.Access
		limits server.HTTPLimits
	}{
		{"defaults", nil, nil, server.Access{}, server.HTTPLimits{
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 15 * time.Second, WriteTimeout: 30 * time.Second,
			IdleTimeout: 60 * time.Second, MaxConnections: 1024,
		}},
		{"environment", nil, slices.Concat(mtls, []string{"SLUICE_HTTP_TLS=true", "SLUICE_JSON=on", "SLUICE_PRIVILEGED_REQUESTS=trusted",
			"SLUICE_TRUSTED_CLIENT_SANS=a.example, spiffe://x/y", "SLUICE_HTTP_READ_TIMEOUT=2s", "SLUICE_HTTP_READ_HEADER_TIMEOUT=1s",
			"SLUICE_HTTP_WRITE_TIMEOUT=3s", "SLUICE_HTTP_IDLE_TIMEOUT=4s", "SLUICE_HTTP_MAX_CONNECTIONS=5"}),
			server.Access{HTTPTLS: true, JSON: server.JSONOn, Privileged: server.PrivilegedTrusted, TrustedSANs: []string{"a.example", "spiffe://x/y"}},
			server.HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second, IdleTimeout: 4 * time.Second, MaxConnections: 5}},
		{"flags", []string{"--json=off", "--privileged-requests=none"}, nil, server.Access{JSON: server.JSONOff, Privileged: server.PrivilegedNone}, server.HTTPLimits{
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 15 * time.Second, WriteTimeout: 30 * time.Second,
			IdleTimeout: 60 * time.Second, MaxConnections: 1024,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(tt.args, tt.env, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			a := s.Listener.serverAccess()
			if a.HTTPTLS != tt.access.HTTPTLS || a.JSON != tt.access.JSON || a.Privileged != tt.access.Privileged || !slices.Equal(a.TrustedSANs, tt.access.TrustedSANs) {
				t.Errorf("access %+v, want %+v", a, tt.access)
			}
			if l := s.Listener.httpLimits(); l != tt.limits {
				t.Errorf("limits %+v, want %+v", l, tt.limits)
			}
		})
	}
}

func TestListenerSettingErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"HTTP TLS without gRPC TLS", nil, []string{"SLUICE_HTTP_TLS=true"}, "SLUICE_HTTP_TLS: TLS on the HTTP port uses the gRPC TLS files"},
		{"json mode", nil, []string{"SLUICE_JSON=maybe"}, `SLUICE_JSON="maybe"`},
		{"privileged mode", nil, []string{"SLUICE_PRIVILEGED_REQUESTS=some"}, `SLUICE_PRIVILEGED_REQUESTS="some"`},
		{"trusted without client CA", nil, []string{"SLUICE_PRIVILEGED_REQUESTS=trusted", "SLUICE_TRUSTED_CLIENT_SANS=a"}, "SLUICE_PRIVILEGED_REQUESTS: trusted needs GRPC_CLIENT_TLS_CACERT"},
		{"trusted without SANs", nil, append([]string{"SLUICE_PRIVILEGED_REQUESTS=trusted"}, mtls...), "SLUICE_PRIVILEGED_REQUESTS: trusted needs SLUICE_TRUSTED_CLIENT_SANS"},
		{"SANs without trusted", []string{"--trusted-client-san=a"}, mtls, "--trusted-client-san: trusted SANs mean something only"},
		{"zero read timeout", nil, []string{"SLUICE_HTTP_READ_TIMEOUT=0s"}, "SLUICE_HTTP_READ_TIMEOUT: duration 0s must be positive"},
		{"negative idle timeout", []string{"--http-idle-timeout=-1s"}, nil, "--http-idle-timeout: duration -1s must be positive"},
		{"no connections", nil, []string{"SLUICE_HTTP_MAX_CONNECTIONS=0"}, "SLUICE_HTTP_MAX_CONNECTIONS: 0: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parseServeCase(t, tt.args, tt.env, tt.want)
		})
	}
}
