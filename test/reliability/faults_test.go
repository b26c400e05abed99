package reliability

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	"github.com/sluice-rl/sluice/internal/reload"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/identity"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// faultLimit is every fault test's limit: faultLimit per hour per user, a
// window far longer than any test, so "admitted ≤ faultLimit in each
// window" is a sharp check.
const faultLimit = 200

// faultsYAML is the default failure mode (error: Unavailable), and
// faultsLocalYAML the same limit decided locally while Redis is away.
var (
	faultsYAML = fmt.Sprintf(`
domain: faults
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: %d}
`, faultLimit)
	faultsLocalYAML = fmt.Sprintf(`
domain: faults-local
failure_mode: local
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: %d}
`, faultLimit)
)

// faultTimeout is REDIS_TIMEOUT in the fault tests.
const faultTimeout = 200 * time.Millisecond

// userRequest asks for one hit of user in domain, labelled domain/user.
func userRequest(domain, user string) request {
	return request{key: domain + "/" + user, req: rq(domain, desc("user", user))}
}

// measure records the goroutines and live heap of the process with the
// stack up and idle, before the load starts.
type measure struct {
	goroutines int
	heap       uint64
}

func measureNow() measure { return measure{goroutines: runtime.NumGoroutine(), heap: heapAfterGC()} }

// warmUp makes one call, so that the gRPC connection and the Redis pool
// exist before measureNow counts goroutines.
func warmUp(t *testing.T, st *stack, r request) {
	t.Helper()
	if s := call(st.Client, 0, r); s.code != codes.OK {
		t.Fatalf("warm-up: %v %s", s.code, s.msg)
	}
}

// settled checks, once the load has stopped, that goroutines came back to
// the level before (give or take a few: connections re-dialled after the
// fault) and that the live heap did not grow beyond a generous bound, and
// logs both.
func (m measure) settled(t *testing.T) {
	t.Helper()
	g := settleGoroutines(t, m.goroutines, 4, 15*time.Second)
	h := heapAfterGC()
	t.Logf("goroutines %d before the load, %d after; live heap %.1f MiB before, %.1f MiB after",
		m.goroutines, g, float64(m.heap)/mib, float64(h)/mib)
	if h > m.heap+64*mib {
		t.Errorf("live heap grew from %.1f to %.1f MiB", float64(m.heap)/mib, float64(h)/mib)
	}
}

// checkAdmitted fails t if any group/key/window admitted more than limit,
// and logs the counts.
func checkAdmitted(t *testing.T, counts map[string]int, limit int) {
	t.Helper()
	for k, n := range counts {
		if n > limit {
			t.Errorf("%s: %d admitted, limit %d", k, n, limit)
		}
	}
	t.Logf("admitted per group/key/window (limit %d): %v", limit, counts)
}

