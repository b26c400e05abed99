package redistest

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended: Fatalf and Skipf
// stop the calling goroutine, as the real ones do.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on its own goroutine and returns it.
func run(f func(testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

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
			r := run(func(tb testing.TB) { requireStarted(tb, "redis-server", tt.err) })
			if (tt.wantFatal == "") != (r.fatal == "") || !strings.Contains(r.fatal, tt.wantFatal) {
				t.Errorf("fatal = %q, want one containing %q", r.fatal, tt.wantFatal)
			}
			if (tt.wantSkip == "") != (r.skip == "") || !strings.Contains(r.skip, tt.wantSkip) {
				t.Errorf("skip = %q, want one containing %q", r.skip, tt.wantSkip)
			}
		})
	}
}
