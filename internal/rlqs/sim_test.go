package rlqs

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/internal/testkit/envoyquota"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// simConfig is the config of the simulations: one rule of 60 per minute
// (a fixed window), one of 10 per second with a burst of 20 (a token
// bucket), and a node with both.
const simConfig = `
domain: rlqs
descriptors:
  - key: api
    value: orders
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: api
    value: search
    rate_limits:
      - {algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 20}
  - key: api
    value: both
    rate_limits:
      - {unit: minute, requests_per_unit: 60}
      - {algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 20}
  - key: api
    value: free
    rate_limit: {unlimited: true}
`

// simStart is the simulations' first instant: a minute boundary.
var simStart = time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)

// parseConfig compiles a config text.
func parseConfig(t testing.TB, text string) *descriptor.Config {
	t.Helper()
	doms, err := descriptor.Parse("rlqs.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptor.NewConfig(doms...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// instance is one sluice RLQS service on a loopback gRPC server, and a
// client connection to it.
type instance struct {
	svc  *Service
	srv  *grpc.Server
	conn *grpc.ClientConn
	addr string
}

// startInstance serves a Service on store at clock's instants.
func startInstance(t testing.TB, store backend.QuotaStore, cfg func() *descriptor.Config, now func() time.Time, o Options) *instance {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	o.Store, o.Config, o.Now, o.Logger = store, cfg, now, log
	svc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc.Register(srv)
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{svc: svc, srv: srv, conn: conn, addr: ln.Addr().String()}
	t.Cleanup(in.stop)
	return in
}

// stop ends the instance's server and connection.
func (in *instance) stop() {
	in.srv.Stop()
	_ = in.conn.Close()
}

// simEnvoy is one simulated Envoy and the demand it serves.
type simEnvoy struct {
	e *envoyquota.Envoy
	// rate returns the requests per second offered at elapsed time d.
	rate func(d time.Duration) float64
	acc  float64
	// offered and admitted count the requests of the limited bucket.
	offered, admitted int
}

// simRun is the outcome of one simulation.
type simRun struct {
	// perWindow is what all Envoys admitted in each minute window of the
	// limited bucket.
	perWindow []int
	// unmatchedDenied counts denials of the unmatched bucket.
	unmatchedDenied int
	envoys          []*simEnvoy
}

// simulate drives envoys for dur at step dt: each offers its rate of
// requests to bucket, and one request per second to an unmatched bucket.
func simulate(clock *testenv.Clock, envoys []*simEnvoy, bucket map[string]string, dur, dt time.Duration, during func(d time.Duration)) simRun {
	run := simRun{perWindow: make([]int, int(dur/time.Minute)+1), envoys: envoys}
	unmatched := map[string]string{"api": "unknown"}
	start := clock.Now()
	for d := time.Duration(0); d < dur; d += dt {
		if during != nil {
			during(d)
		}
		for _, s := range envoys {
			s.acc += s.rate(d) * dt.Seconds()
			for s.acc >= 1 {
				s.acc--
				s.offered++
				if s.e.Request(bucket) {
					s.admitted++
					run.perWindow[int((clock.Now().Sub(start))/time.Minute)]++
				}
			}
			if d%time.Second == 0 && !s.e.Request(unmatched) {
				run.unmatchedDenied++
			}
			s.e.Tick()
		}
		clock.Advance(dt)
	}
	return run
}

// maxWindow is the most admitted in one window, skipping the last
// (partial) one.
func (r simRun) maxWindow() int {
	m := 0
	for _, n := range r.perWindow[:len(r.perWindow)-1] {
		m = max(m, n)
	}
	return m
}

// newEnvoys builds n simulated Envoys reporting every second, the i-th to
// conns[i%len(conns)].
func newEnvoys(clock *testenv.Clock, conns []*instance, rates []func(time.Duration) float64) []*simEnvoy {
	out := make([]*simEnvoy, len(rates))
	for i, r := range rates {
		e := envoyquota.New(envoyquota.Config{Domain: "rlqs", ReportingInterval: time.Second}, conns[i%len(conns)].conn, clock.Now)
		out[i] = &simEnvoy{e: e, rate: r}
	}
	return out
}

// steady is a constant demand.
func steady(rps float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return rps }
}

// shifting offers hi then lo, swapping every period.
func shifting(hi, lo float64, period time.Duration, phase int) func(time.Duration) float64 {
	return func(d time.Duration) float64 {
		if (int(d/period)+phase)%2 == 0 {
			return hi
		}
		return lo
	}
}

func describeRun(r simRun) string {
	s := fmt.Sprintf("per window %v;", r.perWindow)
	for i, e := range r.envoys {
		s += fmt.Sprintf(" envoy %d offered %d admitted %d;", i, e.offered, e.admitted)
	}
	return s
}

var _ = context.Background
