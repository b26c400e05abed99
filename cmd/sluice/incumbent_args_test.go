package main

import (
	"slices"
	"strings"
	"testing"
)

// TestIncumbentArgs: run as envoyproxy/ratelimit's binary, the arguments
// serve defines are kept with their values and every other one is
// ignored, as the incumbent ignores every argument.
func TestIncumbentArgs(t *testing.T) {
	tests := []struct {
		name          string
		args          []string
		kept, ignored []string
	}{
		{"none", nil, nil, nil},
		{"Envoy AI Gateway's", []string{"--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system"},
			nil, []string{"--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system"}},
		{"unknown flag and its separate value", []string{"-quotaRateLimitServiceAddr", "x:1"}, nil, []string{"-quotaRateLimitServiceAddr", "x:1"}},
		{"serve's flags with values", []string{"--log-level", "debug", "--x=1", "-grpc-port=9", "--shadow-mode", "extra"},
			[]string{"--log-level", "debug", "-grpc-port=9", "--shadow-mode"}, []string{"--x=1", "extra"}},
		{"help", []string{"-h"}, []string{"-h"}, nil},
		{"after --", []string{"--", "--config", "x"}, nil, []string{"--config", "x"}},
		{"a lone dash", []string{"-"}, nil, []string{"-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, ignored := incumbentArgs(tt.args)
			if !slices.Equal(kept, tt.kept) || !slices.Equal(ignored, tt.ignored) {
				t.Errorf("kept %q ignored %q, want %q and %q", kept, ignored, tt.kept, tt.ignored)
			}
		})
	}
}

// TestServeAsIncumbent: `sluice ratelimit` (the image's /bin/ratelimit)
// starts with the argument Envoy AI Gateway's rate-limit Deployment
// passes, says it ignores it, and decides; `sluice serve` refuses it.
func TestServeAsIncumbent(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(1))
	arg := "--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system"
	s := startCommand(t, "ratelimit", []string{"SLUICE_ADMIN_ADDR=off"}, arg, "--config", dir)
	if out := s.check(t, "--domain", "api", "--descriptor", "k=v"); !strings.HasPrefix(out, "overall: OK") {
		t.Errorf("check: %s", out)
	}
	log := s.stderr.String()
	if !strings.Contains(log, `ignoring an argument: not arguments of sluice serve, and envoyproxy/ratelimit, whose binary this runs as, reads no argument ([\"`+arg+`\"])`) {
		t.Errorf("no warning naming the ignored argument:\n%s", log)
	}
	if code := s.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
	if code, _, errOut := runCmd(t, nil, "serve", arg); code != exitUsage || !strings.Contains(errOut, "quotaRateLimitServiceAddr") {
		t.Errorf("serve %s: exit %d, %q; want exit 2 naming it", arg, code, errOut)
	}
}

// TestHelpAndBadFlags: --help prints the usage on stdout and exits 0, for
// every command; a flag that does not exist is said once, on stderr, with
// where the flags are listed.
func TestHelpAndBadFlags(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"ratelimit"}, {"validate"}, {"check"}, {"counters", "get"}, {"counters", "reset"}} {
		name := strings.Join(cmd, " ")
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runCmd(t, nil, append(slices.Clone(cmd), "--help")...)
			usage := "sluice " + strings.Replace(name, "ratelimit", "serve", 1) // ratelimit is serve
			if code != 0 || !strings.HasPrefix(out, "Usage:") || !strings.Contains(out, usage) || errOut != "" {
				t.Errorf("%s --help: exit %d\nstdout %.200q...\nstderr %q", name, code, out, errOut)
			}
			if cmd[0] == "ratelimit" {
				return // it ignores unknown flags
			}
			code, out, errOut = runCmd(t, nil, append(slices.Clone(cmd), "--nope")...)
			if code != 2 || out != "" || strings.Count(errOut, "flag provided but not defined: -nope") != 1 ||
				!strings.Contains(errOut, "--help lists the flags") || strings.Contains(errOut, "Usage:") {
				t.Errorf("%s --nope: exit %d\nstdout %q\nstderr %q\nwant exit 2 and the error once", name, code, out, errOut)
			}
		})
	}
}
