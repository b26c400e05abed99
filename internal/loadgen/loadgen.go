// Package loadgen is the engine of sluice-bench: it drives
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over gRPC
// against a target address and reports throughput, answers, errors and
// latency percentiles.
//
// A run has N workers over M connections. Each worker sends one call at a
// time (closed loop) and times it on the monotonic clock (time.Since). Calls
// that start during the warm-up are not counted; the measured phase lasts a
// duration, or a fixed number of calls. Errors are counted by gRPC code, and
// their latency is recorded like any other call's. Each request's
// descriptors come from templates filled with a key number drawn from a
// uniform or Zipf distribution, plus an optional attack mix (a share of
// requests on a few hot keys). Workers draw from their own seeded generator,
// so a run's key sequence is reproducible.
//
// The package is a client of the public API only: it knows nothing of
// sluice's backends, configuration or service internals. Noop is the
// do-nothing server a real one is compared with.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Defaults for Config's zero values.
const (
	DefaultWorkers  = 64
	DefaultDuration = 10 * time.Second
	DefaultDomain   = "bench"
)

// maxPrebuilt is the most key numbers whose requests are built before the
// run, so that building them costs the client nothing during it.
const maxPrebuilt = 1 << 18

// Config describes one run. Zero values take the defaults named.
type Config struct {
	// Target is the server's host:port.
	Target string
	// Domain of every request. "" means DefaultDomain.
	Domain string
	// Descriptors of every request, filled with the request's key number.
	Descriptors []Template
	// HitsAddend is the request's hits_addend; 0 leaves it unset (1).
	HitsAddend uint32
	// Workers is the number of concurrent callers. 0 means DefaultWorkers.
	Workers int
	// Conns is the number of gRPC connections the workers share
	// round-robin. 0 means 1.
	Conns int
	// Warmup runs before the measured phase; its calls are not counted.
	Warmup time.Duration
	// Duration is the measured phase's length when Requests is 0. 0 means
	// DefaultDuration.
	Duration time.Duration
	// Requests, when > 0, ends the measured phase after that many calls.
	Requests int64
	// Keys picks each request's key number.
	Keys Keys
	// Seed makes the key sequence reproducible.
	Seed uint64
	// Timeout bounds each call; 0 means no per-call bound (the run's
	// context still bounds everything).
	Timeout time.Duration
	// DialOptions are added to the connections' options (tests).
	DialOptions []grpc.DialOption
}

func (c Config) withDefaults() Config {
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.Conns <= 0 {
		c.Conns = 1
	}
	if c.Duration <= 0 {
		c.Duration = DefaultDuration
	}
	c.Keys = c.Keys.withDefaults()
	return c
}

func (c Config) validate() error {
	switch {
	case c.Target == "":
		return errors.New("no target address")
	case len(c.Descriptors) == 0:
		return errors.New("no descriptor template")
	case c.Warmup < 0:
		return fmt.Errorf("negative warm-up %v", c.Warmup)
	case c.Requests < 0:
		return fmt.Errorf("negative request count %d", c.Requests)
	}
	return c.Keys.validate()
}