// onlyCodes fails t if a sample of the keys matching prefix failed with a
// code not listed.
func onlyCodes(t *testing.T, samples []sample, prefix string, allowed ...codes.Code) {
	t.Helper()
	bad := map[codes.Code]int{}
	var example string
	for _, s := range samples {
		if s.code == codes.OK || !strings.HasPrefix(s.key, prefix) {
			continue
		}
		ok := false
		for _, c := range allowed {
			ok = ok || s.code == c
		}
		if !ok {
			bad[s.code]++
			example = s.msg
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s calls failed with %v (want only %v), e.g. %s", prefix, bad, allowed, example)
	}
}

// faultRedis starts a standalone Redis for one fault test and a backend on
// it with the fault tests' REDIS_TIMEOUT and the test's own key prefix.
func faultRedis(t *testing.T, keyPrefix string) (*redistest.Server, *redis.Backend) {
	t.Helper()
	srv := redistest.Standalone(t)
	return srv, newRedis(t, redis.Options{URL: srv.Addr(), Timeout: faultTimeout, KeyPrefix: keyPrefix})
}

// healthyRedis is faultRedis for the tests whose Redis stays up and which
// want no call to fail: a generous timeout, since under -race on a loaded
// machine a healthy round trip can take longer than faultTimeout.
func healthyRedis(t *testing.T, keyPrefix string) (*redistest.Server, *redis.Backend) {
	t.Helper()
	srv := redistest.Standalone(t)
	return srv, newRedis(t, redis.Options{URL: srv.Addr(), Timeout: 2 * time.Second, KeyPrefix: keyPrefix})
}

// TestRedisKilledUnderLoad kills the only Redis (SIGKILL) while 8 clients
// call, and restarts it on the same port. Clients of the default failure
// mode see Unavailable, clients of a failure_mode local domain see no
// error at all, decisions resume by themselves, and no Redis process ever
// admitted more than the limit in a window. A restart without persistence
// forgets the counts: the limit applies again from zero, per process.
func TestRedisKilledUnderLoad(t *testing.T) {
	srv, be := faultRedis(t, "kill:")
	st := startStack(t, service.Options{Backend: be, Local: newMemory()}, faultsYAML, faultsLocalYAML)
	warmUp(t, st, userRequest("faults", "warm-up"))
	m := measureNow()

	l := startLoad([]rlsv3.RateLimitServiceClient{st.Client}, 8, time.Millisecond, func(w, i int) request {
		if w == 7 {
			return userRequest("faults-local", "u"+strconv.Itoa(i%2))
		}
		return userRequest("faults", "u"+strconv.Itoa(i%4))
	})
	testenv.Until(t, 20*time.Second, "load running", func() bool { return l.ok.Load() > 4*faultLimit+200 })

	killed := time.Now()
	srv.Kill()
	// Keep Redis down until the circuit breaker has opened and one of its
	// probes has found Redis still dead.
	testenv.Until(t, 10*time.Second, "a breaker probe fails", func() bool { return l.failedAfterCircuit.Load() > 0 })
	restarted := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Every user over its limit again, on the restarted (empty) Redis.
	over := l.over.Load()
	testenv.Until(t, 30*time.Second, "decisions resume", func() bool { return l.over.Load() > over+400 })
	samples := l.finish()

	var main, local []sample
	for _, s := range samples {
		if strings.HasPrefix(s.key, "faults-local/") {
			local = append(local, s)
		} else {
			main = append(main, s)
		}
	}
	sm, sl := summarize(main), summarize(local)
	logSummary(t, "failure_mode error", sm)
	logSummary(t, "failure_mode local", sl)
	if !sm.resumed.IsZero() {
		t.Logf("Redis down for %v; answers resumed %v after the restart began",
			restarted.Sub(killed).Round(time.Millisecond), sm.resumed.Sub(restarted).Round(time.Millisecond))
	}
	onlyCodes(t, samples, "faults/", codes.Unavailable)
	onlyCodes(t, samples, "faults-local/")
	if sm.outcomes["Unavailable"] == 0 {
		t.Error("no client saw Unavailable: the fault did not happen")
	}
	// Which Redis process decided: none existed between the kill and the
	// restart, so a call started before the restart was decided by the
	// first, and one started after by the second.
	process := func(s sample) string {
		if s.start.Before(restarted) {
			return "first"
		}
		return "restarted"
	}
	checkAdmitted(t, admittedPerWindow(main, time.Hour, process), faultLimit)
	m.settled(t)
}

// replOffsets returns the master's replication offset and its replicas'
// acknowledged offsets, from INFO replication.
func replOffsets(ctx context.Context, c *goredis.Client) (master int64, replicas []int64, err error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, nil, err
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			master, _ = strconv.ParseInt(v, 10, 64)
		}
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "offset=") {
			for _, f := range strings.Split(line, ",") {
				if v, ok := strings.CutPrefix(f, "offset="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					replicas = append(replicas, n)
				}
			}
		}
	}
	return master, replicas, nil
}

