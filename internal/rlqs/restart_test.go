package rlqs

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// TestRestartsMidStream: Envoys share the 60 per minute rule through two
// instances on one redis-server while one instance stops (its Envoys
// reconnect to the other), redis-server is killed and restarted within the
// assignment TTL (in the middle of a window: a denial until a window's end
// expires at that end, and Envoy then has no assignment until sluice
// answers), and an Envoy vanishes. Every minute stays within the
// bound but the one whose count Redis forgot; unmatched buckets are never
// denied; the Envoys keep their assignments through the Redis outage; the
// vanished Envoy's share goes to the others after the TTL.
func TestRestartsMidStream(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := parseConfig(t, simConfig)
	config := func() *descriptor.Config { return cfg }
	clock := testenv.NewClock(simStart)
	a := startInstance(t, newRedisStore(t, redis.Options{URL: srv.Addr(), KeyPrefix: "restart:"}), config, clock.Now, Options{})
	b := startInstance(t, newRedisStore(t, redis.Options{URL: srv.Addr(), KeyPrefix: "restart:"}), config, clock.Now, Options{})
	envoys := newEnvoys(clock, []*instance{a, b}, []func(time.Duration) float64{steady(2), steady(2), steady(2)})
	bucket := map[string]string{"api": "orders"}
	var during []string // assignments seen during the Redis outage
	run := simulate(clock, envoys, bucket, 8*time.Minute, 50*time.Millisecond, func(d time.Duration) {
		switch {
		case d == 2*time.Minute:
			a.stop()
			for i, e := range envoys {
				if i%2 == 0 {
					e.e.SetConn(b.conn)
				}
			}
		case d == 4*time.Minute+20*time.Second:
			srv.Kill()
		case d > 4*time.Minute+20*time.Second && d < 4*time.Minute+25*time.Second && d%time.Second == 0:
			for _, e := range envoys {
				s, _ := strategyOf(e.e, bucket)
				during = append(during, s)
			}
		case d == 4*time.Minute+25*time.Second:
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
		case d == 6*time.Minute:
			envoys[2].e.Close()
			envoys[2].rate = steady(0)
		}
	})
	t.Log(describeRun(run))
	if run.unmatchedDenied > 0 {
		t.Errorf("unmatched bucket denied %d times", run.unmatchedDenied)
	}
	for i, n := range run.perWindow[:len(run.perWindow)-1] {
		if i != 4 && float64(n) > 60*1.1 {
			t.Errorf("minute %d admitted %d, more than 60 x 1.1", i, n)
		}
	}
	for _, s := range during {
		if s == "none" {
			t.Errorf("an Envoy lost its assignment during a Redis outage shorter than the TTL: %v", during)
			break
		}
	}
	// The two Envoys left share the whole limit again.
	var sum uint64
	for _, v := range b.svc.Snapshot() {
		if v.Bucket == "api=orders" {
			sum += v.Rules[0].Share
		}
	}
	if sum < 58 || sum > 60 {
		t.Errorf("after the third Envoy vanished the others' shares sum to %d, want about 60", sum)
	}
}