// Report is what a run measured. Durations are in milliseconds in JSON.
type Report struct {
	Target       string   `json:"target"`
	Domain       string   `json:"domain"`
	Descriptors  []string `json:"descriptors"`
	Workers      int      `json:"workers"`
	Conns        int      `json:"conns"`
	Keys         int      `json:"keys"`
	Distribution string   `json:"distribution"`
	ZipfS        float64  `json:"zipf_s,omitempty"`
	AttackKeys   int      `json:"attack_keys,omitempty"`
	AttackShare  float64  `json:"attack_share,omitempty"`
	Seed         uint64   `json:"seed"`
	WarmupSec    float64  `json:"warmup_s"`
	// ElapsedSec is the measured phase: from the end of the warm-up to the
	// last counted call's answer.
	ElapsedSec float64 `json:"elapsed_s"`
	// Requests is the number of counted calls, answered or failed.
	Requests uint64 `json:"requests"`
	// CallsTotal counts every call made, warm-up included: with
	// ClientCPUSec (and a server's CPU time over the same span) it gives
	// the CPU cost of one call.
	CallsTotal uint64 `json:"calls_total"`
	// Throughput is Requests / ElapsedSec.
	Throughput float64 `json:"throughput_rps"`
	// OK, OverLimit and Unknown count answers by overall_code.
	OK        uint64 `json:"ok"`
	OverLimit uint64 `json:"over_limit"`
	Unknown   uint64 `json:"unknown,omitempty"`
	// Errors counts failed calls by gRPC code name.
	Errors     map[string]uint64 `json:"errors"`
	ErrorTotal uint64            `json:"error_total"`
	// Attack and Normal split the answered calls by key kind.
	Attack  Split   `json:"attack"`
	Normal  Split   `json:"normal"`
	Latency Latency `json:"latency_ms"`
	// ClientCPUSec is the CPU time this process (the load generator) used
	// during the whole run, warm-up included: on a shared machine the
	// client competes with the server for the same cores.
	ClientCPUSec float64 `json:"client_cpu_s"`
	// ClientSyscalls is the read and write system calls this process made
	// over the same span (Linux: syscr + syscw of /proc/self/io; absent
	// elsewhere). Waiting (epoll, futex) is not among them.
	ClientSyscalls *uint64 `json:"client_syscalls,omitempty"`
	// Histogram holds every counted call's latency.
	Histogram *Histogram `json:"-"`
}

// Split counts the calls on one kind of key.
type Split struct {
	Requests  uint64 `json:"requests"`
	OverLimit uint64 `json:"over_limit"`
	Errors    uint64 `json:"errors"`
}

// Latency summarises the histogram, in milliseconds.
type Latency struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// worker is one caller's state and tallies.
type worker struct {
	client            rlsv3.RateLimitServiceClient
	pick              *picker
	hist              Histogram
	ok, over, unknown uint64
	attack, normal    Split
	errs              map[string]uint64
	calls             uint64    // every call, warm-up included
	last              time.Time // when the last counted call was answered
}

// Run performs one run. It returns early, with what was measured so far,
// when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("load run: %w", err)
	}
	conns := make([]*grpc.ClientConn, cfg.Conns)
	for i := range conns {
		opts := slices.Concat([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, clientWindows(), cfg.DialOptions)
		cc, err := grpc.NewClient(cfg.Target, opts...)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return nil, fmt.Errorf("load run: connect to %s: %w", cfg.Target, err)
		}
		cc.Connect()
		conns[i] = cc
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	requests := newRequests(cfg)

	workers := make([]*worker, cfg.Workers)
	for i := range workers {
		workers[i] = &worker{
			client: rlsv3.NewRateLimitServiceClient(conns[i%len(conns)]),
			pick:   cfg.Keys.picker(cfg.Seed, i),
			errs:   make(map[string]uint64),
		}
	}
	cpuBefore := processCPU()
	callsBefore, callsOK := processSyscalls()
	start := time.Now()
	measureFrom := start.Add(cfg.Warmup)
	deadline := measureFrom.Add(cfg.Duration)
	var issued atomic.Int64
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, cfg, requests, measureFrom, deadline, &issued)
		}()
	}
	wg.Wait()
	cpu := processCPU() - cpuBefore
	callsAfter, callsAfterOK := processSyscalls()

	r := &Report{
		Target: cfg.Target, Domain: cfg.Domain, Workers: cfg.Workers, Conns: cfg.Conns,
		Keys: cfg.Keys.Count, Distribution: cfg.Keys.Distribution.String(),
		AttackKeys: cfg.Keys.AttackKeys, AttackShare: cfg.Keys.AttackShare, Seed: cfg.Seed,
		WarmupSec: cfg.Warmup.Seconds(), Errors: make(map[string]uint64), Histogram: &Histogram{},
		ClientCPUSec: cpu.Seconds(),
	}
	if callsOK && callsAfterOK {
		n := callsAfter - callsBefore
		r.ClientSyscalls = &n
	}
	if cfg.Keys.Distribution == Zipf {
		r.ZipfS = cfg.Keys.ZipfS
	}
	for _, t := range cfg.Descriptors {
		r.Descriptors = append(r.Descriptors, t.String())
	}
	var last time.Time
	for _, w := range workers {
		r.Histogram.Merge(&w.hist)
		r.OK += w.ok
		r.OverLimit += w.over
		r.Unknown += w.unknown
		r.CallsTotal += w.calls
		for code, n := range w.errs {
			r.Errors[code] += n
			r.ErrorTotal += n
		}
		r.Attack.add(w.attack)
		r.Normal.add(w.normal)
		if w.last.After(last) {
			last = w.last
		}
	}
	r.Requests = r.Histogram.Count()
	if r.Requests > 0 {
		r.ElapsedSec = last.Sub(measureFrom).Seconds()
		if r.ElapsedSec > 0 {
			r.Throughput = float64(r.Requests) / r.ElapsedSec
		}
	}
	h := r.Histogram
	r.Latency = Latency{Mean: ms(h.Mean()), P50: ms(h.Quantile(0.50)), P90: ms(h.Quantile(0.90)),
		P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Max())}
	return r, nil
}