// waitReplicated waits until every replica of the master c has
// acknowledged the writes the master had made when it was called.
func waitReplicated(t *testing.T, c *goredis.Client) {
	t.Helper()
	target, _, err := replOffsets(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Until(t, 10*time.Second, "replica caught up", func() bool {
		_, replicas, err := replOffsets(context.Background(), c)
		if err != nil || len(replicas) == 0 {
			return false
		}
		for _, r := range replicas {
			if r < target {
				return false
			}
		}
		return true
	})
}

// TestClusterMasterKilled kills one master of a 3-master cluster
// (cluster-require-full-coverage no) while 9 clients call for users spread
// over all masters. The replica is promoted after cluster-node-timeout;
// meanwhile only the dead master's users get Unavailable, and once
// promoted it answers with the counts it replicated: the limit holds
// across the failover. (With the default full coverage, Redis itself
// answers CLUSTERDOWN for every slot until the failover, so every user
// gets Unavailable for those seconds.)
//
// The kill happens after the replica has acknowledged every write, so
// the test does not measure what asynchronous replication may lose when a
// master dies with writes in flight (see docs/reliability.md).
func TestClusterMasterKilled(t *testing.T) {
	c := redistest.Cluster(t, redistest.ClusterOptions{Args: []string{"--cluster-require-full-coverage", "no"}})
	const prefix = "fo:"
	// A generous timeout: the live masters' users must see no error, and
	// under -race on a loaded machine a healthy round trip can take longer
	// than faultTimeout (then the live master's breaker opens too). The
	// killed master's calls fail at once (connection refused or reset).
	be := newRedis(t, redis.Options{Type: redis.TypeCluster, URL: strings.Join(c.Addrs(), ","), Timeout: 2 * time.Second, KeyPrefix: prefix})
	st := startStack(t, service.Options{Backend: be}, faultsYAML)
	byMaster := valuesPerMaster(t, c, prefix, "faults", "user", limit.Rule{Unit: limit.Hour})
	var users []string
	var victimMaster, victim string
	for m, u := range byMaster {
		users = append(users, u)
		if victim == "" {
			victimMaster, victim = m, u
		}
	}
	for _, u := range users {
		warmUp(t, st, userRequest("faults", u))
	}
	m := measureNow()

	l := startLoad([]rlsv3.RateLimitServiceClient{st.Client}, 9, time.Millisecond, func(w, i int) request {
		return userRequest("faults", users[(w+i)%len(users)])
	})
	testenv.Until(t, 30*time.Second, "every user over its limit", func() bool { return l.ok.Load() > int64(len(users))*faultLimit+300 })
	// Every write made so far (each user at its limit) has reached the
	// replica.
	waitReplicated(t, c.NodeClient(victimMaster))
	// Stop nothing: the load keeps calling while the master dies.
	k := redis.CounterKey(prefix, identity.Encode("faults", []identity.Entry{{Key: "user", Value: victim}}))
	slot, err := c.KeySlot(k)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if _, err := c.KillMaster(slot); err != nil {
		t.Fatal(err)
	}
	errs := l.errs.Load()
	testenv.Until(t, 10*time.Second, "clients see errors", func() bool { return l.errs.Load() > errs+20 })
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	ok := l.ok.Load()
	testenv.Until(t, 30*time.Second, "decisions resume", func() bool { return l.ok.Load() > ok+600 })
	samples := l.finish()

	perUser := map[string][]sample{}
	for _, s := range samples {
		perUser[s.key] = append(perUser[s.key], s)
	}
	for _, u := range users {
		s := summarize(perUser["faults/"+u])
		what := "user on a live master"
		if u == victim {
			what = "user on the killed master"
		}
		logSummary(t, fmt.Sprintf("%s (%s)", what, u), s)
		if u == victim && !s.resumed.IsZero() {
			t.Logf("  answers resumed %v after the kill (cluster healthy again after %v)",
				s.resumed.Sub(killed).Round(time.Millisecond), promoted.Sub(killed).Round(time.Millisecond))
		}
		if u == victim && s.outcomes["Unavailable"] == 0 {
			t.Errorf("no call for %s failed: the fault did not happen", u)
		}
	}
	onlyCodes(t, samples, "faults/", codes.Unavailable)
	// With cluster-require-full-coverage no, the live masters keep
	// serving their slots: their users must not notice the failover.
	for _, u := range users {
		if s := summarize(perUser["faults/"+u]); u != victim && s.calls != s.outcomes["OK"]+s.outcomes["OVER_LIMIT"] {
			t.Errorf("user %s on a live master saw errors: %s", u, s)
		}
	}
	checkAdmitted(t, admittedPerWindow(samples, time.Hour, func(sample) string { return "cluster" }), faultLimit)
	m.settled(t)
}

// TestScriptFlushUnderLoad empties Redis's script cache 10 times while 8
// clients call: nobody sees an error (NOSCRIPT falls back to EVAL within
// the same call).
func TestScriptFlushUnderLoad(t *testing.T) {
	srv, be := healthyRedis(t, "flush:")
	rc := srv.Client()
	st := startStack(t, service.Options{Backend: be}, faultsYAML)
	warmUp(t, st, userRequest("faults", "warm-up"))
	m := measureNow()
	l := startLoad([]rlsv3.RateLimitServiceClient{st.Client}, 8, time.Millisecond, func(w, i int) request {
		return userRequest("faults", "u"+strconv.Itoa(i%4))
	})
	for i := range 10 {
		ok := l.ok.Load()
		if err := rc.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		testenv.Until(t, 10*time.Second, fmt.Sprintf("decisions after flush %d", i+1), func() bool { return l.ok.Load() > ok+50 })
	}
	samples := l.finish()
	s := summarize(samples)
	logSummary(t, "across 10 SCRIPT FLUSH", s)
	if s.calls != s.outcomes["OK"]+s.outcomes["OVER_LIMIT"] {
		t.Errorf("some calls failed across SCRIPT FLUSH")
	}
	stats, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_eval:") {
		t.Error("no EVAL in commandstats: NOSCRIPT was never met, the flushes did nothing")
	}
	checkAdmitted(t, admittedPerWindow(samples, time.Hour, func(sample) string { return "redis" }), faultLimit)
	m.settled(t)
}

