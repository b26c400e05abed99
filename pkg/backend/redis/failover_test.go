package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// TestCheckWait: the strict mode's settings.
func TestCheckWait(t *testing.T) {
	tests := []struct {
		replicas      int
		wait, timeout time.Duration
		wantErr       string
	}{
		{0, 0, time.Second, ""},
		{1, 50 * time.Millisecond, time.Second, ""},
		{0, 2 * time.Second, time.Second, ""}, // ignored without replicas
		{-1, 0, time.Second, "negative"},
		{1, -time.Millisecond, time.Second, "negative"},
		{1, time.Second, time.Second, "below the redis timeout"},
	}
	for _, tt := range tests {
		err := CheckWait(tt.replicas, tt.wait, tt.timeout)
		if (tt.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("CheckWait(%d, %v, %v) = %v, want %q", tt.replicas, tt.wait, tt.timeout, err, tt.wantErr)
		}
	}
}

// failoverStall is how many bytes of replication stream the master must
// hold unacknowledged before it is killed: more than the loopback socket
// buffers between it and the paused replica can hold (net.ipv4.tcp_rmem's
// and tcp_wmem's maxima: 32 MB and 4 MB here), so that some of what the
// master admitted never reaches the replica.
const failoverStall = 48 << 20

// TestFailoverBound kills a Sentinel-managed master while its replica is
// paused (SIGSTOP) and writes go on, then lets the sentinel promote the
// replica. Without the strict mode the promoted replica's counts lack
// exactly what it had not received: some admissions are forgotten, never
// more than were admitted during the stall (the documented bound), and
// the lag was visible in Replicas. With the strict mode (WAIT for 1
// replica) every decision during the stall fails, and the promoted
// replica holds every admission that was answered. With min-replicas-to-write
// 1 and min-replicas-max-lag 1 on the master, the master refuses the
// decisions (NOREPLICAS) once the replica has been silent for about a
// second, and what is forgotten stays within what was admitted before.
func TestFailoverBound(t *testing.T) {
	for _, mode := range []struct {
		name   string
		strict bool
		args   []string // the master's and the replica's options
	}{
		{"asynchronous", false, nil},
		{"strict", true, nil},
		{"min-replicas", false, []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"}},
	} {
		strict, minReplicas := mode.strict, mode.args != nil
		t.Run(mode.name, func(t *testing.T) {
			s := redistest.Sentinel(t, mode.args...)
			now := time.Now()
			opts := Options{
				Type:           TypeSentinel,
				URL:            s.MasterName() + "," + strings.Join(s.SentinelAddrs(), ","),
				Timeout:        5 * time.Second,
				FakeRedisClock: func() time.Time { return now },
				Breaker:        BreakerOptions{Failures: -1},
			}
			// What the test reads the counts with after the failover: the
			// strict backend fails every decision once the promoted
			// replica is a master without replicas.
			plain := newBackend(t, opts)
			b := plain
			if strict {
				// A generous WAIT: a healthy replica on a loaded machine
				// must not fail the decisions before the stall.
				opts.WaitReplicas, opts.WaitTimeout = 1, time.Second
				b = newBackend(t, opts)
			}
			ctx := context.Background()

			// 100 descriptors of long names: each admission replicates
			// about 10 KB, so the stall grows fast.
			const limitN = 1 << 40
			rules := []limit.Rule{{Unit: limit.Day, Limit: limitN}}
			checks := make([]backend.Check, 100)
			for i := range checks {
				checks[i] = backend.Check{Identity: fmt.Sprintf("failover|%d|%s", i, strings.Repeat("x", 4000)), Rules: rules, Cost: limit.Cost{N: 1}}
			}
			var lastErr error
			round := func() (admitted, failed int) {
				for _, r := range b.Decide(ctx, checks) {
					switch {
					case r.Err != nil:
						failed++
						lastErr = r.Err
					case r.Allowed:
						admitted++
					}
				}
				return admitted, failed
			}
			behind := func() int64 {
				rs, err := b.Replicas(ctx)
				if err != nil || len(rs) != 1 {
					t.Fatalf("Replicas: %+v, %v; want the one replica", rs, err)
				}
				return rs[0].Behind
			}

			// The master takes writes only once it has counted its replica
			// as good (min-replicas-*: Valkey can lag a moment behind the
			// replica's first acknowledgement). The probe takes, on a
			// descriptor of its own: a peek writes nothing, and was seen
			// answered on Valkey while the takes after it got NOREPLICAS.
			probe := backend.Check{Identity: "failover|probe", Rules: rules, Cost: limit.Cost{N: 1}}
			waitUntil(t, 30*time.Second, "the master taking writes", func() bool { return b.Decide(ctx, []backend.Check{probe})[0].Err == nil })
			before := 0
			for range 5 {
				a, f := round()
				if f > 0 {
					t.Fatalf("%d calls failed before the stall, the last with: %v", f, lastErr)
				}
				before += a
			}
			waitUntil(t, 30*time.Second, "the replica acknowledged everything", func() bool { return behind() == 0 })

			s.PauseReplica()
			during, failedDuring, rounds := 0, 0, 0
			// Strict: a few rounds, each failing after WaitTimeout.
			// Min-replicas: until the master refuses (NOREPLICAS), once
			// the replica's last acknowledgement is older than 1 s.
			// Otherwise: until the stall outgrows the socket buffers.
			more := func() bool {
				switch {
				case strict:
					return rounds < 3
				case minReplicas:
					return failedDuring == 0
				}
				return behind() < failoverStall
			}
			for more() {
				if rounds++; rounds > 2000 {
					t.Fatalf("the replica is only %d bytes behind after %d rounds (%d calls failed)", behind(), rounds, failedDuring)
				}
				a, f := round()
				during, failedDuring = during+a, failedDuring+f
			}
			lagBytes := behind()
			s.KillMaster()
			s.ResumeReplica()

			// The sentinel promotes the replica; the backend follows.
			peek := make([]backend.Check, len(checks))
			for i, c := range checks {
				c.Cost = limit.Cost{}
				peek[i] = c
			}
			var counts []backend.Result
			waitUntil(t, time.Minute, "decisions on the promoted replica", func() bool {
				counts = plain.Decide(ctx, peek)
				for _, r := range counts {
					if r.Err != nil {
						return false
					}
				}
				return true
			})
			promoted := 0
			for _, r := range counts {
				promoted += int(limitN - r.Outcomes[0].Remaining)
			}
			answered := before + during
			lost := answered - promoted
			t.Logf("admitted %d before the stall, %d during it (%d calls failed, %d rounds), the replica %d bytes behind at the kill; the promoted replica counts %d: answered minus counted %d",
				before, during, failedDuring, rounds, lagBytes, promoted, lost)
			if promoted < before {
				t.Errorf("the promoted replica counts %d, fewer than the %d admitted before the stall, which it had acknowledged", promoted, before)
			}
			if strict {
				if during != 0 {
					t.Errorf("strict: %d admissions answered while no replica acknowledged them", during)
				}
				if lost > 0 {
					t.Errorf("strict: %d answered admissions forgotten by the failover", lost)
				}
				return
			}
			if lost > during {
				t.Errorf("%d admissions forgotten, more than the %d admitted while the replica was stalled", lost, during)
			}
			if minReplicas {
				if !errors.Is(lastErr, backend.ErrUnavailable) || !strings.Contains(lastErr.Error(), "NOREPLICAS") {
					t.Errorf("min-replicas: the calls failed with %v, want ErrUnavailable with NOREPLICAS", lastErr)
				}
				return
			}
			if failedDuring > 0 {
				t.Errorf("%d calls failed during the stall; without the strict mode none should", failedDuring)
			}
			if lost > during {
				t.Errorf("%d admissions forgotten, more than the %d admitted while the replica was stalled", lost, during)
			}
			if lost <= 0 {
				t.Errorf("no admission forgotten: the stall (%d bytes behind) did not outgrow the socket buffers, so the test shows nothing", lagBytes)
			}
		})
	}
}

// TestStrictModeFailsUnacknowledged: with the strict mode, a decision
// Redis answered fails when no replica acknowledges it in time (a
// standalone Redis has none), with ErrUnavailable naming the setting, and
// Redis counted it all the same.
func TestStrictModeFailsUnacknowledged(t *testing.T) {
	srv := redistest.Standalone(t)
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "strict:", WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond})
	r := decideOne(b, "strict|one")
	if !errors.Is(r.Err, backend.ErrUnavailable) || !strings.Contains(r.Err.Error(), "SLUICE_REDIS_WAIT_REPLICAS") {
		t.Fatalf("a decision no replica acknowledged: %v, want ErrUnavailable naming SLUICE_REDIS_WAIT_REPLICAS", r.Err)
	}
	// Redis counted it all the same.
	b0 := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "strict:"})
	if r := decideOne(b0, "strict|one"); r.Err != nil || r.Outcomes[0].Remaining != oneRule[0].Limit-2 {
		t.Fatalf("the next decision without the strict mode: %+v, want the first one counted", r)
	}
}

