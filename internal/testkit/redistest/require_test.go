package redistest

import (
	"errors"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
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
		{"cli not installed", fmt.Errorf("valkey-cli: %w", ErrNotInstalled), "", "SLUICE_TEST_REDIS=off", ""},
		{"not installed, opted out", ErrNotInstalled, "off", "", "SLUICE_TEST_REDIS=off"},
		{"not installed, other value", ErrNotInstalled, "on", "apt-get install", ""},
		{"other error", other, "", "port in use", ""},
		{"other error, opted out", other, "off", "port in use", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(OptOutEnv, tt.optOut)
			r := testenv.RunHelper(t, func(tb testing.TB) { requireStarted(tb, "redis-server", tt.err) })
			if (tt.wantFatal == "") != (r.Failed == "") || !strings.Contains(r.Failed, tt.wantFatal) {
				t.Errorf("fatal = %q, want one containing %q", r.Failed, tt.wantFatal)
			}
			if (tt.wantSkip == "") != (r.Skipped == "") || !strings.Contains(r.Skipped, tt.wantSkip) {
				t.Errorf("skip = %q, want one containing %q", r.Skipped, tt.wantSkip)
			}
		})
	}
}

// TestProgramNames: SLUICE_TEST_REDIS_SERVER picks the server program, the
// cli follows a valkey server unless SLUICE_TEST_REDIS_CLI names one, and
// a program that is not installed is ErrNotInstalled naming it.
func TestProgramNames(t *testing.T) {
	tests := []struct {
		server, cli         string
		wantServer, wantCLI string
	}{
		{"", "", "redis-server", "redis-cli"},
		{"valkey-server", "", "valkey-server", "valkey-cli"},
		{"/opt/valkey/bin/valkey-server", "", "/opt/valkey/bin/valkey-server", "valkey-cli"},
		{"valkey-server", "/opt/redis-cli", "valkey-server", "/opt/redis-cli"},
		{" redis-server ", "", "redis-server", "redis-cli"},
	}
	for _, tt := range tests {
		t.Run(tt.wantServer+"+"+tt.wantCLI, func(t *testing.T) {
			t.Setenv(ServerEnv, tt.server)
			t.Setenv(CLIEnv, tt.cli)
			if got := ServerName(); got != tt.wantServer {
				t.Errorf("ServerName() = %q, want %q", got, tt.wantServer)
			}
			if got := CLIName(); got != tt.wantCLI {
				t.Errorf("CLIName() = %q, want %q", got, tt.wantCLI)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		t.Setenv(ServerEnv, "sluice-no-such-server")
		_, err := StartStandalone()
		if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "sluice-no-such-server") {
			t.Fatalf("StartStandalone with a missing server: %v, want ErrNotInstalled naming it", err)
		}
	})
}
