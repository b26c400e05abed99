// Command sluice-bench is sluice's load generator. It drives
// ShouldRateLimit over gRPC against a running server and prints a summary
// on stderr and one JSON line with every figure on stdout.
//
//	sluice-bench [run] --addr 127.0.0.1:8081 --domain bench \
//	    --descriptor 'remote_address={ip}' -c 64 --duration 10s --warmup 2s \
//	    --keys 10000 [--dist zipf --zipf-s 1.1] [--attack-keys 4 --attack-share 0.3]
//	sluice-bench noop --addr 127.0.0.1:9081 [--for 60s] [--redis 127.0.0.1:6379 [--lanes 2]]
//	sluice-bench summarize [--doc FILE]... [--only BLOCKS] OUTDIR [OUTDIR...]
//
// `noop` serves a RateLimitService that answers OK and does nothing else:
// the ceiling to compare a real server with; with --redis, it answers
// each call only after a Redis round trip shared by the calls waiting
// together (loadgen.RoundTrip): what the round trip alone costs. `summarize` turns the output
// directory of measure.sh (beside this file; it runs the measurements of
// docs/benchmarks.md) into the markdown tables of docs/benchmarks.md, or
// with --doc rewrites those tables in place. The engine is
// internal/loadgen.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-rl/sluice/internal/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = load(ctx, args, stdout, stderr)
	case "noop":
		err = noop(ctx, args, stderr)
	case "summarize":
		err = summarize(args, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "sluice-bench: unknown command %q (want run, noop or summarize)\n", cmd)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "sluice-bench %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// errUsage marks an error the flag package has already printed.
var errUsage = errors.New("usage")

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

func load(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice-bench run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg         loadgen.Config
		descriptors repeated
		dist        string
		cpuprofile  string
		quiet       bool
		hits        uint
	)
	fs.StringVar(&cfg.Target, "addr", "127.0.0.1:8081", "server gRPC address")
	fs.StringVar(&cfg.Domain, "domain", loadgen.DefaultDomain, "request domain")
	fs.Var(&descriptors, "descriptor", "descriptor template, e.g. 'remote_address={ip}' or 'user={id},path=/api'; repeat for several per request ({n}, {id}, {ip})")
	fs.UintVar(&hits, "hits-addend", 0, "request hits_addend (0: unset, meaning 1)")
	fs.IntVar(&cfg.Workers, "c", loadgen.DefaultWorkers, "concurrent callers")
	fs.IntVar(&cfg.Conns, "conns", 4, "gRPC connections shared by the callers")
	fs.DurationVar(&cfg.Duration, "duration", loadgen.DefaultDuration, "measured phase (unless --requests)")
	fs.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "warm-up before measuring (not counted)")
	fs.Int64Var(&cfg.Requests, "requests", 0, "measure exactly this many calls instead of a duration")
	fs.IntVar(&cfg.Keys.Count, "keys", 10000, "distinct keys (K)")
	fs.StringVar(&dist, "dist", "uniform", "key distribution: uniform or zipf")
	fs.Float64Var(&cfg.Keys.ZipfS, "zipf-s", 1.1, "zipf exponent s (> 1)")
	fs.IntVar(&cfg.Keys.AttackKeys, "attack-keys", 0, "hot keys far over their limit (A)")
	fs.Float64Var(&cfg.Keys.AttackShare, "attack-share", 0, "share of requests sent to the attack keys")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the key sequence")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Second, "per-call deadline (0: none)")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "write this process's (the load generator's) CPU profile to a file")
	fs.BoolVar(&quiet, "quiet", false, "print only the JSON line")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(descriptors) == 0 {
		descriptors = repeated{"remote_address={ip}"}
	}
	for _, d := range descriptors {
		t, err := loadgen.ParseTemplate(d)
		if err != nil {
			return err
		}
		cfg.Descriptors = append(cfg.Descriptors, t)
	}
	var err error
	if cfg.Keys.Distribution, err = loadgen.ParseDistribution(dist); err != nil {
		return err
	}
	if hits > 1<<32-1 {
		return fmt.Errorf("hits-addend %d does not fit in 32 bits", hits)
	}
	cfg.HitsAddend = uint32(hits)
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	r, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if !quiet {
		printSummary(stderr, r)
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	fmt.Fprintf(stdout, "%s\n", line)
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted; the figures cover %.1fs: %w", r.ElapsedSec, ctx.Err())
	}
	return nil
}

