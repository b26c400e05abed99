package redistest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/tbrecord"
)

// TestRequireStarted: a missing redis-server fails the test with the
// command that installs it, unless SLUICE_TEST_REDIS=off asks for a run
// without Redis; then it is skipped. Other start errors always fail.
func TestRequireStarted(t *testing.T) {
	other := errors.New("port in use")
	tests := []struct {
		name      string
		err       error
		optOut    string
		wantFatal string
		wantSkip  string
	}{
		{"started", nil, "", "", ""},
		{"started, opted out", nil, "off", "", ""},
		{"not installed", ErrNotInstalled, "", "apt-get install redis-server redis-tools", ""},
		{"cli not installed", fmt.Errorf("redis-cli: %w", ErrNotInstalled), "", "SLUICE_TEST_REDIS=off", ""},
		{"not installed, opted out", ErrNotInstalled, "off", "", "SLUICE_TEST_REDIS=off"},
		{"not installed, other value", ErrNotInstalled, "on", "apt-get install", ""},
		{"other error", other, "", "port in use", ""},
		{"other error, opted out", other, "off", "port in use", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(OptOutEnv, tt.optOut)
			r := tbrecord.Run(t, func(tb testing.TB) { requireStarted(tb, "redis-server", tt.err) })
			if (tt.wantFatal == "") != (r.Failed == "") || !strings.Contains(r.Failed, tt.wantFatal) {
				t.Errorf("fatal = %q, want one containing %q", r.Failed, tt.wantFatal)
			}
			if (tt.wantSkip == "") != (r.Skipped == "") || !strings.Contains(r.Skipped, tt.wantSkip) {
				t.Errorf("skip = %q, want one containing %q", r.Skipped, tt.wantSkip)
			}
		})
	}
}
