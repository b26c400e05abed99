package integration

import (
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// callTimeout bounds each call of a load: far above any REDIS_TIMEOUT a
// test sets, so what bounds a failing call is sluice, not the client.
const callTimeout = 10 * time.Second

// outcome is one call of a load.
type outcome struct {
	start, end time.Time
	code       rlsv3.RateLimitResponse_Code
	err        error
}

// load sends requests from several workers until stopped, recording every
// call.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ok     atomic.Int64

	mu       sync.Mutex
	outcomes []outcome
}

// startLoad runs workers goroutines, each calling p with req(worker, i)
// for its i-th call, until the load is stopped (at the latest when t
// ends).
func startLoad(t *testing.T, p *sluicetest.Process, workers int, req func(worker, i int) *rlsv3.RateLimitRequest) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for w := range workers {
		l.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				cctx, ccancel := context.WithTimeout(ctx, callTimeout)
				o := outcome{start: time.Now()}
				resp, err := p.Client().ShouldRateLimit(cctx, req(w, i))
				ccancel()
				o.end = time.Now()
				if ctx.Err() != nil {
					return // stopped mid-call: says nothing
				}
				if err != nil {
					o.err = err
				} else {
					o.code = resp.OverallCode
					if o.code == ok {
						l.ok.Add(1)
					}
				}
				l.mu.Lock()
				l.outcomes = append(l.outcomes, o)
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(l.stop)
	return l
}

// stop ends the load and waits for its workers.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// since returns the calls that started at or after t0.
func (l *load) since(t0 time.Time) []outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []outcome
	for _, o := range l.outcomes {
		if !o.start.Before(t0) {
			out = append(out, o)
		}
	}
	return out
}

// all returns every call so far.
func (l *load) all() []outcome { return l.since(time.Time{}) }

// count returns how many of os satisfy f.
func count(os []outcome, f func(outcome) bool) int {
	n := 0
	for _, o := range os {
		if f(o) {
			n++
		}
	}
	return n
}

func failed(o outcome) bool   { return o.err != nil }
func admitted(o outcome) bool { return o.err == nil && o.code == ok }

// firstOKAfter returns the end of the first admitted call that ended after
// t0, and whether there is one.
func (l *load) firstOKAfter(t0 time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, o := range l.outcomes {
		if admitted(o) && o.end.After(t0) && (first.IsZero() || o.end.Before(first)) {
			first = o.end
		}
	}
	return first, !first.IsZero()
}

// firstOKStartedAfter returns the end of the first admitted call that
// started after t0, and whether there is one.
func (l *load) firstOKStartedAfter(t0 time.Time) (time.Time, bool) {
	var first time.Time
	for _, o := range l.since(t0) {
		if admitted(o) && (first.IsZero() || o.end.Before(first)) {
			first = o.end
		}
	}
	return first, !first.IsZero()
}

// checkErrors fails t unless every failed call of os is gRPC Unavailable
// with a reason, and returns the longest a failed call took.
func checkErrors(t *testing.T, os []outcome) time.Duration {
	t.Helper()
	var longest time.Duration
	bad := 0
	for _, o := range os {
		if o.err == nil {
			continue
		}
		longest = max(longest, o.end.Sub(o.start))
		if st := status.Convert(o.err); st.Code() != codes.Unavailable || st.Message() == "" {
			if bad++; bad <= 3 {
				t.Errorf("call failed with %v, want Unavailable with a reason", o.err)
			}
		}
	}
	if bad > 3 {
		t.Errorf("... %d calls in all failed with something other than Unavailable", bad)
	}
	return longest
}

// health asks p's gRPC health service about the rate-limit service.
func health(t *testing.T, p *sluicetest.Process) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(p.Conn()).Check(ctx,
		&healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return resp.Status
}

// waitHealth polls p's gRPC health until it reports want.
func waitHealth(t *testing.T, p *sluicetest.Process, want healthpb.HealthCheckResponse_ServingStatus, timeout time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	testenv.Until(t, timeout, "gRPC health "+want.String(), func() bool { return health(t, p) == want })
	return time.Since(t0)
}
