package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ErrNotInstalled is returned by the Start* functions when the server
// binary (redis-server, or the one ServerEnv names) or, for a cluster, the
// cli cannot be found; the testing.TB constructors fail the test instead,
// unless Redis tests are switched off (see Require).
var ErrNotInstalled = errors.New("not installed")

// OptOutEnv names the environment variable that allows a run without
// Redis: with SLUICE_TEST_REDIS=off a test that needs a missing
// redis-server is skipped. Without it a missing redis-server fails the
// test, so a machine without Redis never passes the suite by skipping every
// Redis test.
const OptOutEnv = "SLUICE_TEST_REDIS"

// ServerEnv names the environment variable that picks the server program
// every process of this package runs: a name on PATH or a path, such as
// SLUICE_TEST_REDIS_SERVER=valkey-server. Empty means redis-server. The
// test command runs the Redis suites once with each.
const ServerEnv = "SLUICE_TEST_REDIS_SERVER"

// CLIEnv names the environment variable that picks the cli the package
// runs (redis-cli --cluster create, reshard). Empty means valkey-cli when
// ServerEnv names a valkey program, else redis-cli.
const CLIEnv = "SLUICE_TEST_REDIS_CLI"

// InstallHint says how to get what the Redis tests need on Debian.
const InstallHint = "install it (Debian: apt-get install redis-server redis-tools, or valkey-server valkey-tools for " + ServerEnv + "=valkey-server; scripts/test.sh does it when run as root), or set " + OptOutEnv + "=off to run without the Redis tests"

// ServerName is the server program the processes run: ServerEnv's value,
// or redis-server.
func ServerName() string {
	if s := strings.TrimSpace(os.Getenv(ServerEnv)); s != "" {
		return s
	}
	return "redis-server"
}

// CLIName is the cli program the package runs: CLIEnv's value, else
// valkey-cli beside a valkey server, else redis-cli.
func CLIName() string {
	if s := strings.TrimSpace(os.Getenv(CLIEnv)); s != "" {
		return s
	}
	if strings.HasPrefix(filepath.Base(ServerName()), "valkey") {
		return "valkey-cli"
	}
	return "redis-cli"
}

// OptedOut reports whether the caller asked for a run without Redis.
func OptedOut() bool { return os.Getenv(OptOutEnv) == "off" }

// Require fails t when the server or the cli (ServerName, CLIName) is not
// installed (or skips it, with SLUICE_TEST_REDIS=off). Tests that run
// redis-server by other means than this package call it first.
func Require(t testing.TB) {
	t.Helper()
	_, err := serverBinary()
	if err == nil {
		_, err = cliBinary()
	}
	requireStarted(t, ServerName(), err)
}

// Deadlines for a process to come up and to go down.
const (
	startTimeout = 10 * time.Second
	stopTimeout  = 5 * time.Second
	pollEvery    = 10 * time.Millisecond
	startRetries = 5
)

// started is what the test-facing constructors share: it fails t (see
// requireStarted) unless what started without err, and closes it when t
// ends.
func started[T interface{ Close() }](t testing.TB, what string, s T, err error) T {
	t.Helper()
	requireStarted(t, what, err)
	t.Cleanup(s.Close)
	return s
}

// requireStarted fails t on any error from starting what. When the error is
// ErrNotInstalled it says how to install Redis, or skips t when a run
// without Redis was asked for.
func requireStarted(t testing.TB, what string, err error) {
	t.Helper()
	if errors.Is(err, ErrNotInstalled) && OptedOut() {
		t.Skipf("start %s: %v (%s=off)", what, err, OptOutEnv)
	}
	if errors.Is(err, ErrNotInstalled) {
		t.Fatalf("start %s: %v: %s", what, err, InstallHint)
	}
	if err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
}

// clientList holds the clients a server or set handed out, to close them
// with it. It is safe for concurrent use.
type clientList struct {
	mu      sync.Mutex
	clients []interface{ Close() error }
}

// add records c to be closed by closeAll.
func (l *clientList) add(c interface{ Close() error }) {
	l.mu.Lock()
	l.clients = append(l.clients, c)
	l.mu.Unlock()
}

// closeAll closes every client added so far, once.
func (l *clientList) closeAll() {
	l.mu.Lock()
	clients := l.clients
	l.clients = nil
	l.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
}

// serverBinary returns the path of the server program (ServerName), or
// an error wrapping ErrNotInstalled that names it.
func serverBinary() (string, error) { return binary(ServerName()) }

// cliBinary returns the path of the cli (CLIName), or an error wrapping
// ErrNotInstalled that names it.
func cliBinary() (string, error) { return binary(CLIName()) }

