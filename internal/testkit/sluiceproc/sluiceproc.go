// Package sluiceproc runs the real sluice binary as a child process: it
// builds ./cmd/sluice, starts `sluice serve` on free 127.0.0.1 ports with a
// minimal environment, captures its output in a locked buffer, reads the
// listen addresses from its "listening" log line, waits for /healthcheck,
// and stops it by its PID.
//
// It knows nothing of testing.T: internal/sluicetest wraps it for tests,
// and cmd/sluice-soak uses it directly.
package sluiceproc

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// DefaultStartTimeout bounds Start and WaitReady when Options.StartTimeout
// is 0.
const DefaultStartTimeout = 30 * time.Second

// pollEvery is how often readiness is polled.
const pollEvery = 10 * time.Millisecond

// Build builds ./cmd/sluice of this module into the file path.
func Build(ctx context.Context, path string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "github.com/sluice-rl/sluice/cmd/sluice")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/sluice: %w\n%s", err, out)
	}
	return nil
}

// Options say how to run `sluice serve`.
type Options struct {
	// Binary is the path of the sluice binary.
	Binary string
	// Env are extra environment variables. They win over the defaults:
	// GRPC_HOST and HOST 127.0.0.1, GRPC_PORT and PORT 0 and
	// SLUICE_ADMIN_ADDR 127.0.0.1:0 (the kernel picks free ports),
	// LOG_FORMAT json. Only PATH, HOME and TMPDIR are
	// inherited from this process.
	Env map[string]string
	// Args are extra command-line arguments after `serve`.
	Args []string
	// StartTimeout bounds the wait for the listening line and
	// /healthcheck; 0 means DefaultStartTimeout.
	StartTimeout time.Duration
	// RequireHealthy makes WaitReady wait for /healthcheck to answer 200;
	// otherwise any answer will do (a server whose Redis is down is up,
	// just unhealthy).
	RequireHealthy bool
}

// Process is a running `sluice serve`.
type Process struct {
	opts     Options
	cmd      *exec.Cmd
	logs     *testenv.SyncBuffer
	exited   chan struct{} // closed when the process has exited
	exitErr  error         // valid after exited is closed
	grpcAddr string
	httpAddr string
}

// Start launches the process and waits until it is ready (see WaitReady).
// If it is not, Start kills it and returns an error with its logs.
func Start(opts Options) (*Process, error) {
	p, err := Launch(opts)
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(); err != nil {
		p.Kill()
		return nil, fmt.Errorf("sluice serve: %w\nlogs:\n%s", err, p.Logs())
	}
	return p, nil
}

// Launch starts `sluice serve` with opts and returns at once; WaitReady
// waits for it to serve. The caller must Stop or Kill the process.
func Launch(opts Options) (*Process, error) {
	env := map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"HOST": "127.0.0.1", "PORT": "0",
		"SLUICE_ADMIN_ADDR": "127.0.0.1:0",
		"LOG_FORMAT":        "json",
	}
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	for k, v := range opts.Env {
		env[k] = v
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	p := &Process{opts: opts, logs: &testenv.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(opts.Binary, append([]string{"serve"}, opts.Args...)...)
	p.cmd.Env = environ(env)
	p.cmd.Stdout = p.logs
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", opts.Binary, err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// environ turns env into sorted "K=V" pairs.
func environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// listenRE finds the addresses in the "listening" line, in the JSON
// ("grpc":"127.0.0.1:1") and the text (grpc="127.0.0.1:1") log formats.
var listenRE = struct{ grpc, http *regexp.Regexp }{
	grpc: regexp.MustCompile(`"?grpc"?[:=]"([^"]+)"`),
	http: regexp.MustCompile(`"?http"?[:=]"([^"]+)"`),
}

// WaitReady waits for the "listening" log line, then for /healthcheck to
// answer (with 200 if Options.RequireHealthy), within
// Options.StartTimeout. It fails early if the process exits.
func (p *Process) WaitReady() error {
	deadline := time.Now().Add(p.opts.StartTimeout)
	for p.grpcAddr == "" {
		for _, line := range strings.Split(p.logs.String(), "\n") {
			if !strings.Contains(line, "listening") {
				continue
			}
			g, h := listenRE.grpc.FindStringSubmatch(line), listenRE.http.FindStringSubmatch(line)
			if g != nil && h != nil {
				p.grpcAddr, p.httpAddr = g[1], h[1]
				break
			}
		}
		if p.grpcAddr != "" {
			break
		}
		if err := p.pollWait(deadline, "the listening log line"); err != nil {
			return err
		}
	}
	what := "/healthcheck to answer"
	if p.opts.RequireHealthy {
		what = "/healthcheck to answer 200"
	}
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get("http://" + p.httpAddr + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if !p.opts.RequireHealthy || resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := p.pollWait(deadline, what); err != nil {
			return err
		}
	}
}

// pollWait sleeps one poll interval, or fails if the process exited or the
// deadline passed.
func (p *Process) pollWait(deadline time.Time, what string) error {
	select {
	case <-p.exited:
		return fmt.Errorf("exited while waiting for %s: %v", what, p.exitErr)
	default:
	}
	if time.Now().After(deadline) {
		return fmt.Errorf("no %s after %s", what, p.opts.StartTimeout)
	}
	time.Sleep(pollEvery)
	return nil
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// GRPCAddr is the gRPC listen address, "127.0.0.1:port", once WaitReady
// has returned nil.
func (p *Process) GRPCAddr() string { return p.grpcAddr }

// HTTPAddr is the HTTP listen address (/healthcheck, /json, /rlconfig),
// once WaitReady has returned nil.
func (p *Process) HTTPAddr() string { return p.httpAddr }

// Logs returns everything the process wrote to stdout and stderr so far.
func (p *Process) Logs() string { return p.logs.String() }

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits up to timeout for the process to exit and returns its exit
// code; it returns an error if it did not exit in time or was killed by a
// signal.
func (p *Process) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.exited:
	case <-time.After(timeout):
		return -1, fmt.Errorf("sluice (pid %d) still running after %s", p.PID(), timeout)
	}
	if p.exitErr == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(p.exitErr, &ee) && ee.ExitCode() >= 0 {
		return ee.ExitCode(), nil
	}
	return -1, p.exitErr
}

// Stop sends SIGTERM and waits up to timeout for a clean exit (status 0).
// It kills the process if it does not exit in time, and returns an error
// unless it exited 0.
func (p *Process) Stop(timeout time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM sluice (pid %d): %w", p.PID(), err)
	}
	code, err := p.Wait(timeout)
	if p.Running() {
		p.Kill()
		return fmt.Errorf("sluice (pid %d) did not exit within %s of SIGTERM; killed", p.PID(), timeout)
	}
	if err != nil {
		return fmt.Errorf("sluice after SIGTERM: %w", err)
	}
	if code != 0 {
		return fmt.Errorf("sluice exited with code %d after SIGTERM", code)
	}
	return nil
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Kill stops the process at once with SIGKILL, by its PID, as a crash
// would, and waits for it to exit. It does nothing if it has exited.
func (p *Process) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}
