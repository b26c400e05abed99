package rlqs

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// TestMeasureRLQS prints the figures of docs/benchmarks.md's "Rate Limit
// Quota Service" section. It runs only with SLUICE_MEASURE_RLQS=1:
//
//	SLUICE_MEASURE_RLQS=1 go test -run TestMeasureRLQS -v ./internal/rlqs
//
// Every run is on a simulated clock (deterministic: the same figures each
// time) but the Redis command time and the ShouldRateLimit latency, which
// are measured on the real redis-server and the real gRPC path.
func TestMeasureRLQS(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE_RLQS") != "1" {
		t.Skip("set SLUICE_MEASURE_RLQS=1 to measure")
	}
	srv := redistest.Standalone(t)
	cfg := parseConfig(t, simConfig)
	config := func() *descriptor.Config { return cfg }
	bucket := map[string]string{"api": "orders"}
	const dur = 10 * time.Minute
	rates := func(n int, kind string) []func(time.Duration) float64 {
		var rs []func(time.Duration) float64
		for i := range n {
			switch kind {
			case "steady":
				rs = append(rs, steady(3.0/float64(n)*2)) // 2x the limit in total
			case "skewed":
				if i == 0 {
					rs = append(rs, steady(5))
				} else {
					rs = append(rs, steady(0.3))
				}
			case "shifting":
				rs = append(rs, shifting(6.0/float64(n)*2, 0.05, 20*time.Second, i%2))
			}
		}
		return rs
	}
	var out strings.Builder
	fmt.Fprintln(&out, "| Envoys | demand | offered | admitted | most in one minute | ε measured | Jain fairness (equal demand) |")
	fmt.Fprintln(&out, "|---|---|---|---|---|---|---|")
	run := 0
	for _, n := range []int{1, 3, 10} {
		for _, kind := range []string{"steady", "skewed", "shifting"} {
			if n == 1 && kind != "steady" {
				continue
			}
			run++
			clock := testenv.NewClock(simStart)
			prefix := "m" + strconv.Itoa(run) + ":"
			a := startInstance(t, newRedisStore(t, redis.Options{URL: srv.Addr(), KeyPrefix: prefix}), config, clock.Now, Options{})
			b := startInstance(t, newRedisStore(t, redis.Options{URL: srv.Addr(), KeyPrefix: prefix}), config, clock.Now, Options{})
			r := simulate(clock, newEnvoys(clock, []*instance{a, b}, rates(n, kind)), bucket, dur, 50*time.Millisecond, nil)
			offered, admitted := 0, 0
			var equal []float64
			for i, e := range r.envoys {
				offered += e.offered
				admitted += e.admitted
				if kind == "steady" || (kind == "skewed" && i > 0) {
					equal = append(equal, float64(e.admitted))
				}
			}
			m := r.maxWindow()
			fmt.Fprintf(&out, "| %d | %s | %d | %d | %d | %+.1f%% | %s |\n", n, kind, offered, admitted, m, 100*(float64(m)/60-1), jain(equal))
			for _, e := range r.envoys {
				e.e.Close()
			}
		}
	}
	t.Log("\n" + out.String())
	t.Log("\n" + measureConvergence(t, srv.Addr(), config))
	t.Log("\n" + measureFaults(t, srv, config))
	var cmp strings.Builder
	fmt.Fprintln(&cmp, "| protocol | offered (3 Envoys) | admitted | calls to sluice | time a request waits for sluice | Redis command time | per admitted request | per offered request |")
	fmt.Fprintln(&cmp, "|---|---|---|---|---|---|---|---|")
	for i, rps := range []float64{2, 50} {
		cmp.WriteString(measureAgainstShouldRateLimit(t, srv, cfg, rps, strconv.Itoa(i)))
	}
	t.Log("\n" + cmp.String())
}

// jain is Jain's fairness index of xs (1 = all equal), or "—".
func jain(xs []float64) string {
	if len(xs) < 2 {
		return "—"
	}
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return "—"
	}
	return fmt.Sprintf("%.3f", s*s/(float64(len(xs))*s2))
}

