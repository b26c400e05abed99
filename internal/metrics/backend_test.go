package metrics

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend"
)

// netTimeout is an error like a net.Error whose Timeout is true, as
// go-redis returns on a read deadline.
type netTimeout struct{}

func (netTimeout) Error() string   { return "i/o timeout" }
func (netTimeout) Timeout() bool   { return true }
func (netTimeout) Temporary() bool { return true }

// scripted is a backend that answers check i with errs[i%len(errs)] (nil
// for a decision) and advances a clock by took on every Decide.
type scripted struct {
	errs   []error
	clock  *testenv.Clock
	took   time.Duration
	pinged bool
	closed bool
}

func (s *scripted) Decide(_ context.Context, checks []backend.Check) []backend.Result {
	s.clock.Advance(s.took)
	res := make([]backend.Result, len(checks))
	for i := range res {
		res[i].Err = s.errs[i%len(s.errs)]
		if res[i].Err == nil {
			res[i].Decision.Allowed = true
		}
	}
	return res
}
func (s *scripted) Ping(context.Context) error { s.pinged = true; return stacktest.ErrRedisDown }
func (s *scripted) Close() error               { s.closed = true; return nil }

func TestInstrumentBackend(t *testing.T) {
	tests := []struct {
		name string
		err  error
		kind string
	}{
		{"deadline", fmt.Errorf("redis: evalsha: %w", context.DeadlineExceeded), "timeout"},
		{"deadline and unavailable", fmt.Errorf("%w: %w", backend.ErrUnavailable, context.DeadlineExceeded), "timeout"},
		{"net timeout", fmt.Errorf("%w: read: %w", backend.ErrUnavailable, netTimeout{}), "timeout"},
		{"canceled", fmt.Errorf("redis: %w", context.Canceled), "canceled"},
		{"circuit open", fmt.Errorf("redis node 10.0.0.1:6379: %w", backend.ErrCircuitOpen), "circuit_open"},
		{"circuit open, two wrappers", fmt.Errorf("%w: redis: %w", backend.ErrUnavailable, backend.ErrCircuitOpen), "circuit_open"},
		{"message alone is not enough", fmt.Errorf("%w: circuit open", backend.ErrUnavailable), "unavailable"},
		{"unavailable", stacktest.ErrRedisDown, "unavailable"},
		{"other", errors.New("redis: script returned garbage"), "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := testenv.NewClock(t0)
			m, reg := newRegistered(t, Options{Now: clock.Now})
			inner := &scripted{errs: []error{tt.err, nil, nil}, clock: clock, took: 3 * time.Millisecond}
			b := m.InstrumentBackend(inner)
			res := b.Decide(context.Background(), make([]backend.Check, 5)) // errors at 0 and 3
			if len(res) != 5 || !errors.Is(res[0].Err, tt.err) || res[1].Err != nil {
				t.Fatalf("results not passed through: %+v", res)
			}
			b.Decide(context.Background(), make([]backend.Check, 1))
			if err := b.Ping(context.Background()); err != stacktest.ErrRedisDown || !inner.pinged {
				t.Fatalf("Ping: %v", err)
			}
			if err := b.Close(); err != nil || !inner.closed {
				t.Fatalf("Close: %v", err)
			}
			if u, ok := b.(interface{ Unwrap() backend.Backend }); !ok || u.Unwrap() != inner {
				t.Fatalf("Unwrap does not return the wrapped backend")
			}
			f := scrape(t, reg)
			wants := []want{
				{"sluice_backend_errors_total", "kind=" + tt.kind, 3},
				{"sluice_backend_checks_total", "", 6},
				{"sluice_backend_decide_duration_seconds", "", 2},
			}
			for k := range numErrKinds {
				if k.String() != tt.kind {
					wants = append(wants, want{"sluice_backend_errors_total", "kind=" + k.String(), 0})
				}
			}
			f.check(t, wants)
			h := f["sluice_backend_decide_duration_seconds"].Metric[0].Histogram
			if got := h.GetSampleSum(); got < 0.0059 || got > 0.0061 {
				t.Errorf("duration sum %v s, want 0.006 (two calls of 3 ms on the fake clock)", got)
			}
		})
	}
}

func TestConfigMetrics(t *testing.T) {
	clock := testenv.NewClock(t0)
	m, reg := newRegistered(t, Options{Now: clock.Now})
	m.ConfigLoaded(3)
	clock.Advance(90 * time.Second)
	m.ConfigLoadFailed()
	m.ConfigLoadFailed()
	clock.Advance(90 * time.Second)
	m.ConfigLoaded(2)
	scrape(t, reg).check(t, []want{
		{"sluice_config_reloads_total", "result=success", 2},
		{"sluice_config_reloads_total", "result=failure", 2},
		{"sluice_config_domains", "", 2},
		{"sluice_config_last_reload_success_timestamp_seconds", "", float64(t0.Unix() + 180)},
	})
}

