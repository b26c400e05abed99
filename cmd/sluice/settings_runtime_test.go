package main

import (
	"strings"
	"testing"
)

// TestRuntimeOverriddenWarning: when --config or SLUICE_CONFIG names the
// config, RUNTIME_* variables set as envoyproxy/ratelimit deployments set
// them are not read, and a warning says so instead of loading another
// directory in silence.
func TestRuntimeOverriddenWarning(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string // substring of the warning; "" for none
	}{
		{name: "RUNTIME_* alone", env: []string{"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit"}},
		{name: "SLUICE_CONFIG alone", env: []string{"SLUICE_CONFIG=/etc/sluice/config"}},
		{name: "both", env: []string{"SLUICE_CONFIG=/etc/sluice/config", "RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit"},
			want: "SLUICE_CONFIG names the config (/etc/sluice/config), so RUNTIME_ROOT, RUNTIME_SUBDIRECTORY are not read: the directory /data/ratelimit/config is not loaded"},
		{name: "flags", args: []string{"--config", "/c", "--runtime-appdirectory", "limits"},
			want: "--config names the config (/c), so --runtime-appdirectory is not read"},
		{name: "xDS reads neither", env: []string{"CONFIG_TYPE=GRPC_XDS_SOTW", "RUNTIME_ROOT=/data"}},
		// Files named on purpose are not read with xDS: a warning, not a
		// note (RUNTIME_* above is set by every reference deployment).
		{name: "xDS with config files named", env: []string{"CONFIG_TYPE=GRPC_XDS_SOTW", "SLUICE_CONFIG=/c", "RUNTIME_ROOT=/data"},
			want: "SLUICE_CONFIG names config files (/c), but CONFIG_TYPE=GRPC_XDS_SOTW takes the rate-limit configuration from the xDS server: the files are not read"},
		{name: "xDS with --config", args: []string{"--config", "/c", "--config-type", "grpc_xds_sotw"},
			want: "--config names config files (/c), but CONFIG_TYPE=GRPC_XDS_SOTW"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseServeCase(t, tc.args, tc.env, "")
			if s == nil {
				return
			}
			var got []string
			for _, w := range s.warnings {
				if strings.Contains(w, "not read") {
					got = append(got, w)
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("warnings %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("warnings %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// TestUnknownSluiceVarsWarning: a variable in sluice's own SLUICE_
// namespace that is no setting (a misspelt one) is named in a warning at
// start instead of being ignored in silence; Kubernetes' service-link
// variables of a Service named sluice, and the test harnesses' own, are
// not settings and are left alone.
func TestUnknownSluiceVarsWarning(t *testing.T) {
	const prefix = "not sluice settings, ignored"
	for _, tc := range []struct {
		name string
		env  []string
		want string // the warning's list; "" for no warning
	}{
		{"settings", []string{"SLUICE_LOCAL_CACHE_MAX_AGE=2s", "SLUICE_DRAIN_DELAY=1s", "SLUICE_CONFIG=/c"}, ""},
		{"misspelt", []string{"SLUICE_LOCAL_CACHE_MAXAGE=2s", "SLUICE_DRAIN_DELAY=1s", "SLUICE_REDIS_TIMEOUT=5s"},
			"SLUICE_LOCAL_CACHE_MAXAGE, SLUICE_REDIS_TIMEOUT"},
		{"service links", []string{"SLUICE_SERVICE_HOST=10.0.0.1", "SLUICE_SERVICE_PORT=8081", "SLUICE_SERVICE_PORT_GRPC=8081",
			"SLUICE_PORT=tcp://10.0.0.1:8081", "SLUICE_PORT_8081_TCP=tcp://10.0.0.1:8081", "SLUICE_PORT_8081_TCP_ADDR=10.0.0.1",
			"SLUICE_ADMIN_SERVICE_HOST=10.0.0.2", "SLUICE_ADMIN_PORT_6070_TCP_PORT=6070"}, ""},
		{"test harness", []string{"SLUICE_TEST_REDIS=off"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseServeCase(t, nil, tc.env, "")
			if s == nil {
				return
			}
			var got []string
			for _, w := range s.warnings {
				if strings.HasPrefix(w, prefix) {
					got = append(got, w)
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("warnings %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.HasSuffix(got[0], ": "+tc.want)):
				t.Errorf("warnings %q, want one ending in %q", got, tc.want)
			}
		})
	}
}