func (s *Split) add(o Split) {
	s.Requests += o.Requests
	s.OverLimit += o.OverLimit
	s.Errors += o.Errors
}

// run sends calls until the measured phase ends.
func (w *worker) run(ctx context.Context, cfg Config, reqs *requests, measureFrom, deadline time.Time, issued *atomic.Int64) {
	for ctx.Err() == nil {
		begin := time.Now()
		counted := !begin.Before(measureFrom)
		if counted {
			if cfg.Requests > 0 {
				if issued.Add(1) > cfg.Requests {
					return
				}
			} else if !begin.Before(deadline) {
				return
			}
		}
		key, attack := w.pick.next()
		req := reqs.get(key)
		callCtx, cancel := ctx, context.CancelFunc(nil)
		if cfg.Timeout > 0 {
			callCtx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		}
		resp, err := w.client.ShouldRateLimit(callCtx, req)
		took := time.Since(begin)
		if cancel != nil {
			cancel()
		}
		w.calls++
		if !counted {
			continue
		}
		if err != nil && ctx.Err() != nil {
			return // the run was cancelled: this call's failure is not the server's
		}
		w.last = begin.Add(took)
		w.hist.Record(took)
		split := &w.normal
		if attack {
			split = &w.attack
		}
		split.Requests++
		switch {
		case err != nil:
			w.errs[status.Code(err).String()]++
			split.Errors++
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
			w.ok++
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			w.over++
			split.OverLimit++
		default:
			w.unknown++
		}
	}
}

// requests builds (or looks up) the request of each key number.
type requests struct {
	cfg      Config
	prebuilt []*rlsv3.RateLimitRequest
}

func newRequests(cfg Config) *requests {
	r := &requests{cfg: cfg}
	if n := cfg.Keys.total(); n <= maxPrebuilt {
		r.prebuilt = make([]*rlsv3.RateLimitRequest, n)
		for i := range r.prebuilt {
			r.prebuilt[i] = r.build(uint64(i))
		}
	}
	return r
}

func (r *requests) get(key uint64) *rlsv3.RateLimitRequest {
	if key < uint64(len(r.prebuilt)) {
		return r.prebuilt[key]
	}
	return r.build(key)
}

func (r *requests) build(key uint64) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: r.cfg.Domain, HitsAddend: r.cfg.HitsAddend,
		Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(r.cfg.Descriptors))}
	for i, t := range r.cfg.Descriptors {
		req.Descriptors[i] = t.Expand(key)
	}
	return req
}
