// Command sluice-soak runs the real sluice binary under a long mixed load,
// once per backend (the embedded memory backend, then Redis), and samples
// every interval the sluice process's resident memory (VmRSS from
// /proc/PID/status), its goroutines (from /debug/pprof/goroutine?debug=1
// or the go_goroutines metric at /metrics, when the binary serves either)
// and Redis's used_memory. It prints one table per backend and a verdict:
// each figure levels off when the mean of the last third of the samples is
// within a small margin of the mean of the middle third.
//
// It starts sluice itself (building ./cmd/sluice with the go tool unless
// -sluice names a binary) and, for the Redis backend, a redis-server on a
// free loopback port (unless -redis-url names one), and stops both by PID.
// It is a command, not a test: a soak takes minutes.
//
//	go run ./cmd/sluice-soak                       # 10 minutes per backend
//	go run ./cmd/sluice-soak -duration 2m -backends redis
//
// It knows sluice only as an operator does: command line, environment,
// gRPC and HTTP.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	duration, sample time.Duration
	backends         []string
	sluice           string // binary; empty builds one
	redisURL         string // empty starts redis-server
	clients          int
	rate             int // calls per second in all; 0: as fast as possible
	keep             bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var backends string
	fs := flag.NewFlagSet("sluice-soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "how long to load each backend")
	fs.DurationVar(&o.sample, "sample", 10*time.Second, "how often to sample memory and goroutines")
	fs.StringVar(&backends, "backends", "memory,redis", "backends to soak, in order: memory, redis")
	fs.StringVar(&o.sluice, "sluice", "", "sluice binary to run (default: go build ./cmd/sluice into a temporary directory)")
	fs.StringVar(&o.redisURL, "redis-url", "", "Redis to use, host:port (default: start redis-server on a free 127.0.0.1 port)")
	fs.IntVar(&o.clients, "clients", 16, "concurrent gRPC clients")
	fs.IntVar(&o.rate, "rate", 2000, "calls per second, all clients together (0: as fast as they can)")
	fs.BoolVar(&o.keep, "keep-logs", false, "print sluice's logs at the end")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for _, b := range strings.Split(backends, ",") {
		switch b = strings.TrimSpace(b); b {
		case "memory", "redis":
			o.backends = append(o.backends, b)
		case "":
		default:
			return o, fmt.Errorf("-backends: unknown backend %q (want memory, redis)", b)
		}
	}
	switch {
	case len(o.backends) == 0:
		return o, fmt.Errorf("-backends: none given")
	case o.sample <= 0 || o.duration < 3*o.sample:
		return o, fmt.Errorf("-duration %v must hold at least 3 samples of -sample %v", o.duration, o.sample)
	case o.clients <= 0:
		return o, fmt.Errorf("-clients must be positive")
	case o.rate < 0:
		return o, fmt.Errorf("-rate must not be negative")
	}
	return o, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit code: 0 when every figure
// of every backend levelled off and no call failed, 1 otherwise, 2 on bad
// flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-soak: %v\n", err)
		return 2
	}
	bin := o.sluice
	if bin == "" {
		dir, err := os.MkdirTemp("", "sluice-soak")
		if err != nil {
			fmt.Fprintf(stderr, "sluice-soak: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(stdout, "building ./cmd/sluice ...")
		if bin, err = buildSluice(ctx, dir); err != nil {
			fmt.Fprintf(stderr, "sluice-soak: %v\n", err)
			return 1
		}
	}
	code := 0
	for _, b := range o.backends {
		rep, err := soak(ctx, o, bin, b, stdout)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-soak: %s backend: %v\n", b, err)
			return 1
		}
		if !rep.ok() {
			code = 1
		}
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "sluice-soak: interrupted")
			return 1
		}
	}
	return code
}
