package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

// TestBinarySignals: SIGTERM, SIGINT and SIGHUP each stop the binary
// gracefully (SIGHUP as the reference treats it; it used to kill the
// process at once, in-flight calls and all), and a second signal during a
// long drain delay ends it at once, saying so, instead of being swallowed
// until the drain and the shutdown timeout are over.
func TestBinarySignals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	// A process started with SIGHUP ignored (under nohup) passes that on
	// to the binary, which then keeps it ignored, as it should. Catch it
	// here meanwhile, so that the binary starts with SIGHUP's default.
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
		t.Cleanup(func() { signal.Reset(syscall.SIGHUP) })
	}
	tests := []struct {
		name    string
		args    []string
		signals []os.Signal
		// wantExit is the exit code, wantLog what the log must hold.
		wantExit int
		wantLog  []string
	}{
		{"SIGTERM", nil, []os.Signal{syscall.SIGTERM}, 0, []string{"shutting down", `"shut down"`}},
		{"SIGINT", nil, []os.Signal{syscall.SIGINT}, 0, []string{"shutting down", `"shut down"`}},
		{"SIGHUP", nil, []os.Signal{syscall.SIGHUP}, 0, []string{"shutting down", `"shut down"`}},
		{"second signal during the drain", []string{"--drain-delay=1h"}, []os.Signal{syscall.SIGTERM, syscall.SIGINT}, exitError,
			[]string{"waiting for load balancers to drain", "sluice: interrupt again during shutdown: exiting now"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startBinary(t, bin, tt.args...)
			for i, sig := range tt.signals {
				if i > 0 {
					// The next signal comes once the shutdown is under way.
					waitFor(t, "the shutdown to start", func() bool { return strings.Contains(p.stderr.String(), "shutting down") })
				}
				if err := p.cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
			}
			err := p.wait(t)
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode() // -1 when a signal killed it
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantExit {
				t.Errorf("exit code %d (%v), want %d\n%s", code, err, tt.wantExit, p.stderr)
			}
			for _, want := range tt.wantLog {
				if !strings.Contains(p.stderr.String(), want) {
					t.Errorf("log lacks %q:\n%s", want, p.stderr)
				}
			}
		})
	}
}
