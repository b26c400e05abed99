package reliability

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sample is what one client saw of one call.
type sample struct {
	worker     int
	key        string    // what the call was about (the test's own label)
	start, end time.Time // local clock around the call
	code       codes.Code
	overall    rlsv3.RateLimitResponse_Code
	status     *rlsv3.RateLimitResponse_DescriptorStatus // the first status, when answered
	msg        string                                    // the error message, when failed
}

// admitted reports whether the call was answered and its first descriptor
// admitted.
func (s sample) admitted() bool {
	return s.code == codes.OK && s.status.GetCode() == rlsv3.RateLimitResponse_OK
}

// latency is how long the call took as the client saw it.
func (s sample) latency() time.Duration { return s.end.Sub(s.start) }

// outcome names the sample's result for counting: OK, OVER_LIMIT or the
// gRPC error code.
func (s sample) outcome() string {
	if s.code != codes.OK {
		return s.code.String()
	}
	return s.overall.String()
}

// request is one call a load worker makes: a label for the sample and the
// request to send.
type request struct {
	key string
	req *rlsv3.RateLimitRequest
}

// load runs clients that call ShouldRateLimit in a loop until finish, and
// records every call. Live counters let a test wait for conditions while
// it runs.
type load struct {
	ok, errs atomic.Int64 // answered calls, failed calls
	over     atomic.Int64 // answered calls denied (OVER_LIMIT)
	admitted atomic.Int64 // answered calls whose first descriptor was admitted
	// circuit counts calls failed by the Redis backend's open circuit
	// breaker, and failedAfterCircuit other failures of calls that started
	// after the first of those was answered: with the breaker open, those
	// were its probes, and they found Redis still down.
	circuit, failedAfterCircuit atomic.Int64
	firstCircuit                atomic.Int64 // UnixNano when the first circuit-open answer came; 0 before
	stop                        chan struct{}
	wg                          sync.WaitGroup
	mu                          sync.Mutex
	samples                     []sample
	// pause is how long a worker waits after each call (0: none) and after
	// a failed one, so a fast-failing service does not burn the CPU the
	// Redis processes need.
	pause, pauseAfterError time.Duration
}

// startLoad starts workers goroutines; worker w's i-th call sends next(w,
// i) through the client clients[w%len(clients)].
func startLoad(clients []rlsv3.RateLimitServiceClient, workers int, pause time.Duration, next func(w, i int) request) *load {
	l := &load{stop: make(chan struct{}), pause: pause, pauseAfterError: max(pause, time.Millisecond)}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			client := clients[w%len(clients)]
			var mine []sample
			defer func() {
				l.mu.Lock()
				l.samples = append(l.samples, mine...)
				l.mu.Unlock()
			}()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				r := next(w, i)
				s := call(client, w, r)
				mine = append(mine, s)
				if s.code == codes.OK {
					l.ok.Add(1)
					if s.overall == rlsv3.RateLimitResponse_OVER_LIMIT {
						l.over.Add(1)
					}
					if s.admitted() {
						l.admitted.Add(1)
					}
					if l.pause > 0 {
						time.Sleep(l.pause)
					}
				} else {
					l.errs.Add(1)
					switch first := l.firstCircuit.Load(); {
					case strings.Contains(s.msg, "circuit open"):
						l.circuit.Add(1)
						l.firstCircuit.CompareAndSwap(0, s.end.UnixNano())
					case first != 0 && s.start.UnixNano() > first:
						l.failedAfterCircuit.Add(1)
					}
					time.Sleep(l.pauseAfterError)
				}
			}
		}()
	}
	return l
}

// call sends one request, bounded by a deadline far beyond any timeout
// the tests configure, and records it.
func call(client rlsv3.RateLimitServiceClient, w int, r request) sample {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := sample{worker: w, key: r.key, start: time.Now()}
	resp, err := client.ShouldRateLimit(ctx, r.req)
	s.end = time.Now()
	if err != nil {
		st, _ := status.FromError(err)
		s.code, s.msg = st.Code(), st.Message()
		return s
	}
	s.overall = resp.OverallCode
	if len(resp.Statuses) > 0 {
		s.status = resp.Statuses[0]
	}
	return s
}

