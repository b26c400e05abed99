package integration

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// faultTimeout is the REDIS_TIMEOUT of the fault tests, and faultMargin
// what a failing call may take beyond it (scheduling on a loaded CI
// machine, gRPC, the breaker's bookkeeping).
const (
	faultTimeout = 300 * time.Millisecond
	faultMargin  = 2 * time.Second
	// failoverTimeout is the REDIS_TIMEOUT of TestClusterFailover: far
	// above the stalls of a loaded CI machine (a healthy master's call
	// took over 300ms there, with no failover under way), far below the
	// failover itself.
	failoverTimeout = 2 * time.Second
)

// openConfig never denies (10^9 a year): fault tests count failures, not
// denials.
const openConfig = `domain: api
descriptors:
  - key: k
    rate_limit: {unit: year, requests_per_unit: 1000000000}
`

// faultEnv are the settings of the fault tests: a short Redis timeout and
// a fast health probe.
func faultEnv(envs ...map[string]string) map[string]string {
	return merge(append([]map[string]string{{
		"REDIS_TIMEOUT":          faultTimeout.String(),
		"SLUICE_HEALTH_INTERVAL": "50ms",
		// These tests watch health follow Redis (off by default, as in
		// the reference).
		"SLUICE_HEALTH_FOLLOWS_BACKEND": "true",
	}}, envs...)...)
}

// spread is a load request over 64 descriptors (so several cluster slots
// are used).
func spread(prefix string) func(w, i int) *rlsv3.RateLimitRequest {
	return func(w, i int) *rlsv3.RateLimitRequest {
		return sluicetest.Request("api", 0, entries("k", fmt.Sprintf("%s-%d", prefix, (w*31+i)%64)))
	}
}

// failedWithinTimeout checks the failed calls among os as checkErrors
// does, and that none failed later than REDIS_TIMEOUT (plus a margin for a
// loaded machine); it returns the longest.
func failedWithinTimeout(t *testing.T, os []outcome) time.Duration {
	t.Helper()
	return failedWithin(t, os, faultTimeout)
}

// failedWithin is failedWithinTimeout for a sluice whose REDIS_TIMEOUT is
// timeout.
func failedWithin(t *testing.T, os []outcome, timeout time.Duration) time.Duration {
	t.Helper()
	longest := checkErrors(t, os)
	if longest > timeout+faultMargin {
		t.Errorf("a call failed only after %v; REDIS_TIMEOUT is %v", longest, timeout)
	}
	return longest
}

// openUnderLoad starts sluice on openConfig with the fault settings and
// env (where Redis is), and four clients calling it over 64 descriptors
// named after tag; it returns once the load runs.
func openUnderLoad(t *testing.T, env map[string]string, tag string) (*sluicetest.Process, *load) {
	t.Helper()
	p := sluicetest.Start(t, sluicetest.Options{
		ConfigDir: configDir(t, map[string]string{"api.yaml": openConfig}),
		Env:       faultEnv(env),
	})
	l := startLoad(t, p, 4, spread(sluicetest.Unique(tag)))
	testenv.Until(t, 10*time.Second, "the load to run", func() bool { return l.ok.Load() >= 50 })
	return p, l
}

// waitResumed waits up to timeout until firstOK finds the first admitted
// call after a fault, and returns when that call ended.
func waitResumed(t *testing.T, timeout time.Duration, firstOK func() (time.Time, bool)) time.Time {
	t.Helper()
	var resumed time.Time
	testenv.Until(t, timeout, "decisions to resume", func() bool {
		var ok bool
		resumed, ok = firstOK()
		return ok
	})
	return resumed
}

// survived checks that the sluice process that was pid before the fault
// still runs: it neither exited nor was restarted.
func survived(t *testing.T, p *sluicetest.Process, pid int, fault string) {
	t.Helper()
	if !p.Running() || p.PID() != pid {
		t.Errorf("sluice did not survive %s", fault)
	}
}