// shareOf is the tokens_per_fill of e's assignment for bucket, 0 when it
// has none or a blanket rule.
func shareOf(e *simEnvoy, bucket map[string]string) uint32 {
	return e.e.Assignment(bucket).GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue()
}

// measureConvergence: two Envoys at 3/s each hold 30 of 60; then one drops
// to 0.3/s: how long until the other's share is within 10% of its new fair
// target (60 - 18 = 42), and back after the demand returns.
func measureConvergence(t *testing.T, addr string, config func() *descriptor.Config) string {
	clock := testenv.NewClock(simStart)
	a := startInstance(t, newRedisStore(t, redis.Options{URL: addr, KeyPrefix: "conv:"}), config, clock.Now, Options{})
	b := startInstance(t, newRedisStore(t, redis.Options{URL: addr, KeyPrefix: "conv:"}), config, clock.Now, Options{})
	bucket := map[string]string{"api": "orders"}
	move := 60 * time.Second
	back := 120 * time.Second
	envoys := newEnvoys(clock, []*instance{a, b}, []func(time.Duration) float64{
		steady(3),
		func(d time.Duration) float64 {
			if d >= move && d < back {
				return 0.3
			}
			return 3
		},
	})
	var down, up time.Duration = -1, -1
	simulate(clock, envoys, bucket, 3*time.Minute, 50*time.Millisecond, func(d time.Duration) {
		s := float64(shareOf(envoys[0], bucket))
		if d > move && d < back && down < 0 && math.Abs(s-42) <= 4.2 {
			down = d - move
		}
		if d > back && up < 0 && math.Abs(s-30) <= 3 {
			up = d - back
		}
	})
	return fmt.Sprintf("Convergence (2 Envoys, 60 per minute, reports every 1 s, demand window 5 s): after one Envoy's demand fell from 3/s to 0.3/s, the other's share was within 10%% of its new target (42) after %v; after the demand came back, within 10%% of 30 after %v.", down, up)
}

// measureFaults: 3 Envoys at 2/s on two instances; sluice instance a stops
// at 2 minutes (its Envoys move to b at their next report), redis-server
// is killed at 5:20 and restarted 5 s later (less than the assignment
// TTL), one Envoy vanishes at 7 minutes.
func measureFaults(t *testing.T, srv *redistest.Server, config func() *descriptor.Config) string {
	clock := testenv.NewClock(simStart)
	a := startInstance(t, newRedisStore(t, redis.Options{URL: srv.Addr(), KeyPrefix: "fault:"}), config, clock.Now, Options{})
	b := startInstance(t, newRedisStore(t, redis.Options{URL: srv.Addr(), KeyPrefix: "fault:"}), config, clock.Now, Options{})
	envoys := newEnvoys(clock, []*instance{a, b}, []func(time.Duration) float64{steady(2), steady(2), steady(2)})
	var events []string
	run := simulate(clock, envoys, map[string]string{"api": "orders"}, 10*time.Minute, 50*time.Millisecond, func(d time.Duration) {
		switch d {
		case 2 * time.Minute:
			a.stop()
			for i, e := range envoys {
				if i%2 == 0 { // the Envoys of a
					e.e.SetConn(b.conn)
				}
			}
			events = append(events, "2:00 sluice instance a stopped, its Envoys reconnect to b")
		case 5*time.Minute + 20*time.Second:
			srv.Kill()
		case 5*time.Minute + 25*time.Second:
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			events = append(events, "5:20 redis-server killed, restarted at 5:25 (its state lost)")
		case 7 * time.Minute:
			envoys[2].e.Close()
			envoys[2].rate = steady(0)
			events = append(events, "7:00 one Envoy vanished (stream cut, no more reports)")
		}
	})
	lost := 0
	for _, e := range envoys {
		lost += e.e.Lost
	}
	return fmt.Sprintf("Faults (3 Envoys at 2/s, 60 per minute): %s. Admitted per minute: %v; %d reports lost or unanswered.\n%s",
		strings.Join(events, "; "), run.perWindow[:len(run.perWindow)-1], lost, describeRun(run))
}

