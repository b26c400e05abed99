package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/internal/testkit/sluiceproc"
)

// buildSluice builds ./cmd/sluice of the module the command runs in.
func buildSluice(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "sluice")
	if err := sluiceproc.Build(ctx, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// startSluice runs `bin serve` on free loopback ports with env added to a
// minimal environment (LOG_LEVEL info unless env says otherwise), and
// waits until /healthcheck answers 200.
func startSluice(bin string, env map[string]string) (*sluiceproc.Process, error) {
	full := map[string]string{"LOG_LEVEL": "info"}
	for k, v := range env {
		full[k] = v
	}
	return sluiceproc.Start(sluiceproc.Options{Binary: bin, Env: full, RequireHealthy: true})
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
