package main

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/metrics/metricstest"
	"github.com/sluice-rl/sluice/internal/testkit/redistest"
)

// redisServer is a redis-server process this test started on a loopback
// port, run by hand to control its lifetime exactly (kill, restart on the
// same port).
type redisServer struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	redistest.Require(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &redisServer{t: t, port: port}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *redisServer) start() {
	r.t.Helper()
	r.cmd = exec.Command("/usr/bin/redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.t.TempDir())
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) {
		c.Wait()
		close(done)
	}(r.cmd, r.done)
	waitFor(r.t, "redis-server to answer PING", func() bool {
		c, err := net.DialTimeout("tcp", r.Addr(), 200*time.Millisecond)
		if err != nil {
			return false
		}
		defer c.Close()
		c.Write([]byte("PING\r\n"))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.HasPrefix(line, "+PONG")
	})
}

// kill stops the process by its PID and waits for it.
func (r *redisServer) kill() {
	select {
	case <-r.done:
		return
	default:
	}
	r.cmd.Process.Kill()
	<-r.done
}

// restart starts redis-server again on the same port.
func (r *redisServer) restart() { r.start() }

// TestServeRedis runs serve on a real redis-server, loses Redis, and gets
// it back: decisions are shared through Redis, health follows the ping, and
// while Redis is down a failure_mode error domain answers Unavailable and
// an allow domain answers OK.
func TestServeRedis(t *testing.T) {
	rs := startRedis(t)
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(2))
	writeConfig(t, dir, "open.yaml", "domain: open\nfailure_mode: allow\n"+
		"descriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 5}\n")
	env := []string{"SLUICE_CONFIG=" + dir, "REDIS_URL=" + rs.Addr(), "SLUICE_HEALTH_INTERVAL=20ms", "SLUICE_HEALTH_FOLLOWS_BACKEND=true", "CACHE_KEY_PREFIX=t:"}
	a := startServe(t, env)
	if !strings.Contains(a.stderr.String(), `"chosen_by":"default with REDIS_URL"`) {
		t.Errorf("the log does not say redis was chosen because REDIS_URL is set:\n%s", a.stderr)
	}
	// A second instance shares the counters.
	b := startServe(t, env)

	callKV := func(s *served, domain, kv string) (int, string) {
		t.Helper()
		code, out, errOut := runCmd(t, nil, "check", "--addr", s.grpc, "--domain", domain, "--descriptor", kv, "--timeout", "5s")
		return code, out + errOut
	}
	call := func(s *served, domain string) (int, string) { return callKV(s, domain, "k=v") }
	for i, tc := range []struct {
		s    *served
		want string
		code int
	}{{a, "overall: OK", 0}, {b, "overall: OK", 0}, {a, "overall: OVER_LIMIT", 1}} {
		if code, out := call(tc.s, "api"); code != tc.code || !strings.HasPrefix(out, tc.want+"\n") {
			t.Errorf("call %d: exit %d\n%s\nwant %s", i+1, code, out, tc.want)
		}
	}
	if code, _ := a.get(t, "/healthcheck"); code != 200 {
		t.Errorf("/healthcheck with Redis up: %d", code)
	}
	// Every pipeline the Redis backend sent is counted: instance a decided
	// two calls, each one pipeline of one EVALSHA.
	if n, ok := metricstest.Value(a.scrapeMetrics(t), "sluice_redis_pipeline_batch_size", ""); !ok || n != 2 {
		t.Errorf("sluice_redis_pipeline_batch_size count = %v (present %v), want 2", n, ok)
	}
	// The denial Redis gave a is remembered: asking again is answered in
	// process (a cache hit), with no new pipeline.
	if code, out := call(a, "api"); code != 1 || !strings.HasPrefix(out, "overall: OVER_LIMIT\n") {
		t.Errorf("repeat of a denied call: exit %d\n%s", code, out)
	}
	fams := a.scrapeMetrics(t)
	if n, _ := metricstest.Value(fams, "sluice_denycache_hits_total", ""); n != 1 {
		t.Errorf("sluice_denycache_hits_total = %v, want 1", n)
	}
	if n, _ := metricstest.Value(fams, "sluice_redis_pipeline_batch_size", ""); n != 2 {
		t.Errorf("pipelines after a cache hit = %v, want still 2", n)
	}

	rs.kill()
	waitFor(t, "health to fail with Redis down", func() bool {
		code, _ := a.get(t, "/healthcheck")
		return code == 500
	})
	// k=v's denial is cached until its window ends, and is still answered
	// OVER_LIMIT locally (the cache holds what Redis said); a descriptor
	// never denied needs Redis.
	if code, out := call(a, "api"); code != 1 || !strings.HasPrefix(out, "overall: OVER_LIMIT\n") {
		t.Errorf("cached denial with Redis down: exit %d\n%s", code, out)
	}
	if code, out := callKV(a, "api", "k=fresh"); code != 2 || !strings.Contains(out, "Unavailable") {
		t.Errorf("failure_mode error with Redis down: exit %d\n%s\nwant exit 2 and Unavailable", code, out)
	}
	if code, out := call(a, "open"); code != 0 || !strings.HasPrefix(out, "overall: OK\n") {
		t.Errorf("failure_mode allow with Redis down: exit %d\n%s\nwant OK", code, out)
	}

	rs.restart()
	waitFor(t, "health to recover with Redis back", func() bool {
		code, _ := a.get(t, "/healthcheck")
		return code == 200
	})
	waitFor(t, "decisions to work again", func() bool {
		code, out := callKV(a, "api", "k=fresh")
		return code == 0 && strings.HasPrefix(out, "overall: OK\n")
	})
}

// TestServeRedisDownAtStart starts serve with no Redis listening: it must
// serve anyway (the backend retries), unhealthy, answering Unavailable.
func TestServeRedisDownAtStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := l.Addr().String()
	l.Close() // nothing listens there now

	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(2))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "BACKEND_TYPE=redis", "REDIS_URL=" + deadAddr, "REDIS_TIMEOUT=200ms"})
	if code, _ := s.get(t, "/healthcheck"); code != 500 {
		t.Errorf("/healthcheck with no Redis: %d, want 500", code)
	}
	code, out, errOut := runCmd(t, nil, "check", "--addr", s.grpc, "--domain", "api", "--descriptor", "k=v")
	if code != 2 || !strings.Contains(errOut, "Unavailable") {
		t.Errorf("check with no Redis: exit %d\n%s%s\nwant exit 2 and Unavailable", code, out, errOut)
	}
}