// TestRedisPaused makes Redis stop answering for 2 s (CLIENT PAUSE 2000
// ALL) with REDIS_TIMEOUT 200ms: callers get Unavailable after the
// timeout, not after the pause, the circuit breaker then fails calls at
// once, and decisions resume when Redis does. A call that timed out may
// still run once Redis resumes; the test measures how much quota such
// calls consumed without being admitted.
func TestRedisPaused(t *testing.T) {
	srv, be := faultRedis(t, "pause:")
	rc := srv.Client()
	// A limit no test reaches, so that every hit Redis counted is visible.
	big := strings.Replace(faultsYAML, strconv.Itoa(faultLimit), strconv.Itoa(math.MaxInt32), 1)
	st := startStack(t, service.Options{Backend: be}, big)
	warmUp(t, st, userRequest("faults", "warm-up"))
	m := measureNow()
	l := startLoad([]rlsv3.RateLimitServiceClient{st.Client}, 8, time.Millisecond, func(w, i int) request {
		return userRequest("faults", "u"+strconv.Itoa(i%4))
	})
	testenv.Until(t, 10*time.Second, "load running", func() bool { return l.ok.Load() > 200 })
	const pause = 2 * time.Second
	paused := time.Now()
	if err := rc.Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	errs := l.errs.Load()
	testenv.Until(t, 10*time.Second, "clients see errors", func() bool { return l.errs.Load() > errs+20 })
	// The pause ends by itself; wait for answers after it.
	testenv.Until(t, 30*time.Second, "decisions resume", func() bool {
		return time.Since(paused) > pause && recentOK(l)
	})
	samples := l.finish()
	s := summarize(samples)
	logSummary(t, "CLIENT PAUSE 2000 ALL, timeout 200ms", s)
	if !s.resumed.IsZero() {
		t.Logf("answers resumed %v after the pause ended", s.resumed.Sub(paused.Add(pause)).Round(time.Millisecond))
	}
	onlyCodes(t, samples, "faults/", codes.Unavailable)
	if s.outcomes["Unavailable"] == 0 {
		t.Error("no client saw Unavailable: the pause did not happen")
	}
	// The point of the timeout: no caller waited for the pause to end.
	if s.maxFailed >= pause {
		t.Errorf("a failed call took %v, as long as the pause: the %v timeout did not bound it", s.maxFailed, faultTimeout)
	}

	// Count what Redis consumed against what clients were told was
	// admitted, with a peek (cost 0) per user.
	admitted := map[string]int{}
	for _, x := range samples {
		if x.admitted() {
			admitted[x.key]++
		}
	}
	phantom := 0
	for u := range 4 {
		r := rq("faults", withAddend(desc("user", "u"+strconv.Itoa(u)), 0))
		resp, err := st.Client.ShouldRateLimit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		used := math.MaxInt32 - int(resp.Statuses[0].LimitRemaining)
		key := "faults/u" + strconv.Itoa(u)
		if used < admitted[key] {
			t.Errorf("%s: Redis counted %d, clients were admitted %d times", key, used, admitted[key])
		}
		phantom += used - admitted[key]
	}
	t.Logf("hits Redis counted without the client being admitted (timed out, run after the pause): %d", phantom)
	m.settled(t)
}

