package integration

import (
	"context"
	"errors"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// mkfifo makes a named pipe at path, or skips the test.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("cannot make a named pipe: %v", err)
	}
}

// TestSpecialFileConfigAtStart: a config path (--config or SLUICE_CONFIG)
// naming a named pipe or a device is refused at start: exit 1 with a
// message naming the path, before anything listens. Before, a named pipe
// blocked the start forever (reading it waits for a writer).
func TestSpecialFileConfigAtStart(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "limits.yaml")
	mkfifo(t, fifo)
	for _, tt := range []struct {
		name string
		args []string
		env  string
		path string
	}{
		{"named pipe, --config", []string{"--config", fifo}, "", fifo},
		{"named pipe, SLUICE_CONFIG", nil, fifo, fifo},
		{"device, --config", []string{"--config", os.DevNull}, "", os.DevNull},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The deadline ends a start that hangs; it is not waited for.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, sluicetest.Binary(t), append([]string{"serve"}, tt.args...)...)
			cmd.Env = []string{"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0", "BACKEND_TYPE=memory"}
			if tt.env != "" {
				cmd.Env = append(cmd.Env, "SLUICE_CONFIG="+tt.env)
			}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("serve: %v, want exit 1\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.path+": not a regular file or a directory") || strings.Contains(string(out), "listening") {
				t.Errorf("output does not name %s as not a regular file, or the server listened:\n%s", tt.path, out)
			}
		})
	}
}

// TestReloadToSpecialFile: a config file replaced by a named pipe is a
// rejected reload naming the path; the last good config keeps serving,
// and a regular file in its place applies again. Before, the reload
// blocked on the pipe, and every later change went unseen.
func TestReloadToSpecialFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.yaml")
	testenv.ReplaceFile(t, path, yearLimit("r", "2"))
	p := sluicetest.Start(t, sluicetest.Options{
		ConfigDir: path,
		Env:       map[string]string{"BACKEND_TYPE": "memory", "SLUICE_RELOAD_INTERVAL": "50ms"},
	})
	k := entries("k", sluicetest.Unique("k"))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, path)
	testenv.Until(t, 10*time.Second, "the reload to be rejected", func() bool {
		return strings.Contains(p.Logs(), path+": not a regular file or a directory")
	})
	if got := statusOf(peek(t, p, "r", k)); got != (verdict{ok, "", 2, 2}) {
		t.Errorf("after the pipe replaced the file: %v, want the limit of 2 serving", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testenv.ReplaceFile(t, path, yearLimit("r", "5"))
	testenv.Until(t, 10*time.Second, "the limit of 5", func() bool {
		st := peek(t, p, "r", k)
		return st.CurrentLimit != nil && st.CurrentLimit.RequestsPerUnit == 5
	})
}
