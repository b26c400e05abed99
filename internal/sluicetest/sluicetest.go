package sluicetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Deadlines for the binary to build, come up and go down.
const (
	buildTimeout = 3 * time.Minute
	startTimeout = 30 * time.Second
	stopTimeout  = 30 * time.Second
	pollEvery    = 10 * time.Millisecond
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
		cmd := exec.CommandContext(ctx, "go", "build", "-o", build.path, "github.com/sluice-rl/sluice/cmd/sluice")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/sluice: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// Cleanup removes the binary Binary built, if any. Call it from TestMain
// after m.Run.
func Cleanup() {
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
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
	t        testing.TB
	cmd      *exec.Cmd
	logs     *syncBuffer
	exited   chan struct{} // closed when the process has exited
	exitErr  error         // valid after exited is closed
	grpcAddr string
	httpAddr string
	conn     *grpc.ClientConn
	client   rlsv3.RateLimitServiceClient
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
	env := map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"HOST": "127.0.0.1", "PORT": "0",
		"LOG_FORMAT": "json",
	}
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	if opts.ConfigDir != "" {
		env["SLUICE_CONFIG"] = opts.ConfigDir
	}
	for k, v := range opts.Env {
		env[k] = v
	}

	p := &Process{t: t, logs: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"serve"}, opts.Args...)...)
	p.cmd.Env = environ(env)
	p.cmd.Stdout = p.logs
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s serve: %v", bin, err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.conn != nil {
			_ = p.conn.Close()
		}
		p.kill()
		if t.Failed() {
			t.Logf("sluice (pid %d) logs:\n%s", p.cmd.Process.Pid, p.Logs())
		}
	})

	if err := p.waitListening(); err != nil {
		t.Fatalf("sluice serve: %v\nlogs:\n%s", err, p.Logs())
	}
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc client for %s: %v", p.grpcAddr, err)
	}
	p.conn = conn
	p.client = rlsv3.NewRateLimitServiceClient(conn)
	return p
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

// waitListening waits for the "listening" log line, then for /healthcheck
// to answer.
func (p *Process) waitListening() error {
	deadline := time.Now().Add(startTimeout)
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
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get("http://" + p.httpAddr + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if err := p.pollWait(deadline, "/healthcheck to answer"); err != nil {
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
		return fmt.Errorf("no %s after %s", what, startTimeout)
	}
	time.Sleep(pollEvery)
	return nil
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// GRPCAddr is the gRPC listen address, "127.0.0.1:port".
func (p *Process) GRPCAddr() string { return p.grpcAddr }

// HTTPAddr is the HTTP listen address (/healthcheck, /json, /rlconfig).
func (p *Process) HTTPAddr() string { return p.httpAddr }

// Conn is the shared gRPC connection to the process (for the health
// service, reflection, ...). It is closed when the test ends.
func (p *Process) Conn() *grpc.ClientConn { return p.conn }

// Client is a RateLimitService client on Conn.
func (p *Process) Client() rlsv3.RateLimitServiceClient { return p.client }

// Logs returns everything the process wrote to stdout and stderr so far.
func (p *Process) Logs() string { return p.logs.String() }

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
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Kill stops the process at once with SIGKILL, as a crash would, and
// waits for it to exit.
func (p *Process) Kill() { p.kill() }

func (p *Process) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// syncBuffer is a bytes.Buffer safe for one writer and many readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
