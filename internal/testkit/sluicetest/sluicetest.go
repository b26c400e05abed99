package sluicetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/internal/testkit/sluiceproc"
)

// Deadlines for the binary to build and go down (sluiceproc bounds the
// start).
const (
	buildTimeout = 3 * time.Minute
	stopTimeout  = 30 * time.Second
)

// BinaryEnv names an environment variable holding the path of a sluice
// binary already built; Binary uses it instead of building one.
const BinaryEnv = "SLUICETEST_BINARY"

// build is the one build of the binary per test process.
var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Binary returns the path of a sluice binary: $SLUICETEST_BINARY if set,
// else ./cmd/sluice built (without -race) into a temporary directory the
// first time it is called in this process. It fails t if the build fails.
func Binary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		if p := os.Getenv(BinaryEnv); p != "" {
			build.path = p
			return
		}
		build.dir, build.err = os.MkdirTemp("", "sluicetest")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "sluice")
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		build.err = sluiceproc.Build(ctx, build.path)
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// Cleanup removes the binary Binary built, if any. Call it from TestMain
// after m.Run, or let Main do it.
func Cleanup() {
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
}

// Main is the TestMain of a package that runs the binary: it runs the
// tests, then each of after (a shared Redis cluster's Close, say), then
// Cleanup, and exits with the tests' code.
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	Cleanup()
	os.Exit(code)
}

// Options say how to run `sluice serve`.
type Options struct {
	// ConfigDir is the config file or directory (SLUICE_CONFIG); empty
	// leaves it to Env or Args.
	ConfigDir string
	// Env are extra environment variables (REDIS_URL, BACKEND_TYPE,
	// SLUICE_HEALTH_INTERVAL, ...). They win over the harness's defaults:
	// GRPC_HOST and HOST 127.0.0.1, GRPC_PORT and PORT 0 (the kernel picks
	// free ports), LOG_FORMAT json. Only PATH, HOME and TMPDIR are inherited
	// from the test process, so the developer's shell cannot change a test.
	Env map[string]string
	// Args are extra command-line arguments after `serve`.
	Args []string
}

// Process is a running `sluice serve`.
type Process struct {
	t      testing.TB
	proc   *sluiceproc.Process
	conn   *grpc.ClientConn
	client rlsv3.RateLimitServiceClient
}

// Start runs `sluice serve` with opts and waits until /healthcheck answers
// (200 or 500: a server whose Redis is down is up, just unhealthy). It
// fails t if the process exits or does not answer within 30 s. The process
// is killed by its PID when t ends.
//
// Ports are chosen by the kernel (port 0), and the real addresses are read
// from the server's "listening" log line, so two tests can never race for
// a port.
func Start(t testing.TB, opts Options) *Process {
	t.Helper()
	bin := Binary(t)
	env := map[string]string{}
	if opts.ConfigDir != "" {
		env["SLUICE_CONFIG"] = opts.ConfigDir
	}
	for k, v := range opts.Env {
		env[k] = v
	}
	proc, err := sluiceproc.Launch(sluiceproc.Options{Binary: bin, Env: env, Args: opts.Args})
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{t: t, proc: proc}
	t.Cleanup(func() {
		if p.conn != nil {
			_ = p.conn.Close()
		}
		proc.Kill()
		if t.Failed() {
			t.Logf("sluice (pid %d) logs:\n%s", proc.PID(), proc.Logs())
		}
	})

	if err := proc.WaitReady(); err != nil {
		t.Fatalf("sluice serve: %v\nlogs:\n%s", err, proc.Logs())
	}
	conn, err := grpc.NewClient(proc.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc client for %s: %v", proc.GRPCAddr(), err)
	}
	p.conn = conn
	p.client = rlsv3.NewRateLimitServiceClient(conn)
	return p
}

// PID is the process id.
func (p *Process) PID() int { return p.proc.PID() }

// GRPCAddr is the gRPC listen address, "127.0.0.1:port".
func (p *Process) GRPCAddr() string { return p.proc.GRPCAddr() }

// HTTPAddr is the HTTP listen address (/healthcheck, /json, /rlconfig).
func (p *Process) HTTPAddr() string { return p.proc.HTTPAddr() }

// Conn is the shared gRPC connection to the process (for the health
// service, reflection, ...). It is closed when the test ends.
func (p *Process) Conn() *grpc.ClientConn { return p.conn }

// Client is a RateLimitService client on Conn.
func (p *Process) Client() rlsv3.RateLimitServiceClient { return p.client }

// Logs returns everything the process wrote to stdout and stderr so far.
func (p *Process) Logs() string { return p.proc.Logs() }

// Entry is one key/value entry of a request descriptor.
type Entry struct{ Key, Value string }

// D builds a descriptor from alternating keys and values:
// D("user", "alice", "path", "/ocr"). An odd trailing key gets value "".
func D(kv ...string) []Entry {
	out := make([]Entry, 0, (len(kv)+1)/2)
	for i := 0; i < len(kv); i += 2 {
		e := Entry{Key: kv[i]}
		if i+1 < len(kv) {
			e.Value = kv[i+1]
		}
		out = append(out, e)
	}
	return out
}

// Request builds a RateLimitRequest for domain with request-level
// hits_addend hits (0 leaves it unset: a cost of 1) and one descriptor per
// entry list.
func Request(domain string, hits uint32, descriptors ...[]Entry) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descriptors {
		rd := &corev3.RateLimitDescriptor{}
		for _, e := range d {
			rd.Entries = append(rd.Entries, &corev3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req
}

// ShouldRateLimit sends Request(domain, hits, descriptors...) over Client.
func (p *Process) ShouldRateLimit(ctx context.Context, domain string, hits uint32, descriptors ...[]Entry) (*rlsv3.RateLimitResponse, error) {
	return p.client.ShouldRateLimit(ctx, Request(domain, hits, descriptors...))
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.proc.Signal(sig) }

// Wait waits up to timeout for the process to exit and returns its exit
// code; it returns an error if it did not exit in time or was killed by a
// signal.
func (p *Process) Wait(timeout time.Duration) (int, error) { return p.proc.Wait(timeout) }

// Stop sends SIGTERM, waits for the process to exit, and fails the test
// unless it exits 0 within 30 s.
func (p *Process) Stop() {
	p.t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("SIGTERM sluice (pid %d): %v", p.PID(), err)
	}
	code, err := p.Wait(stopTimeout)
	if err != nil || code != 0 {
		p.t.Errorf("sluice after SIGTERM: exit %d, %v (want exit 0)\nlogs:\n%s", code, err, p.Logs())
	}
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool { return p.proc.Running() }

// Kill stops the process at once with SIGKILL, as a crash would, and
// waits for it to exit.
func (p *Process) Kill() { p.proc.Kill() }