// TestStrictModeCluster: on a cluster every master has one replica, so
// WAIT for 1 is acknowledged on every master (the WAIT goes to the node
// of the calls it follows) and WAIT for 2 never is.
func TestStrictModeCluster(t *testing.T) {
	c := cluster.Get(t)
	ids := idsPerMaster(t, c, "strictcl")
	for _, tt := range []struct {
		replicas int
		wantErr  bool
	}{{1, false}, {2, true}} {
		t.Run(fmt.Sprint(tt.replicas), func(t *testing.T) {
			opts := clusterOptions(c)
			opts.KeyPrefix = fmt.Sprintf("strictcl%d:", tt.replicas)
			opts.WaitReplicas, opts.WaitTimeout = tt.replicas, 500*time.Millisecond
			opts.Timeout = 5 * time.Second
			b := newBackend(t, opts)
			var checks []backend.Check
			for _, id := range ids {
				checks = append(checks, backend.Check{Identity: id, Rules: oneRule, Cost: limit.Cost{N: 1}})
			}
			for i, r := range b.Decide(context.Background(), checks) {
				if tt.wantErr != (r.Err != nil) || tt.wantErr && !errors.Is(r.Err, backend.ErrUnavailable) {
					t.Errorf("check %d on %d replicas: %v, want an error: %v", i, tt.replicas, r.Err, tt.wantErr)
				}
			}
		})
	}
}

