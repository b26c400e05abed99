package main

import (
	"bufio"
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildSluice builds ./cmd/sluice of the module the command runs in.
func buildSluice(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "sluice")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/sluice-rl/sluice/cmd/sluice")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice: %w\n%s", err, out)
	}
	return bin, nil
}

// sluiceProc is a running `sluice serve`.
type sluiceProc struct {
	cmd      *exec.Cmd
	logs     *logBuffer
	exited   chan struct{}
	exitErr  error
	grpcAddr string
	httpAddr string
}

// logBuffer collects the process's output.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// listenRE finds the addresses in sluice's "listening" log line (JSON).
var listenRE = struct{ grpc, http *regexp.Regexp }{
	grpc: regexp.MustCompile(`"grpc":"([^"]+)"`),
	http: regexp.MustCompile(`"http":"([^"]+)"`),
}

// startSluice runs `bin serve` on free loopback ports with env added to a
// minimal environment, and waits until /healthcheck answers 200.
func startSluice(bin string, env map[string]string) (*sluiceProc, error) {
	full := map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"HOST": "127.0.0.1", "PORT": "0",
		"LOG_FORMAT": "json", "LOG_LEVEL": "info",
	}
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			full[k] = v
		}
	}
	for k, v := range env {
		full[k] = v
	}
	var kv []string
	for k, v := range full {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	p := &sluiceProc{logs: &logBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve")
	p.cmd.Env = kv
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", bin, err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	wait := func(what string) error {
		select {
		case <-p.exited:
			return fmt.Errorf("sluice exited while waiting for %s: %v\n%s", what, p.exitErr, p.logs)
		default:
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("no %s within 30s\n%s", what, p.logs)
		}
		time.Sleep(20 * time.Millisecond)
		return nil
	}
	for p.grpcAddr == "" {
		sc := bufio.NewScanner(strings.NewReader(p.logs.String()))
		for sc.Scan() {
			line := sc.Text()
			g, h := listenRE.grpc.FindStringSubmatch(line), listenRE.http.FindStringSubmatch(line)
			if strings.Contains(line, "listening") && g != nil && h != nil {
				p.grpcAddr, p.httpAddr = g[1], h[1]
			}
		}
		if p.grpcAddr == "" {
			if err := wait("listening log line"); err != nil {
				return nil, err
			}
		}
	}
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get("http://" + p.httpAddr + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if err := wait("healthy /healthcheck"); err != nil {
			return nil, err
		}
	}
}

// pid is the sluice process id.
func (p *sluiceProc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits for a clean exit (status 0), killing the
// process if it does not exit within 30 s.
func (p *sluiceProc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.kill()
		return errors.New("sluice did not exit within 30s of SIGTERM; killed")
	}
	if p.exitErr != nil {
		return fmt.Errorf("sluice exited with %v", p.exitErr)
	}
	return nil
}

// kill stops the process at once, by its PID.
func (p *sluiceProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// readRSS returns VmRSS of process pid in bytes, from /proc/PID/status.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseRSS(string(b))
}

// parseRSS finds "VmRSS:   1234 kB" in a /proc/PID/status text.
func parseRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("unexpected VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS line")
}

// goroutineSource reads the sluice process's goroutine count over HTTP:
// the pprof goroutine profile if served, else the go_goroutines metric.
type goroutineSource struct {
	httpAddr string
	client   *http.Client
	path     string // the one that answered first; "" before
}

var errNoGoroutines = errors.New("neither /debug/pprof/goroutine nor a go_goroutines metric is served")

// count returns the number of goroutines, or errNoGoroutines.
func (g *goroutineSource) count() (int, error) {
	paths := []string{"/debug/pprof/goroutine?debug=1", "/metrics"}
	if g.path != "" {
		paths = []string{g.path}
	}
	for _, path := range paths {
		resp, err := g.client.Get("http://" + g.httpAddr + path)
		if err != nil {
			return 0, err
		}
		var body bytes.Buffer
		_, err = body.ReadFrom(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue
		}
		if n, ok := parseGoroutines(body.String()); ok {
			g.path = path
			return n, nil
		}
	}
	return 0, errNoGoroutines
}

var (
	profileTotal = regexp.MustCompile(`(?m)^goroutine profile: total (\d+)`)
	metricLine   = regexp.MustCompile(`(?m)^go_goroutines (\d+(?:\.\d+)?(?:e\+\d+)?)$`)
)

// parseGoroutines reads a goroutine count from a pprof debug=1 profile or
// a Prometheus text exposition.
func parseGoroutines(text string) (int, bool) {
	if m := profileTotal.FindStringSubmatch(text); m != nil {
		n, err := strconv.Atoi(m[1])
		return n, err == nil
	}
	if m := metricLine.FindStringSubmatch(text); m != nil {
		f, err := strconv.ParseFloat(m[1], 64)
		return int(f), err == nil
	}
	return 0, false
}
