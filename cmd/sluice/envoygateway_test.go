package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/xdstest"
)

// TestEnvoyGatewayEnvironmentSettings parses Envoy Gateway's environment
// (xdstest.EnvoyGatewayEnv)
// and checks what sluice makes of every setting that decides where the
// configuration comes from and how it is reached: the xDS server, node,
// TLS files, health before the first config, and the ports and probes
// Envoy Gateway's Deployment expects (gRPC 8081, HTTP /healthcheck 8080).
func TestEnvoyGatewayEnvironmentSettings(t *testing.T) {
	s, err := parseServe(nil, xdstest.EnvoyGatewayEnv, io.Discard)
	if err != nil {
		t.Fatalf("parseServe: %v", err)
	}
	c := s.ConfigSource
	x := c.XDS
	checks := []struct {
		what      string
		got, want any
	}{
		{"config type", c.Type, configTypeXDS},
		{"force start", c.ForceStart, true},
		{"xDS server", x.ServerURL, "envoy-gateway:18001"},
		{"node id", x.NodeID, "envoy-ratelimit"},
		{"xDS TLS", x.UseTLS, true},
		{"xDS client cert", x.ClientCert, "/certs/tls.crt"},
		{"xDS client key", x.ClientKey, "/certs/tls.key"},
		{"xDS server CA", x.ServerCACert, "/certs/ca.crt"},
		{"backoff initial (default)", x.BackoffInitial, 10 * time.Second},
		{"gRPC port (default)", s.GRPCPort, 8081},
		{"HTTP port (default, /healthcheck)", s.HTTPPort, 8080},
		{"gRPC TLS", s.GRPCUseTLS, true},
		{"gRPC cert", s.GRPCTLSCert, "/certs/tls.crt"},
		{"gRPC key", s.GRPCTLSKey, "/certs/tls.key"},
		{"backend", s.backend(), "redis"},
		{"tracing", s.Tracing, true},
		{"tracing service name", s.TracingServiceName, "envoy-ratelimit"},
		{"tracing sampling rate", s.TracingSamplingRate, 1.0},
		{"tracing service namespace", s.TracingServiceNamespace, "envoy-gateway-system"},
		{"tracing service instance id", s.TracingServiceInstanceID, "envoy-ratelimit-5d8f7c9b4-abcde"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	for _, name := range []string{"CONFIG_GRPC_XDS_", "XDS_CLIENT_", "FORCE_START_WITHOUT_INITIAL_CONFIG", "CONFIG_TYPE", "TRACING_"} {
		for _, ig := range s.ignored {
			if strings.HasPrefix(ig, name) {
				t.Errorf("%s is listed as ignored", ig)
			}
		}
	}
	notes := strings.Join(s.notes, "\n")
	if !strings.Contains(notes, "config files") {
		t.Errorf("no note that config files are not read with xDS: %q", s.notes)
	}
	if !strings.Contains(notes, "GRPC_SERVER_TLS_CA_CERT is not a setting") {
		t.Errorf("no note that GRPC_SERVER_TLS_CA_CERT does nothing: %q", s.notes)
	}
	if !strings.Contains(notes, "PROMETHEUS_MAPPER_YAML is not read; with USE_PROMETHEUS=true the per-descriptor counters are served under the reference's default mapping names") {
		t.Errorf("no note that the mapping's names are served without reading the file: %q", s.notes)
	}
	if !s.Metrics || s.PrometheusAddr != ":19001" {
		t.Errorf("metrics %v at %q, want on at :19001 (the incumbent's names with them)", s.Metrics, s.PrometheusAddr)
	}
}

// TestConfigSourceSettings covers the xDS settings' parsing and errors.
func TestConfigSourceSettings(t *testing.T) {
	s, err := parseServe(nil, []string{"CONFIG_TYPE=grpc_xds_sotw",
		"CONFIG_GRPC_XDS_NODE_METADATA=zone=a,tier=b",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=X-Token:abc,x-team:rl",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=500ms",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=5s",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR=0.2", "XDS_CLIENT_BACKOFF_JITTER=false",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=8388608"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	x := s.ConfigSource.XDS
	if x.ServerURL != "localhost:18000" || x.NodeID != "default" || x.NodeMetadata != "zone=a,tier=b" ||
		x.Headers["x-token"] != "abc" || x.Headers["x-team"] != "rl" || x.ConnectRetryInterval != 500*time.Millisecond ||
		x.BackoffInitial != time.Second || x.BackoffMax != 5*time.Second || x.BackoffRandomFactor != 0.2 ||
		x.BackoffJitter || x.MaxMsgSize != 8<<20 {
		t.Errorf("settings %+v", x)
	}

	errs := []struct {
		name string
		env  []string
		want string
	}{
		{"bad headers", []string{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=novalue"}, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"},
		{"bad duration", []string{"XDS_CLIENT_BACKOFF_MAX_INTERVAL=60"}, "XDS_CLIENT_BACKOFF_MAX_INTERVAL"},
		{"bad metadata", []string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA=a"}, `node metadata entry "a"`},
		{"TLS file without TLS", []string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/ca"}, "CONFIG_GRPC_XDS_SERVER_USE_TLS"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			parseServeCase(t, nil, tc.env, tc.want)
		})
	}
}