// TestRedisKilledAndRestarted kills standalone Redis under load: calls fail
// with Unavailable within REDIS_TIMEOUT, health turns NOT_SERVING; Redis
// restarts on the same port and decisions resume with the same sluice
// process. The recovery time is logged.
func TestRedisKilledAndRestarted(t *testing.T) {
	rs := redistest.Standalone(t)
	p, l := openUnderLoad(t, standaloneEnv(rs), "kill")
	pid := p.PID()

	killed := time.Now()
	rs.Kill()
	testenv.Until(t, 10*time.Second, "calls to fail", func() bool { return count(l.since(killed), failed) >= 20 })
	unhealthy := waitHealth(t, p, healthpb.HealthCheckResponse_NOT_SERVING, 10*time.Second)

	restarted := time.Now()
	if err := rs.Restart(); err != nil {
		t.Fatalf("restart redis: %v", err)
	}
	resumed := waitResumed(t, 20*time.Second, func() (time.Time, bool) { return l.firstOKAfter(restarted) })
	healthy := waitHealth(t, p, healthpb.HealthCheckResponse_SERVING, 10*time.Second)
	l.stop()

	down := l.since(killed)
	longest := failedWithinTimeout(t, down)
	survived(t, p, pid, "the Redis restart")
	t.Logf("Redis killed: %d calls failed with Unavailable (the longest took %v, REDIS_TIMEOUT %v), health NOT_SERVING within %v; "+
		"Redis restarted: decisions resumed %v after the restart, health SERVING within %v",
		count(down, failed), longest.Round(time.Millisecond), faultTimeout, unhealthy.Round(time.Millisecond),
		resumed.Sub(restarted).Round(time.Millisecond), healthy.Round(time.Millisecond))
}

// TestRedisHung freezes Redis (SIGSTOP: connections open, nothing
// answered): calls fail with Unavailable within REDIS_TIMEOUT instead of
// hanging, and resume when Redis does.
func TestRedisHung(t *testing.T) {
	rs := redistest.Standalone(t)
	_, l := openUnderLoad(t, standaloneEnv(rs), "hung")

	paused := time.Now()
	rs.Pause()
	testenv.Until(t, 10*time.Second, "calls to fail", func() bool { return count(l.since(paused), failed) >= 20 })
	resumedAt := time.Now()
	rs.Resume()
	resumed := waitResumed(t, 20*time.Second, func() (time.Time, bool) { return l.firstOKAfter(resumedAt) })
	l.stop()

	// Calls in flight when Redis froze are cut at REDIS_TIMEOUT; later ones
	// fail fast once the breaker opens.
	hung := l.since(paused.Add(-callTimeout))
	longest := failedWithinTimeout(t, hung)
	if longest < faultTimeout/2 {
		t.Errorf("the longest failed call took %v: no call waited on the frozen Redis", longest)
	}
	t.Logf("Redis frozen: %d calls failed with Unavailable, the longest after %v (REDIS_TIMEOUT %v); decisions resumed %v after SIGCONT",
		count(hung, failed), longest.Round(time.Millisecond), faultTimeout, resumed.Sub(resumedAt).Round(time.Millisecond))
}

// TestScriptFlushUnderLoad empties Redis's script cache (SCRIPT FLUSH, on
// every master of the cluster) again and again under load: sluice reloads
// the script and retries, and no client ever sees an error.
func TestScriptFlushUnderLoad(t *testing.T) {
	type flusher struct {
		name  string
		env   func(t *testing.T) map[string]string
		flush func(ctx context.Context) error
	}
	var rs *redistest.Server
	var cs *redistest.ClusterSet
	for _, f := range []flusher{
		{"standalone", func(t *testing.T) map[string]string {
			rs = redistest.Standalone(t)
			return standaloneEnv(rs)
		}, func(ctx context.Context) error { return rs.Client().ScriptFlush(ctx).Err() }},
		{"cluster", func(t *testing.T) map[string]string {
			cs = cluster.Get(t)
			return clusterEnv(t, cs)
		}, func(ctx context.Context) error {
			for _, m := range cs.Masters() {
				if err := cs.NodeClient(m).ScriptFlush(ctx).Err(); err != nil {
					return fmt.Errorf("SCRIPT FLUSH on %s: %w", m, err)
				}
			}
			return nil
		}},
	} {
		t.Run(f.name, func(t *testing.T) {
			p := sluicetest.Start(t, sluicetest.Options{
				ConfigDir: configDir(t, map[string]string{"api.yaml": openConfig}),
				Env:       f.env(t),
			})
			l := startLoad(t, p, 4, spread(sluicetest.Unique("flush")))
			ctx := ctxFor(t, 30*time.Second)
			const flushes = 5
			for range flushes {
				before := l.ok.Load()
				testenv.Until(t, 10*time.Second, "calls between flushes", func() bool { return l.ok.Load() >= before+20 })
				if err := f.flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			before := l.ok.Load()
			testenv.Until(t, 10*time.Second, "calls after the last flush", func() bool { return l.ok.Load() >= before+20 })
			l.stop()
			all := l.all()
			if n := count(all, failed); n > 0 {
				checkErrors(t, all)
				t.Fatalf("%d of %d calls failed across %d SCRIPT FLUSHes; want none", n, len(all), flushes)
			}
			t.Logf("%d calls across %d SCRIPT FLUSHes, none failed", len(all), flushes)
		})
	}
}

// keysOn lists the keys with prefix on one cluster node.
func keysOn(t *testing.T, c *redistest.ClusterSet, addr, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := c.NodeClient(addr).Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatalf("KEYS on %s: %v", addr, err)
	}
	return keys
}