// TestMeasureStrictMode measures what the strict mode costs, only with
// SLUICE_MEASURE=1:
//
//	SLUICE_MEASURE=1 go test -run TestMeasureStrictMode -v ./pkg/backend/redis/
//
// A master with one replica (the Sentinel set's, the backend pointed at
// the master itself), 32 goroutines each deciding one fixed-window check
// on 1,000 descriptors for 3 s per round, rounds alternated between the
// plain backend and the strict one (WAIT for 1 replica, 50 ms), 5 of
// each: the median of each side's decisions per second and of the
// master's and the replica's CPU (INFO cpu, user+sys) per decision, and
// each round's figures with its failed decisions (strict: not
// acknowledged within the 50 ms).
func TestMeasureStrictMode(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("a measurement: SLUICE_MEASURE=1")
	}
	s := redistest.Sentinel(t)
	master := goredis.NewClient(&goredis.Options{Addr: s.MasterAddr()})
	replica := goredis.NewClient(&goredis.Options{Addr: s.ReplicaAddr()})
	defer master.Close()
	defer replica.Close()
	plain := newBackend(t, Options{URL: s.MasterAddr(), KeyPrefix: "measure:"})
	strict := newBackend(t, Options{URL: s.MasterAddr(), KeyPrefix: "measure:", WaitReplicas: 1})
	rules := []limit.Rule{{Unit: limit.Hour, Limit: 1 << 40}}
	const workers, ids, rounds, perRound = 32, 1000, 5, 3 * time.Second
	cpu := func(c *goredis.Client) float64 {
		info, err := c.Info(context.Background(), "cpu").Result()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				sum += f
			}
		}
		return sum
	}
	type result struct {
		rate, masterUS, replicaUS float64
		failed                    int64
	}
	run := func(b *Backend) result {
		var calls, failed atomic.Int64
		m0, r0 := cpu(master), cpu(replica)
		start := time.Now()
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; time.Since(start) < perRound; i += workers {
					c := backend.Check{Identity: fmt.Sprintf("measure|%d", i%ids), Rules: rules, Cost: limit.Cost{N: 1}}
					if r := b.Decide(context.Background(), []backend.Check{c})[0]; r.Err != nil {
						failed.Add(1)
					}
					calls.Add(1)
				}
			}()
		}
		wg.Wait()
		el := time.Since(start)
		n := float64(calls.Load())
		return result{n / el.Seconds(), (cpu(master) - m0) / n * 1e6, (cpu(replica) - r0) / n * 1e6, failed.Load()}
	}
	var res [2][]result
	for i := range 2 * rounds {
		side := i % 2
		b := plain
		if side == 1 {
			b = strict
		}
		res[side] = append(res[side], run(b))
	}
	median := func(rs []result, f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for side, name := range []string{"plain", "strict (WAIT 1 50ms)"} {
		var rounds []string
		for _, r := range res[side] {
			rounds = append(rounds, fmt.Sprintf("%.0f/s %.2f %.2f (%d failed)", r.rate, r.masterUS, r.replicaUS, r.failed))
		}
		t.Logf("%-22s decisions/s %8.0f   master CPU µs/decision %6.2f   replica CPU µs/decision %6.2f   rounds: %s",
			name, median(res[side], func(r result) float64 { return r.rate }),
			median(res[side], func(r result) float64 { return r.masterUS }),
			median(res[side], func(r result) float64 { return r.replicaUS }), strings.Join(rounds, "; "))
	}
}

// TestMinReplicasRefuses: a master with min-replicas-to-write and too few
// replicas refuses the decide script's first write (NOREPLICAS), and the
// decision fails as with Redis down (ErrUnavailable, so the domain's
// failure_mode answers), with EVALSHA and with FCALL.
func TestMinReplicasRefuses(t *testing.T) {
	srv := redistest.Standalone(t, "--min-replicas-to-write", "1", "--min-replicas-max-lag", "2")
	for _, functions := range []bool{false, true} {
		b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "minrep:", Functions: functions})
		r := decideOne(b, "minrep|one")
		if !errors.Is(r.Err, backend.ErrUnavailable) || !strings.Contains(r.Err.Error(), "NOREPLICAS") {
			t.Errorf("functions %v: %v, want ErrUnavailable with NOREPLICAS", functions, r.Err)
		}
	}
}