// printSummary prints the report for a reader.
func printSummary(w io.Writer, r *loadgen.Report) {
	fmt.Fprintf(w, "target %s, %d callers over %d connections, %s over %d keys", r.Target, r.Workers, r.Conns, r.Distribution, r.Keys)
	if r.AttackKeys > 0 {
		fmt.Fprintf(w, ", attack %.0f%% on %d keys", 100*r.AttackShare, r.AttackKeys)
	}
	fmt.Fprintf(w, "\ndescriptors %s\n", strings.Join(r.Descriptors, " + "))
	fmt.Fprintf(w, "requests    %d in %.2fs (after %.1fs warm-up): %.0f req/s\n", r.Requests, r.ElapsedSec, r.WarmupSec, r.Throughput)
	fmt.Fprintf(w, "answers     OK %d, OVER_LIMIT %d", r.OK, r.OverLimit)
	if r.Unknown > 0 {
		fmt.Fprintf(w, ", UNKNOWN %d", r.Unknown)
	}
	fmt.Fprintf(w, ", errors %d", r.ErrorTotal)
	for code, n := range r.Errors {
		fmt.Fprintf(w, " [%s %d]", code, n)
	}
	fmt.Fprintln(w)
	if r.AttackKeys > 0 {
		fmt.Fprintf(w, "attack keys %d requests, %d OVER_LIMIT; normal keys %d requests, %d OVER_LIMIT\n",
			r.Attack.Requests, r.Attack.OverLimit, r.Normal.Requests, r.Normal.OverLimit)
	}
	l := r.Latency
	fmt.Fprintf(w, "latency ms  mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", l.Mean, l.P50, l.P90, l.P99, l.P999, l.Max)
}

// roundTripTimeout bounds the no-op's Redis round trip (--redis): a call
// waits no longer for it before failing with Unavailable.
const roundTripTimeout = 2 * time.Second

// requireLoopback refuses a host:port whose host is not a loopback address
// or "localhost".
func requireLoopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s is not a loopback address", host)
	}
	return nil
}

func noop(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice-bench noop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9081", "listen address (loopback only)")
	limit := fs.Duration("for", 0, "exit after this long (0: until interrupted)")
	redisAddr := fs.String("redis", "", "answer each call only after a Redis round trip (an ECHO) to this host:port (loopback only), shared by the calls waiting together")
	lanes := fs.Int("lanes", loadgen.DefaultRoundTripLanes, "with --redis: round trips in flight at most, one connection each")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if err := requireLoopback(*addr); err != nil {
		return fmt.Errorf("--addr %s: the no-op server listens on loopback only: %w", *addr, err)
	}
	if *redisAddr != "" {
		if err := requireLoopback(*redisAddr); err != nil {
			return fmt.Errorf("--redis %s: the no-op server talks to a Redis on loopback only: %w", *redisAddr, err)
		}
		if *lanes < 1 {
			return fmt.Errorf("--lanes %d: at least 1", *lanes)
		}
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := loadgen.NewNoopServer()
	what := "no-op RateLimitService"
	if *redisAddr != "" {
		rt := loadgen.NewRoundTrip(*redisAddr, *lanes, roundTripTimeout)
		defer rt.Close()
		srv = loadgen.NewRoundTripServer(rt)
		what = fmt.Sprintf("no-op RateLimitService, one Redis round trip to %s per call (%d lanes),", *redisAddr, *lanes)
	}
	fmt.Fprintf(stderr, "%s listening on %s\n", what, lis.Addr())
	if *limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *limit)
		defer cancel()
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		srv.Stop()
		<-done
		return nil
	}
}
