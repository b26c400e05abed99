package main

import (
	"slices"
	"testing"
)

// TestCommandArgs: under the incumbent's name the binary serves as the
// incumbent does (`sluice ratelimit`).
func TestCommandArgs(t *testing.T) {
	cases := []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/bin/ratelimit", nil, []string{"ratelimit"}},
		{"ratelimit", []string{"--log-level=debug"}, []string{"ratelimit", "--log-level=debug"}},
		{"/sluice", []string{"serve"}, []string{"serve"}},
		{"/usr/local/bin/sluice", []string{"validate", "x"}, []string{"validate", "x"}},
		{"/bin/ratelimit-old", nil, nil},
	}
	for _, tc := range cases {
		if got := commandArgs(tc.argv0, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("commandArgs(%q, %q) = %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}