// finish stops the workers and returns every sample, in start order.
func (l *load) finish() []sample {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.SortFunc(l.samples, func(a, b sample) int { return a.start.Compare(b.start) })
	return l.samples
}

// summary counts what clients saw.
type summary struct {
	calls       int
	outcomes    map[string]int
	maxLatency  time.Duration // of every call
	maxFailed   time.Duration // of failed calls
	firstErr    time.Time     // when the first failed call ended
	lastErr     time.Time     // when the last failed call ended
	resumed     time.Time     // when the first answered call after lastErr ended
	exampleErrs []string      // a few distinct error messages
}

func summarize(samples []sample) summary {
	s := summary{outcomes: map[string]int{}}
	seen := map[string]bool{}
	for _, x := range samples {
		s.calls++
		s.outcomes[x.outcome()]++
		s.maxLatency = max(s.maxLatency, x.latency())
		if x.code == codes.OK {
			continue
		}
		s.maxFailed = max(s.maxFailed, x.latency())
		if s.firstErr.IsZero() || x.end.Before(s.firstErr) {
			s.firstErr = x.end
		}
		if x.end.After(s.lastErr) {
			s.lastErr = x.end
		}
		// Error messages vary by address and count; keep a few kinds.
		kind := x.code.String() + ": " + x.msg
		if i := strings.Index(kind, "backend could not decide: "); i >= 0 {
			kind = kind[:i+len("backend could not decide: ")] + firstWords(kind[i+len("backend could not decide: "):], 6)
		}
		if !seen[kind] && len(s.exampleErrs) < 4 {
			seen[kind] = true
			s.exampleErrs = append(s.exampleErrs, kind)
		}
	}
	for _, x := range samples {
		if x.code == codes.OK && x.end.After(s.lastErr) && (s.resumed.IsZero() || x.end.Before(s.resumed)) {
			s.resumed = x.end
		}
	}
	return s
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = append(f[:n], "...")
	}
	return strings.Join(f, " ")
}

// String renders the counts in a stable order.
func (s summary) String() string {
	keys := make([]string, 0, len(s.outcomes))
	for k := range s.outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d calls:", s.calls)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, s.outcomes[k])
	}
	fmt.Fprintf(&b, "; max latency %v (failed calls: %v)", s.maxLatency.Round(time.Millisecond), s.maxFailed.Round(time.Millisecond))
	return b.String()
}

// logSummary logs s and its error examples.
func logSummary(t testing.TB, what string, s summary) {
	t.Helper()
	t.Logf("%s: %s", what, s)
	for _, e := range s.exampleErrs {
		t.Logf("  e.g. %s", e)
	}
}

// windowOf returns the end of the fixed window an admitted sample was
// counted in: the status's duration_until_reset is the window end minus
// Redis's now, rounded up to the second (to the millisecond with
// ResetMillis), and Redis decided between start and end, so end + reset
// lies in [window end, window end + latency + rounding); truncating to the
// period recovers the window end whenever latency and rounding together
// stay under one period (1 s periods need ResetMillis).
func windowOf(s sample, period time.Duration) time.Time {
	return s.end.Add(s.status.GetDurationUntilReset().AsDuration()).Truncate(period)
}

// admittedPerWindow counts the admitted samples of each key per fixed
// window of the given period, within a group chosen by group (e.g. the
// Redis process that decided them); it returns "group/key/window" → count.
func admittedPerWindow(samples []sample, period time.Duration, group func(sample) string) map[string]int {
	out := map[string]int{}
	for _, s := range samples {
		if !s.admitted() {
			continue
		}
		out[fmt.Sprintf("%s/%s/%s", group(s), s.key, windowOf(s, period).Format(time.RFC3339))]++
	}
	return out
}