// binary finds the program name (or path) on PATH or in /usr/bin (where
// the Debian packages put it, for a PATH without it), or returns an error
// wrapping ErrNotInstalled.
func binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if !strings.Contains(name, "/") {
		fallback := "/usr/bin/" + name
		if _, err := os.Stat(fallback); err == nil {
			return fallback, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, ErrNotInstalled)
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before redis-server binds it; start retries when that happens.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// config builds a redis.conf for one process from its ports.
type config func(port, busPort int) []string

// process is one redis-server (or sentinel) process and how to start it
// again on the same ports.
type process struct {
	dir      string
	conf     config
	extra    []string // command-line options after the config file
	sentinel bool
	needBus  bool // a cluster node also needs its bus port free
	// ready reports whether the process serves; nil means PING on the
	// TCP port.
	ready func() error

	mu      sync.Mutex
	port    int
	busPort int
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
}

// newProcess makes a directory for one process and starts it on free ports.
func newProcess(root, name string, conf config, needBus, sentinel bool, extra []string) (*process, error) {
	return newProcessReady(root, name, conf, needBus, sentinel, extra, nil)
}

// newProcessReady is newProcess with a readiness check other than PING on
// the TCP port.
func newProcessReady(root, name string, conf config, needBus, sentinel bool, extra []string, ready func() error) (*process, error) {
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make %s: %w", dir, err)
	}
	p := &process{dir: dir, conf: conf, extra: extra, needBus: needBus, sentinel: sentinel, ready: ready}
	var err error
	for attempt := 0; attempt < startRetries; attempt++ {
		if p.port, err = freePort(); err != nil {
			return nil, err
		}
		if needBus {
			if p.busPort, err = freePort(); err != nil {
				return nil, err
			}
		}
		err = p.start()
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("start %s after %d attempts: %w", name, startRetries, err)
}

var errPortTaken = errors.New("port taken")

// start writes the config and runs the process on p.port, returning once
// it answers PING. The caller holds no lock.
func (p *process) start() error {
	bin, err := serverBinary()
	if err != nil {
		return err
	}
	confPath := filepath.Join(p.dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(strings.Join(p.conf(p.port, p.busPort), "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", confPath, err)
	}
	logPath := filepath.Join(p.dir, "redis.log")
	_ = os.Remove(logPath)
	args := []string{confPath}
	if p.sentinel {
		args = append(args, "--sentinel")
	}
	args = append(args, p.extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = p.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			log := p.logTail()
			if strings.Contains(log, "Address already in use") || strings.Contains(log, "Could not create server TCP listening socket") {
				return fmt.Errorf("%s: %w", p.addr(), errPortTaken)
			}
			return fmt.Errorf("%s on %s exited at start: %s%s", ServerName(), p.addr(), stderr.String(), log)
		default:
		}
		if p.isReady() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("%s on %s not ready after %s: %s", ServerName(), p.addr(), startTimeout, p.logTail())
		}
		time.Sleep(pollEvery)
	}
}

func (p *process) isReady() error {
	if p.ready != nil {
		return p.ready()
	}
	return pingRaw(p.addr())
}

// logTail returns the last lines of the process's log, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(filepath.Join(p.dir, "redis.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\n" + strings.Join(lines, "\n")
}

func (p *process) addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
}

func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// current returns the command last started and the channel closed when
// it exits (both nil before the first start).
func (p *process) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// closed reports whether c is closed (never, for a nil c).
func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// running reports whether the process is alive.
func (p *process) running() bool {
	_, done := p.current()
	return done != nil && !closed(done)
}

// signal sends sig to the process (by PID) if it is running.
func (p *process) signal(sig syscall.Signal) {
	cmd, done := p.current()
	if cmd == nil || closed(done) {
		return
	}
	_ = cmd.Process.Signal(sig)
}

// kill stops the process at once (SIGKILL) and waits for it to exit.
func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	p.wait(stopTimeout)
}

// stop asks the process to exit (SIGTERM), and kills it after a deadline.
func (p *process) stop() {
	p.signal(syscall.SIGCONT) // a paused process cannot handle SIGTERM
	p.signal(syscall.SIGTERM)
	if !p.wait(stopTimeout) {
		p.kill()
	}
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *process) wait(d time.Duration) bool {
	_, done := p.current()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// restart starts the process again on the same ports after it was killed
// or stopped. It fails if another process took the port meanwhile.
func (p *process) restart() error {
	if p.running() {
		return fmt.Errorf("%s on %s is still running", ServerName(), p.addr())
	}
	return p.start()
}

// pingRaw sends an inline PING and accepts PONG or an authentication error
// (the server is up, it just wants a password). LOADING and connection
// errors mean not ready.
func pingRaw(addr string) error { return pingNet("tcp", addr) }

// pingNet is pingRaw on any network ("unix" for a socket path).
func pingNet(network, addr string) error {
	c, err := net.DialTimeout(network, addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimSpace(line)
	if line == "+PONG" || strings.HasPrefix(line, "-NOAUTH") || strings.HasPrefix(line, "-WRONGPASS") {
		return nil
	}
	return fmt.Errorf("PING %s: %s", addr, line)
}

// baseConfig holds the settings every process shares: loopback only, no
// persistence, files in dir.
func baseConfig(dir string, port int) []string {
	return []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"dir " + dir,
		"logfile " + filepath.Join(dir, "redis.log"),
		"daemonize no",
		`save ""`,
		"appendonly no",
		"protected-mode yes",
		// A replica syncs at once instead of waiting 5s for others to join.
		"repl-diskless-sync-delay 0",
	}
}

// waitFor polls cond until it returns nil or timeout passes, and returns
// cond's last error on timeout.
func waitFor(timeout time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not reached after %s: %w", what, timeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// tempRoot makes a short temporary directory (unix socket paths are limited
// to ~100 bytes, so t.TempDir's long names are avoided).
func tempRoot() (string, error) {
	d, err := os.MkdirTemp("", "rt")
	if err != nil {
		return "", fmt.Errorf("make temp dir: %w", err)
	}
	return d, nil
}
