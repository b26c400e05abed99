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
			IdleTimeout: 60 * time.Second, MaxConnections: 1024, MaxConnectionsPerAddress: 256,
		}},
		{"environment", nil, slices.Concat(mtls, []string{"SLUICE_HTTP_TLS=true", "SLUICE_JSON=on", "SLUICE_PRIVILEGED_REQUESTS=trusted",
			"SLUICE_TRUSTED_CLIENT_SANS=a.example, spiffe://x/y", "SLUICE_HTTP_READ_TIMEOUT=2s", "SLUICE_HTTP_READ_HEADER_TIMEOUT=1s",
			"SLUICE_HTTP_WRITE_TIMEOUT=3s", "SLUICE_HTTP_IDLE_TIMEOUT=4s", "SLUICE_HTTP_MAX_CONNECTIONS=5", "SLUICE_HTTP_MAX_CONNECTIONS_PER_ADDRESS=2"}),
			server.Access{HTTPTLS: true, JSON: server.JSONOn, Privileged: server.PrivilegedTrusted, TrustedSANs: []string{"a.example", "spiffe://x/y"}},
			server.HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second, IdleTimeout: 4 * time.Second, MaxConnections: 5, MaxConnectionsPerAddress: 2}},
		{"flags", []string{"--json=off", "--privileged-requests=none"}, nil, server.Access{JSON: server.JSONOff, Privileged: server.PrivilegedNone}, server.HTTPLimits{
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 15 * time.Second, WriteTimeout: 30 * time.Second,
			IdleTimeout: 60 * time.Second, MaxConnections: 1024, MaxConnectionsPerAddress: 256,
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

// The gRPC listener's bounds: defaults, environment, flags, and 0 for no
// bound (the incumbent's behaviour).
func TestGRPCLimitSettings(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want server.GRPCLimits
	}{
		{"defaults", nil, nil, server.GRPCLimits{MaxConcurrentStreams: 1024, MaxHeaderListBytes: 65536, MaxConnections: 16384, MaxConnectionsPerAddress: 4096,
			MaxConnectionIdle: time.Hour, MaxInFlight: 10000, MaxInFlightPerConnection: 1000, RequestTimeout: 5 * time.Second, MaxEarlyResetsPerSecond: 100}},
		{"environment", nil, []string{"SLUICE_GRPC_MAX_CONCURRENT_STREAMS=100", "SLUICE_GRPC_MAX_HEADER_LIST_BYTES=8192",
			"SLUICE_GRPC_MAX_CONNECTIONS=50", "SLUICE_GRPC_MAX_CONNECTION_IDLE=10m", "SLUICE_MAX_IN_FLIGHT=2000",
			"SLUICE_GRPC_MAX_IN_FLIGHT_PER_CONNECTION=300", "SLUICE_GRPC_REQUEST_TIMEOUT=2s", "SLUICE_GRPC_MAX_CONNECTIONS_PER_ADDRESS=7", "SLUICE_GRPC_MAX_EARLY_RESETS_PER_SECOND=9"},
			server.GRPCLimits{MaxConcurrentStreams: 100, MaxHeaderListBytes: 8192, MaxConnections: 50, MaxConnectionIdle: 10 * time.Minute, MaxInFlight: 2000,
				MaxInFlightPerConnection: 300, RequestTimeout: 2 * time.Second, MaxConnectionsPerAddress: 7, MaxEarlyResetsPerSecond: 9}},
		{"flags: no bounds", []string{"--grpc-max-concurrent-streams=0", "--grpc-max-header-list-bytes=0", "--grpc-max-connections=0",
			"--grpc-max-connection-idle=0", "--max-in-flight=0", "--grpc-max-in-flight-per-connection=0", "--grpc-request-timeout=0", "--grpc-max-connections-per-address=0", "--grpc-max-early-resets-per-second=0"}, nil,
			server.GRPCLimits{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(tt.args, tt.env, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Listener.grpcLimits(); got != tt.want {
				t.Errorf("limits %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestGRPCLimitSettingErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"negative streams", nil, []string{"SLUICE_GRPC_MAX_CONCURRENT_STREAMS=-1"}, "SLUICE_GRPC_MAX_CONCURRENT_STREAMS: -1: must be from 0 (no bound) to 2147483647"},
		{"negative connections", []string{"--grpc-max-connections=-5"}, nil, "--grpc-max-connections: -5: must be from 0 (no bound)"},
		{"negative in flight", nil, []string{"SLUICE_MAX_IN_FLIGHT=-1"}, "SLUICE_MAX_IN_FLIGHT: -1: must be from 0 (no bound)"},
		{"negative share", nil, []string{"SLUICE_GRPC_MAX_IN_FLIGHT_PER_CONNECTION=-1"}, "SLUICE_GRPC_MAX_IN_FLIGHT_PER_CONNECTION: -1: must be from 0 (no bound)"},
		{"negative request timeout", []string{"--grpc-request-timeout=-1s"}, nil, "--grpc-request-timeout: duration -1s: must be 0 (never) or positive"},
		{"header list too small", nil, []string{"SLUICE_GRPC_MAX_HEADER_LIST_BYTES=100"}, "SLUICE_GRPC_MAX_HEADER_LIST_BYTES: 100: must be 0 (gRPC's 16 MiB) or from 1024 to 16777216"},
		{"idle too short", nil, []string{"SLUICE_GRPC_MAX_CONNECTION_IDLE=10ms"}, "SLUICE_GRPC_MAX_CONNECTION_IDLE: duration 10ms: must be 0 (never) or at least 1s"},
		{"header list too large", []string{"--grpc-max-header-list-bytes=33554432"}, nil, "--grpc-max-header-list-bytes: 33554432: must be 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parseServeCase(t, tt.args, tt.env, tt.want)
		})
	}
}