// commandTime sums INFO commandstats' usec: the time redis-server spent
// running commands.
func commandTime(t *testing.T, c *goredis.Client) time.Duration {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var us int64
	for _, line := range strings.Split(info, "\n") {
		if _, rest, ok := strings.Cut(line, "usec="); ok {
			v, _, _ := strings.Cut(rest, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			us += n
		}
	}
	return time.Duration(us) * time.Microsecond
}

// measureAgainstShouldRateLimit runs the same offered load (3 Envoys at
// rps each for 5 simulated minutes on the 60 per minute rule) over RLQS and over
// ShouldRateLimit (one call per request, the same Redis), and compares the
// time each request waits for sluice and the Redis command time per
// admitted request.
func measureAgainstShouldRateLimit(t *testing.T, srv *redistest.Server, cfg *descriptor.Config, rps float64, run string) string {
	c := srv.Client()
	defer c.Close()
	bucket := map[string]string{"api": "orders"}
	const dur = 5 * time.Minute

	c.ConfigResetStat(context.Background())
	clock := testenv.NewClock(simStart)
	in := startInstance(t, newRedisStore(t, redis.Options{URL: srv.Addr(), KeyPrefix: "cmp" + run + ":"}), func() *descriptor.Config { return cfg }, clock.Now, Options{})
	envoys := newEnvoys(clock, []*instance{in}, []func(time.Duration) float64{steady(rps), steady(rps), steady(rps)})
	begin := time.Now()
	r := simulate(clock, envoys, bucket, dur, 50*time.Millisecond, nil)
	rlqsWall := time.Since(begin)
	rlqsRedis := commandTime(t, c)
	rlqsAdmitted, rlqsOffered, reports := 0, 0, 0
	for _, e := range r.envoys {
		rlqsAdmitted += e.admitted
		rlqsOffered += e.offered
		reports += e.e.Reports
	}

	c.ConfigResetStat(context.Background())
	clock = testenv.NewClock(simStart)
	log := logrus.New()
	log.SetOutput(io.Discard)
	rb, err := redis.New(context.Background(), redis.Options{URL: srv.Addr(), KeyPrefix: "cmp-rls" + run + ":", FakeRedisClock: clock.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	svc := service.New(service.Options{Backend: rb, Logger: log})
	svc.SetConfig(cfg)
	req := &rlsv3.RateLimitRequest{Domain: "rlqs", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "api", Value: "orders"}}}}}
	var lat []time.Duration
	admitted, offered := 0, 0
	acc := 0.0
	for d := time.Duration(0); d < dur; d += 50 * time.Millisecond {
		acc += 3 * rps * 0.05
		for acc >= 1 {
			acc--
			offered++
			t0 := time.Now()
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			lat = append(lat, time.Since(t0))
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				admitted++
			}
		}
		clock.Advance(50 * time.Millisecond)
	}
	rlsRedis := commandTime(t, c)
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	var b strings.Builder
	fmt.Fprintf(&b, "| RLQS | %d (%v/s each) | %d | %d reports | 0 (decided in Envoy) | %v | %v | %v |\n", rlqsOffered, rps, rlqsAdmitted, reports,
		rlqsRedis, rlqsRedis/time.Duration(max(rlqsAdmitted, 1)), rlqsRedis/time.Duration(max(rlqsOffered, 1)))
	fmt.Fprintf(&b, "| ShouldRateLimit | %d (%v/s each) | %d | %d calls | p50 %v, p99 %v (in process, loopback Redis) | %v | %v | %v |\n", offered, rps, admitted, offered,
		p50.Round(time.Microsecond), p99.Round(time.Microsecond), rlsRedis, rlsRedis/time.Duration(max(admitted, 1)), rlsRedis/time.Duration(max(offered, 1)))
	t.Logf("RLQS run at %v/s: %v of wall time for %v simulated", rps, rlqsWall.Round(time.Millisecond), dur)
	return b.String()
}
