package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/syncbuf"
)

// TestBinary builds the real binary and drives it from outside: serve on
// free loopback ports with the embedded backend, check against it, then
// SIGTERM and a clean exit.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v0.0.0-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "sluice v0.0.0-test go") {
		t.Fatalf("version: %q, %v", out, err)
	}

	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(1))
	serve := exec.Command(bin, "serve", "--config", dir)
	serve.Env = slices.Concat(os.Environ(), loopback, []string{"BACKEND_TYPE=memory"})
	stderr := &syncbuf.Buffer{}
	pipe, err := serve.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	go func() {
		io.Copy(stderr, pipe)
		close(copied)
	}()
	exited := make(chan error, 1)
	go func() {
		<-copied // Wait closes the pipe: read it all first
		exited <- serve.Wait()
	}()
	// If the test fails before SIGTERM, stop the process we started (after
	// a clean exit this is a no-op: os.Process knows it is done).
	t.Cleanup(func() { serve.Process.Kill() })

	var grpcAddr string
	waitFor(t, "the binary to listen", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("serve exited: %v\n%s", err, stderr)
		default:
		}
		grpcAddr, _ = listenAddrs(stderr.String())
		return grpcAddr != ""
	})

	for i, want := range []struct {
		out  string
		code int
	}{{"overall: OK", 0}, {"overall: OVER_LIMIT", 1}} {
		cmd := exec.Command(bin, "check", "--addr", grpcAddr, "--domain", "api", "--descriptor", "k=v")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != want.code || !strings.HasPrefix(string(out), want.out+"\n") {
			t.Errorf("check %d: exit %d\n%s\nwant exit %d and %s", i+1, code, out, want.code, want.out)
		}
	}

	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v (want exit 0)\n%s", err, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	if log := stderr.String(); !strings.Contains(log, "shutting down") || !strings.Contains(log, "shut down") {
		t.Errorf("no shutdown lines in the log:\n%s", log)
	}
}
