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