// recentOK reports whether answers are flowing now: ok grows while errs
// stands still over a short poll.
func recentOK(l *load) bool {
	ok, errs := l.ok.Load(), l.errs.Load()
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if l.ok.Load() > ok+20 && l.errs.Load() == errs {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// writeConfigVersion writes one version of a Kubernetes-style config
// directory: dir/..vN/faults.yaml, then points dir/..data at it (an atomic
// rename of a new symlink), with dir/faults.yaml → ..data/faults.yaml.
func writeConfigVersion(t *testing.T, dir string, n int, yaml string) {
	t.Helper()
	ver := filepath.Join(dir, "..v"+strconv.Itoa(n))
	if err := os.MkdirAll(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ver, "faults.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..v"+strconv.Itoa(n), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "faults.yaml")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink("..data/faults.yaml", link); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConfigReplacedBrokenThenFixed swaps the config directory, as a
// Kubernetes ConfigMap update does, to a broken version and then to a
// fixed one while 8 clients call on the Redis backend. The broken version
// is refused with its file and line, the last good config keeps deciding
// (nobody sees an error, the limit stays), and the fixed version takes
// effect.
func TestConfigReplacedBrokenThenFixed(t *testing.T) {
	_, be := healthyRedis(t, "reload:")
	st := startStack(t, service.Options{Backend: be})
	dir := t.TempDir()
	writeConfigVersion(t, dir, 1, faultsYAML)
	watcher, err := reload.New(reload.Options{
		Paths:  []string{dir},
		Load:   func() (*descriptor.Config, error) { return descriptor.Load(descriptor.LoadOptions{}, dir) },
		Apply:  st.svc.SetConfig,
		Logger: stacktest.QuietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Load(); err != nil {
		t.Fatal(err)
	}
	warmUp(t, st, userRequest("faults", "warm-up"))
	m := measureNow()
	l := startLoad([]rlsv3.RateLimitServiceClient{st.Client}, 8, time.Millisecond, func(w, i int) request {
		return userRequest("faults", "u"+strconv.Itoa(i%4))
	})
	testenv.Until(t, 10*time.Second, "load running", func() bool { return l.ok.Load() > 4*faultLimit+200 })

	broken := strings.Replace(faultsYAML, "unit: hour", "unit: fortnight", 1)
	writeConfigVersion(t, dir, 2, broken)
	reloaded, err := watcher.Check()
	if !reloaded || err == nil || !strings.Contains(err.Error(), "faults.yaml:5:") {
		t.Fatalf("broken config: reloaded %v, error %v; want refused with faults.yaml:5", reloaded, err)
	}
	t.Logf("broken config refused: %v", err)
	ok := l.ok.Load()
	testenv.Until(t, 10*time.Second, "decisions on the last good config", func() bool { return l.ok.Load() > ok+500 })
	brokenUntil := time.Now()

	const raised = 2 * faultLimit
	fixed := strings.Replace(faultsYAML, strconv.Itoa(faultLimit), strconv.Itoa(raised), 1)
	writeConfigVersion(t, dir, 3, fixed)
	if reloaded, err := watcher.Check(); !reloaded || err != nil {
		t.Fatalf("fixed config: reloaded %v, error %v", reloaded, err)
	}
	fixedAt := time.Now()
	ok = l.ok.Load()
	testenv.Until(t, 10*time.Second, "decisions on the fixed config", func() bool { return l.ok.Load() > ok+4*faultLimit+500 })
	samples := l.finish()

	s := summarize(samples)
	logSummary(t, "config broken then fixed", s)
	if s.calls != s.outcomes["OK"]+s.outcomes["OVER_LIMIT"] {
		t.Error("some calls failed while the config was swapped")
	}
	if st := watcher.Stats(); st.Failures != 1 || st.Successes != 2 {
		t.Errorf("watcher stats %+v, want 1 failure and 2 successes", st)
	}
	// Until the fix, every answer carried the old limit; after it (calls
	// started once the new config was applied), the raised one. Raising a
	// limit keeps the count: each user was admitted faultLimit times under
	// the first config and raised-faultLimit more under the second.
	for _, x := range samples {
		want := uint32(faultLimit)
		switch {
		case x.end.Before(brokenUntil):
		case x.start.After(fixedAt):
			want = raised
		default:
			continue
		}
		if got := x.status.GetCurrentLimit().GetRequestsPerUnit(); x.code == codes.OK && got != want {
			t.Fatalf("call at %v reported limit %d, want %d", x.start, got, want)
		}
	}
	checkAdmitted(t, admittedPerWindow(samples, time.Hour, func(sample) string { return "redis" }), raised)
	m.settled(t)
}
