package main

import (
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinary builds the real binary and drives it from outside: serve on
// free loopback ports with the embedded backend, check against it, then
// SIGTERM and a clean exit.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)

	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "sluice v0.0.0-test ") {
		t.Fatalf("version: %q, %v", out, err)
	}
	// Built in a git clone, the binary knows its commit (a git worktree,
	// or a tree without git, stamps none).
	if rev := stampedRevision(t, bin); rev != "" && !strings.HasPrefix(string(out), "sluice v0.0.0-test (revision "+rev) {
		t.Errorf("version: %q, want the revision %s Go stamped", out, rev)
	} else {
		t.Logf("version: %s", strings.TrimSpace(string(out)))
	}

	p := startBinary(t, bin)
	grpcAddr := p.grpcAddr

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

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Errorf("serve after SIGTERM: %v (want exit 0)\n%s", err, p.stderr)
	}
	if log := p.stderr.String(); !strings.Contains(log, "shutting down") || !strings.Contains(log, "shut down") {
		t.Errorf("no shutdown lines in the log:\n%s", log)
	}
}

// buildBinary builds the sluice binary into a temporary directory and
// returns its path.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-buildvcs=true", "-ldflags", "-X main.version=v0.0.0-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// stampedRevision returns the vcs.revision Go stamped into bin, "" when
// none.
func stampedRevision(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if _, rev, ok := strings.Cut(line, "vcs.revision="); ok {
			return strings.TrimSpace(rev)
		}
	}
	return ""
}

// binaryProcess is a `sluice serve` started by startBinary.
type binaryProcess struct {
	cmd      *exec.Cmd
	stderr   *testenv.SyncBuffer
	exited   chan error
	grpcAddr string
}

// startBinary runs bin serve with the embedded backend on free loopback
// ports, a config of one domain and the extra arguments, and waits until
// it listens. The process is killed at cleanup if still running.
func startBinary(t *testing.T, bin string, args ...string) *binaryProcess {
	t.Helper()
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(1))
	serve := exec.Command(bin, append([]string{"serve", "--config", dir}, args...)...)
	serve.Env = slices.Concat(os.Environ(), loopback, []string{"BACKEND_TYPE=memory"})
	p := &binaryProcess{cmd: serve, stderr: &testenv.SyncBuffer{}, exited: make(chan error, 1)}
	pipe, err := serve.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	go func() {
		io.Copy(p.stderr, pipe)
		close(copied)
	}()
	go func() {
		<-copied // Wait closes the pipe: read it all first
		p.exited <- serve.Wait()
	}()
	// If the test fails before the process ends, stop the process we
	// started (after it exited this is a no-op: os.Process knows it is
	// done).
	t.Cleanup(func() { serve.Process.Kill() })
	waitFor(t, "the binary to listen", func() bool {
		select {
		case err := <-p.exited:
			t.Fatalf("serve exited: %v\n%s", err, p.stderr)
		default:
		}
		p.grpcAddr, _ = listenAddrs(p.stderr.String())
		return p.grpcAddr != ""
	})
	return p
}

// wait returns how the process ended, failing t if it runs 30 s more.
func (p *binaryProcess) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.exited:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not exit\n%s", p.stderr)
		return nil
	}
}
