package main

import (
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"testing"
)

// parseServeCase is one case of a table-driven settings test: it parses
// args and env as `sluice serve` does and checks the error against
// wantErr (see testenv.WantErr). It returns the settings when the case wants
// no error, and nil, where the case ends, when it wants one.
func parseServeCase(t *testing.T, args, env []string, wantErr string) *settings {
	t.Helper()
	s, err := parseServe(args, env, io.Discard)
	if !testenv.WantErr(t, err, wantErr) {
		return nil
	}
	return s
}