func TestDenyCache(t *testing.T) {
	m, reg := newRegistered(t, Options{})
	var hits uint64 = 7
	if err := m.RegisterDenyCache(func() (uint64, uint64, uint64) { return hits, 11, 2 }); err != nil {
		t.Fatal(err)
	}
	scrape(t, reg).check(t, []want{
		{"sluice_denycache_hits_total", "", 7},
		{"sluice_denycache_misses_total", "", 11},
		{"sluice_denycache_evictions_total", "", 2},
	})
	hits = 9 // read at every scrape
	scrape(t, reg).check(t, []want{{"sluice_denycache_hits_total", "", 9}})
	if err := m.RegisterDenyCache(func() (uint64, uint64, uint64) { return 0, 0, 0 }); err == nil {
		t.Fatal("a second denial cache was registered")
	}
}

func TestServerLoad(t *testing.T) {
	m, reg := newRegistered(t, Options{})
	var shed uint64 = 3
	if err := m.RegisterServerLoad(func() ServerCounts {
		return ServerCounts{InFlight: 12, Shed: shed, ShedConnection: 7, RequestTimeouts: 8, ResetConnsClosed: 2, Conns: 5, ConnsRefused: 1}
	}); err != nil {
		t.Fatal(err)
	}
	scrape(t, reg).check(t, []want{
		{"sluice_calls_in_flight", "", 12},
		{"sluice_calls_shed_total", "", 3},
		{"sluice_calls_shed_connection_share_total", "", 7},
		{"sluice_grpc_request_timeouts_total", "", 8},
		{"sluice_grpc_connections_reset_closed_total", "", 2},
		{"sluice_grpc_connections", "", 5},
		{"sluice_grpc_connections_refused_total", "", 1},
	})
	shed = 4 // read at every scrape
	scrape(t, reg).check(t, []want{{"sluice_calls_shed_total", "", 4}})
	if err := m.RegisterServerLoad(func() ServerCounts { return ServerCounts{} }); err == nil {
		t.Fatal("a second server was registered")
	}
}

func TestObserveBatch(t *testing.T) {
	m, reg := newRegistered(t, Options{})
	for _, n := range []int{1, 3, 3, 100, 0, -2} {
		m.ObserveBatch(n)
	}
	f := scrape(t, reg)
	f.check(t, []want{{"sluice_redis_pipeline_batch_size", "", 4}})
	h := f["sluice_redis_pipeline_batch_size"].Metric[0].Histogram
	if h.GetSampleSum() != 107 {
		t.Errorf("sum %v, want 107", h.GetSampleSum())
	}
	for _, b := range h.Bucket {
		if b.GetUpperBound() == 4 && b.GetCumulativeCount() != 3 {
			t.Errorf("bucket le=4 holds %d, want 3", b.GetCumulativeCount())
		}
	}
}

// A backend that decides a request's checks together keeps that ability
// through the instrumentation, and its together calls are recorded like
// Decide calls; a backend without it does not gain it.
func TestInstrumentBackendTogether(t *testing.T) {
	clock := testenv.NewClock(t0)
	m, reg := newRegistered(t, Options{Now: clock.Now})
	inner := &stacktest.Together{Backend: &scripted{errs: []error{nil, stacktest.ErrRedisDown}, clock: clock, took: time.Millisecond}}
	td, ok := m.InstrumentBackend(inner).(backend.TogetherDecider)
	if !ok {
		t.Fatal("the instrumented backend lost DecideTogether")
	}
	if res, ok := td.DecideTogether(context.Background(), make([]backend.Check, 2)); !ok || len(res) != 2 || inner.Calls != 1 {
		t.Fatalf("DecideTogether not passed through: ok=%v, %d results, %d calls", ok, len(res), inner.Calls)
	}
	inner.Decline = true // a declined call decided nothing: not recorded
	if res, ok := td.DecideTogether(context.Background(), make([]backend.Check, 3)); ok || res != nil || inner.Calls != 2 {
		t.Fatalf("declined DecideTogether: ok=%v, %d results, %d calls", ok, len(res), inner.Calls)
	}
	scrape(t, reg).check(t, []want{
		{"sluice_backend_checks_total", "", 2},
		{"sluice_backend_errors_total", "kind=unavailable", 1},
		{"sluice_backend_decide_duration_seconds", "", 1},
	})
	if _, ok := m.InstrumentBackend(&scripted{clock: clock}).(backend.TogetherDecider); ok {
		t.Error("a backend without DecideTogether gained one")
	}
}

func TestAnnouncements(t *testing.T) {
	m, reg := newRegistered(t, Options{})
	if err := m.RegisterAnnouncements(func() (uint64, uint64, uint64, uint64) { return 5, 1, 2, 7 }); err != nil {
		t.Fatal(err)
	}
	scrape(t, reg).check(t, []want{
		{"sluice_denycache_announcements_total", "result=published", 5},
		{"sluice_denycache_announcements_total", "result=failed", 1},
		{"sluice_denycache_announcements_total", "result=dropped", 2},
		{"sluice_denycache_announcements_total", "result=received", 7},
	})
	if err := m.RegisterAnnouncements(func() (uint64, uint64, uint64, uint64) { return 0, 0, 0, 0 }); err == nil {
		t.Fatal("announcements were registered twice")
	}
}
