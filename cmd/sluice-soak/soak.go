package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
)

// row is one sample.
type row struct {
	at         time.Duration // since the load started
	rss        int64         // bytes
	goroutines int           // -1: not available
	redisMem   int64         // used_memory, bytes; -1: no Redis
	calls      int64         // calls in the interval
	over       int64
	failed     int64
	failures   string
	meanLat    time.Duration
	maxLat     time.Duration
	interval   time.Duration
}

// report is one backend's soak.
type report struct {
	backend string
	rows    []row
	verdict []figureVerdict
	failed  int64
	stopErr error
}

// ok reports whether every figure levelled off, no call failed and sluice
// stopped cleanly.
func (r *report) ok() bool {
	for _, v := range r.verdict {
		if !v.levels {
			return false
		}
	}
	return r.failed == 0 && r.stopErr == nil
}

// soak runs one backend for o.duration and prints its table and verdict.
func soak(ctx context.Context, o options, bin, backendName string, out io.Writer) (*report, error) {
	dir, err := os.MkdirTemp("", "sluice-soak-config")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "soak.yaml"), []byte(soakConfig), 0o644); err != nil {
		return nil, err
	}
	env := map[string]string{"SLUICE_CONFIG": dir, "BACKEND_TYPE": backendName}

	var rc *goredis.Client
	if backendName == "redis" {
		addr := o.redisURL
		if addr == "" {
			srv, err := redistest.StartStandalone()
			if err != nil {
				return nil, fmt.Errorf("start redis-server: %w", err)
			}
			defer srv.Close()
			addr = srv.Addr()
			fmt.Fprintf(out, "redis-server pid %d on %s\n", srv.PID(), addr)
		}
		env["REDIS_URL"] = addr
		rc = goredis.NewClient(&goredis.Options{Addr: addr, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		defer rc.Close()
	}

	p, err := startSluice(bin, env)
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	conn, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	fmt.Fprintf(out, "\n== %s backend: sluice pid %d (gRPC %s, HTTP %s), %d clients at %s, %v, a sample every %v\n",
		backendName, p.PID(), p.GRPCAddr(), p.HTTPAddr(), o.clients, rateString(o.rate), o.duration, o.sample)

	gs := &goroutineSource{httpAddr: p.HTTPAddr(), client: &http.Client{Timeout: 2 * time.Second}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	l := startLoader(loadCtx, rlsv3.NewRateLimitServiceClient(conn), o.clients, o.rate)
	rep := &report{backend: backendName}
	start := time.Now()
	last := start
	tick := time.NewTicker(o.sample)
	defer tick.Stop()
	printHeader(out)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
			continue
		case <-tick.C:
		}
		iv := l.swap()
		now := time.Now()
		r := row{at: now.Sub(start).Round(time.Second), goroutines: -1, redisMem: -1, interval: now.Sub(last)}
		last = now
		if r.rss, err = readRSS(p.PID()); err != nil {
			return nil, fmt.Errorf("read RSS: %w", err)
		}
		if n, err := gs.count(); err == nil {
			r.goroutines = n
		} else if !errors.Is(err, errNoGoroutines) {
			return nil, fmt.Errorf("read goroutines: %w", err)
		}
		if rc != nil {
			if r.redisMem, err = usedMemory(ctx, rc); err != nil {
				return nil, fmt.Errorf("read Redis used_memory: %w", err)
			}
		}
		ok, over, failed := iv.ok.Load(), iv.over.Load(), iv.failed.Load()
		r.calls, r.over, r.failed = ok+over+failed, over, failed
		r.failures = failureString(iv)
		if r.calls > 0 {
			r.meanLat = time.Duration(iv.latencySum.Load() / r.calls)
		}
		r.maxLat = time.Duration(iv.latencyMax.Load())
		rep.failed += failed
		rep.rows = append(rep.rows, r)
		printRow(out, r)
		done = now.Sub(start) >= o.duration
	}
	stopLoad()
	l.wait()
	rep.stopErr = p.Stop(30 * time.Second)
	rep.verdict = verdicts(rep.rows)
	printVerdict(out, rep)
	if o.keep {
		fmt.Fprintf(out, "-- sluice logs --\n%s", p.Logs())
	}
	return rep, nil
}

// usedMemory reads used_memory from INFO memory.
func usedMemory(ctx context.Context, rc *goredis.Client) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := rc.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("no used_memory in INFO memory")
}

func rateString(rate int) string {
	if rate == 0 {
		return "full speed"
	}
	return strconv.Itoa(rate) + " calls/s"
}

func failureString(iv *interval) string {
	f := iv.failures()
	if len(f) == 0 {
		return ""
	}
	var parts []string
	for c, n := range f {
		parts = append(parts, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func mibString(b int64) string {
	if b < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(b)/(1<<20))
}

func printHeader(out io.Writer) {
	fmt.Fprintf(out, "| %6s | %8s | %10s | %14s | %8s | %7s | %6s | %8s | %8s |\n",
		"t", "RSS MiB", "goroutines", "Redis used MiB", "calls/s", "over %", "failed", "mean ms", "max ms")
	fmt.Fprintf(out, "|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n",
		strings.Repeat("-", 8), strings.Repeat("-", 10), strings.Repeat("-", 12), strings.Repeat("-", 16),
		strings.Repeat("-", 10), strings.Repeat("-", 9), strings.Repeat("-", 8), strings.Repeat("-", 10), strings.Repeat("-", 10))
}

func printRow(out io.Writer, r row) {
	g := "-"
	if r.goroutines >= 0 {
		g = strconv.Itoa(r.goroutines)
	}
	overPct := 0.0
	if r.calls > 0 {
		overPct = 100 * float64(r.over) / float64(r.calls)
	}
	failed := strconv.FormatInt(r.failed, 10)
	if r.failures != "" {
		failed += " (" + r.failures + ")"
	}
	fmt.Fprintf(out, "| %6s | %8s | %10s | %14s | %8.0f | %7.1f | %6s | %8.2f | %8.1f |\n",
		r.at, mibString(r.rss), g, mibString(r.redisMem), float64(r.calls)/r.interval.Seconds(), overPct, failed,
		float64(r.meanLat)/1e6, float64(r.maxLat)/1e6)
}