// TestClusterFailover kills the cluster master holding one descriptor's
// keys under load: calls for it fail with Unavailable until its replica
// takes over, then resume with the same sluice process, while descriptors
// on the other masters keep being decided. sluice has a circuit breaker per
// Redis node, so the dead master's calls never fail the healthy masters'.
// Redis itself may: with cluster-require-full-coverage yes (its default)
// every node answers CLUSTERDOWN from the moment the cluster marks the
// master failed until the replica is promoted, so the healthy masters'
// calls may fail then, with CLUSTERDOWN and nothing else; with "no" they
// must not fail at all. The recovery times are logged.
//
// REDIS_TIMEOUT is failoverTimeout here, not the 300ms of the other fault
// tests: any failure on a healthy master counts, so a short timeout would
// count a machine too loaded to answer in time as sluice spilling the
// failover over. The dead master's calls do not need a short one: it was
// killed, so they fail at once (connection refused or reset), whatever
// the timeout.
func TestClusterFailover(t *testing.T) {
	redistest.EachCoverage(t, redistest.ClusterOptions{NodeTimeout: time.Second}, clusterFailover)
}

// clusterFailover is TestClusterFailover on one cluster.
func clusterFailover(t *testing.T, c *redistest.ClusterSet, fullCoverage bool) {
	env := faultEnv(clusterEnv(t, c), map[string]string{"REDIS_TIMEOUT": failoverTimeout.String()})
	prefix := env["CACHE_KEY_PREFIX"]
	p := sluicetest.Start(t, sluicetest.Options{
		ConfigDir: configDir(t, map[string]string{"api.yaml": openConfig}),
		Env:       env,
	})

	// Find which master each descriptor's keys live on, by deciding one
	// descriptor at a time and looking for its new key.
	masters := c.Masters()
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	seen := map[string]bool{}
	home := map[string]string{} // descriptor value → master
	var victimKey string
	for i := 0; i < 64 && len(home) < 24; i++ {
		v := fmt.Sprintf("fo-%d", i)
		call(t, p, sluicetest.Request("api", 0, entries("k", v)))
		for _, m := range masters {
			for _, k := range keysOn(t, c, m, prefix) {
				if !seen[k] {
					seen[k] = true
					home[v] = m
					if i == 0 {
						victimKey = k
					}
				}
			}
		}
	}
	victim := home["fo-0"]
	var others []string
	for v, m := range home {
		if m != victim {
			others = append(others, v)
		}
	}
	slices.Sort(others)
	if victim == "" || len(others) == 0 {
		t.Fatalf("descriptors spread over %v: no victim or no others", home)
	}
	slot, err := c.KeySlot(victimKey)
	if err != nil {
		t.Fatal(err)
	}

	l := startLoad(t, p, 3, func(w, i int) *rlsv3.RateLimitRequest {
		return sluicetest.Request("api", 0, entries("k", others[(w*7+i)%len(others)]))
	})
	testenv.Until(t, 10*time.Second, "the load to run", func() bool { return l.ok.Load() >= 50 })

	if _, err := c.KillMaster(slot); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	okAtKill := l.ok.Load()
	// When the cluster itself shows the promoted replica, for the report.
	promoted := c.WatchPromotion(slot, victim, killed, 30*time.Second)
	var failures []outcome
	for {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		o := outcome{start: time.Now()}
		_, err := p.ShouldRateLimit(ctx, "api", 0, entries("k", "fo-0"))
		cancel()
		o.end, o.err = time.Now(), err
		if err == nil {
			break
		}
		failures = append(failures, o)
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no decision on slot %d 30s after its master %s was killed: %v", slot, victim, err)
		}
		time.Sleep(5 * time.Millisecond) // pace the probe; the condition is the next call's answer
	}
	recovered := time.Since(killed)
	okDuring := l.ok.Load() - okAtKill
	l.stop()

	longest := failedWithin(t, failures, failoverTimeout) // the calls on the failed slot
	during := l.since(killed)
	otherFailed := count(during, failed)
	checkErrors(t, during)
	// What failed on the healthy masters, and when.
	says := func(what string) func(outcome) bool {
		return func(o outcome) bool { return o.err != nil && strings.Contains(status.Convert(o.err).Message(), what) }
	}
	breaker, clusterDown := count(during, says("circuit open")), count(during, says("CLUSTERDOWN"))
	window := "none"
	if otherFailed > 0 {
		var first, last time.Time
		for _, o := range during {
			if failed(o) {
				if first.IsZero() || o.end.Before(first) {
					first = o.end
				}
				if o.end.After(last) {
					last = o.end
				}
			}
		}
		window = fmt.Sprintf("from %v to %v after the kill", first.Sub(killed).Round(time.Millisecond), last.Sub(killed).Round(time.Millisecond))
	}
	// The longest stretch in which no descriptor on a healthy master was
	// decided: how much of the failover spilled over to them.
	var ends []time.Time
	for _, o := range during {
		if admitted(o) && o.end.Before(killed.Add(recovered)) {
			ends = append(ends, o.end)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	gap, last := time.Duration(0), killed
	for _, e := range append(ends, killed.Add(recovered)) {
		gap, last = max(gap, e.Sub(last)), e
	}
	newMaster, _ := c.MasterOf(slot)
	t.Logf("cluster failover (cluster-node-timeout 1s, REDIS_TIMEOUT %v): decisions on slot %d resumed %v after its master %s was killed "+
		"(the cluster showed the new master %s after %v); %d calls on it failed meanwhile with Unavailable (the longest took %v); "+
		"the other masters decided %d calls meanwhile and %d failed (%d CLUSTERDOWN, %d circuit open), %s; the longest stretch without a decision on them was %v",
		failoverTimeout, slot, recovered.Round(time.Millisecond), victim, newMaster, (<-promoted).Round(time.Millisecond),
		len(failures), longest.Round(time.Millisecond),
		okDuring, otherFailed, clusterDown, breaker, window, gap.Round(time.Millisecond))
	if okDuring == 0 {
		t.Error("descriptors on the other masters were not decided during the failover")
	}
	if breaker > 0 {
		t.Errorf("%d calls on the healthy masters were failed by a circuit breaker: the dead master's failures spilled over", breaker)
	}
	// Each failed call on the healthy masters: when it started and ended
	// (after the kill), how long it took, and what it said.
	list := func(f func(outcome) bool) string {
		var lines []string
		for _, o := range during {
			if f(o) {
				lines = append(lines, fmt.Sprintf("started %v, ended %v after the kill (took %v): %v",
					o.start.Sub(killed).Round(time.Millisecond), o.end.Sub(killed).Round(time.Millisecond),
					o.end.Sub(o.start).Round(time.Millisecond), o.err))
			}
		}
		return strings.Join(lines, "\n")
	}
	switch {
	case fullCoverage && otherFailed > clusterDown:
		t.Errorf("%d calls on the healthy masters failed with something else than Redis's CLUSTERDOWN:\n%s",
			otherFailed-clusterDown, list(func(o outcome) bool { return failed(o) && !says("CLUSTERDOWN")(o) }))
	case !fullCoverage && otherFailed > 0:
		t.Errorf("%d calls on the healthy masters failed; with cluster-require-full-coverage no, want none:\n%s",
			otherFailed, list(failed))
	}
}

// failureModes has one domain per failure_mode, each limiting k to 10 a
// year.
var failureModes = map[string]string{
	"error.yaml": "domain: error\nfailure_mode: error\n" + tenAYear,
	"allow.yaml": "domain: allow\nfailure_mode: allow\n" + tenAYear,
	"deny.yaml":  "domain: deny\nfailure_mode: deny\n" + tenAYear,
	"local.yaml": "domain: local\nfailure_mode: local\n" + tenAYear,
}

const tenAYear = `descriptors:
  - key: k
    rate_limit: {unit: year, requests_per_unit: 10}
`

// TestFailureModes kills Redis and checks what each domain's failure_mode
// answers meanwhile: error is gRPC Unavailable (503 on /json), allow is OK,
// deny is OVER_LIMIT, and local decides in memory with the limit divided
// by SLUICE_LOCAL_INSTANCES (10 / 2 = 5 admitted). Health is NOT_SERVING
// while a domain in error or deny mode cannot reach Redis, but an instance
// serving only allow and local domains stays SERVING; both recover when
// Redis is back.
func TestFailureModes(t *testing.T) {
	rs := redistest.Standalone(t)
	env := faultEnv(standaloneEnv(rs), map[string]string{"SLUICE_LOCAL_INSTANCES": "2"})
	p := sluicetest.Start(t, sluicetest.Options{ConfigDir: configDir(t, failureModes), Env: env})
	lenient := sluicetest.Start(t, sluicetest.Options{
		ConfigDir: configDir(t, map[string]string{"allow.yaml": failureModes["allow.yaml"], "local.yaml": failureModes["local.yaml"]}),
		Env:       env,
	})
	for _, q := range []*sluicetest.Process{p, lenient} {
		if got := health(t, q); got != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health with Redis up: %v", got)
		}
	}

	rs.Kill()
	waitHealth(t, p, healthpb.HealthCheckResponse_NOT_SERVING, 10*time.Second)
	v := sluicetest.Unique("v")
	decide := func(q *sluicetest.Process, domain string) (rlsv3.RateLimitResponse_Code, error) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		resp, err := q.ShouldRateLimit(ctx, domain, 0, entries("k", v))
		if err != nil {
			return 0, err
		}
		return resp.OverallCode, nil
	}
	for i := range 12 {
		if _, err := decide(p, "error"); status.Code(err) != codes.Unavailable {
			t.Errorf("error mode, call %d: %v, want Unavailable", i+1, err)
		}
		if code, err := decide(p, "allow"); err != nil || code != ok {
			t.Errorf("allow mode, call %d: %v %v, want OK", i+1, code, err)
		}
		if code, err := decide(p, "deny"); err != nil || code != over {
			t.Errorf("deny mode, call %d: %v %v, want OVER_LIMIT", i+1, code, err)
		}
		want := ok
		if i >= 5 {
			want = over
		}
		if code, err := decide(p, "local"); err != nil || code != want {
			t.Errorf("local mode (limit 10 / 2 instances), call %d: %v %v, want %v", i+1, code, err, want)
		}
	}
	// /json maps Unavailable to 503.
	resp, err := http.Post("http://"+p.HTTPAddr()+"/json", "application/json",
		strings.NewReader(`{"domain":"error","descriptors":[{"entries":[{"key":"k","value":"x"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/json for an error-mode domain with Redis down: %d, want 503", resp.StatusCode)
	}
	// Only allow and local: useful answers without Redis, so still healthy.
	if got := health(t, lenient); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of an allow/local-only instance with Redis down: %v, want SERVING", got)
	}

	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, p, healthpb.HealthCheckResponse_SERVING, 10*time.Second)
	// Back on Redis (which restarted empty): the whole limit of 10 again.
	testenv.Until(t, 10*time.Second, "the error domain to decide again", func() bool {
		_, err := decide(p, "error")
		return err == nil
	})
	v = sluicetest.Unique("after")
	for i := range 12 {
		want := ok
		if i >= 10 {
			want = over
		}
		if code, err := decide(p, "local"); err != nil || code != want {
			t.Errorf("local mode with Redis back, call %d: %v %v, want %v", i+1, code, err, want)
		}
	}
}

// TestSentinelFailover kills the master of a Sentinel set (one master, one
// replica, one sentinel, down-after 1s) under load: calls fail with
// Unavailable until the sentinel promotes the replica, then resume with the
// same sluice process. The recovery time is logged.
func TestSentinelFailover(t *testing.T) {
	s := redistest.Sentinel(t)
	url := s.MasterName() + "," + strings.Join(s.SentinelAddrs(), ",")
	p, l := openUnderLoad(t, map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": url}, "sen")
	pid := p.PID()

	killed := time.Now()
	s.KillMaster()
	testenv.Until(t, 10*time.Second, "calls to fail", func() bool { return count(l.since(killed), failed) >= 1 })
	// Decisions resume with the first admitted call that started after
	// the first failure.
	firstFail := time.Now()
	for _, o := range l.since(killed) {
		if failed(o) && o.start.Before(firstFail) {
			firstFail = o.start
		}
	}
	resumed := waitResumed(t, 30*time.Second, func() (time.Time, bool) { return l.firstOKStartedAfter(firstFail) })
	l.stop()
	down := l.since(killed)
	longest := failedWithinTimeout(t, down)
	survived(t, p, pid, "the failover")
	t.Logf("sentinel failover (down-after 1s, REDIS_TIMEOUT %v): decisions resumed by %v after the master was killed; %d calls failed meanwhile with Unavailable (the longest took %v)",
		faultTimeout, resumed.Sub(killed).Round(time.Millisecond), count(down, failed), longest.Round(time.Millisecond))
}
