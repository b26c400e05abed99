package redis

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// threeRules is a typical node: a burst, an hourly and a daily rule.
var threeRules = []limit.Rule{
	{Name: "burst", Algorithm: limit.TokenBucket, Unit: limit.Second, Limit: 10, Burst: 30},
	{Name: "hourly", Algorithm: limit.SlidingWindow, Unit: limit.Hour, Limit: 1000},
	{Name: "daily", Unit: limit.Day, Limit: 10000},
}

// TestOneEvalshaPerCheck: N Decide calls, each one check of three rules,
// cost Redis exactly N EVALSHA and nothing else from the client: MONITOR
// shows every command a client sends, and marks those a script runs as
// "lua", which are not round trips.
// With coalescing on and off; with Options.Functions, the same holds of
// FCALL: N FCALL, no EVALSHA.
func TestOneEvalshaPerCheck(t *testing.T) {
	for _, co := range []bool{true, false} {
		for _, fn := range []bool{false, true} {
			t.Run("coalesce="+onOff(co)+"/functions="+onOff(fn), func(t *testing.T) { testOneEvalshaPerCheck(t, !co, fn) })
		}
	}
}

func testOneEvalshaPerCheck(t *testing.T, disableCoalescing, functions bool) {
	srv := redistest.Standalone(t)
	rc := srv.Client()
	ctx := context.Background()
	b := newBackend(t, Options{URL: srv.Addr(), KeyPrefix: "rt:", DisableCoalescing: disableCoalescing, Functions: functions}) // loads the script
	script, other := "evalsha", "fcall"
	if functions {
		script, other = other, script
	}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	mon, lines := monitor(t, srv.Addr())
	defer mon.Close()

	const n = 40
	for i := range n {
		res := b.Decide(ctx, []backend.Check{{Identity: fmt.Sprintf("rt|user=%d", i%5), Rules: threeRules, Cost: limit.Cost{N: 1}}})
		if res[0].Err != nil || !res[0].Allowed {
			t.Fatalf("decide %d: %+v", i, res[0])
		}
	}
	const marker = "sluice-roundtrip-marker"
	if err := rc.Echo(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	var fromClients []string
	deadline := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("MONITOR connection closed")
			}
			if strings.Contains(l, marker) {
				done = true
				continue
			}
			if strings.Contains(l, "[0 lua]") {
				continue
			}
			fromClients = append(fromClients, l)
		case <-deadline:
			t.Fatalf("MONITOR never showed the marker; saw %d client commands", len(fromClients))
		}
	}
	evalsha := 0
	for _, l := range fromClients {
		switch cmd := monitoredCommand(l); cmd {
		case script:
			evalsha++
		case "hello", "auth", "select", "client": // a new pooled connection's handshake
		default:
			t.Errorf("a command other than %s reached Redis: %s", strings.ToUpper(script), l)
		}
	}
	if evalsha != n {
		t.Errorf("%d %s for %d checks, want exactly one each", evalsha, strings.ToUpper(script), n)
	}
	stats := redistest.CommandCalls(t, rc)
	if stats[script] != n || stats[other] != 0 || stats["eval"] != 0 || stats["script|load"] != 0 || stats["function|load"] != 0 {
		t.Errorf("commandstats %v: want %s=%d and no %s, eval, script load or function load", stats, script, n, other)
	}
}

// TestOneEvalshaPerCheckCluster: on a cluster, N checks spread over many
// descriptors cost N EVALSHA in total over the masters, one Decide (with
// several checks) is one pipeline split by node, and nothing else is sent.
// With coalescing on and off.
func TestOneEvalshaPerCheckCluster(t *testing.T) {
	for _, co := range []bool{true, false} {
		t.Run("coalesce="+onOff(co), func(t *testing.T) { testOneEvalshaPerCheckCluster(t, !co) })
	}
}

func testOneEvalshaPerCheckCluster(t *testing.T, disableCoalescing bool) {
	c := cluster.Get(t)
	opts := clusterOptions(c)
	opts.KeyPrefix = "rtc:"
	opts.DisableCoalescing = disableCoalescing
	b := newBackend(t, opts)
	ctx := context.Background()
	masters := c.Masters()
	for _, m := range masters {
		if err := c.NodeClient(m).ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const calls, perCall = 10, 6
	for i := range calls {
		checks := make([]backend.Check, perCall)
		for j := range checks {
			checks[j] = backend.Check{Identity: fmt.Sprintf("rtc|user=%d", i*perCall+j), Rules: threeRules, Cost: limit.Cost{N: 1}}
		}
		for j, r := range b.Decide(ctx, checks) {
			if r.Err != nil || !r.Allowed {
				t.Fatalf("decide %d check %d: %+v", i, j, r)
			}
		}
	}
	total := 0
	for _, m := range masters {
		s := redistest.CommandCalls(t, c.NodeClient(m))
		total += s["evalsha"]
		if s["eval"] != 0 || s["script|load"] != 0 {
			t.Errorf("master %s: commandstats %v, want no eval or script load", m, s)
		}
		// Commands the client may send besides EVALSHA: none that touch data.
		for cmd, n := range s {
			switch cmd {
			case "evalsha", "config|resetstat", "info", "cluster|slots", "cluster|shards", "cluster|nodes", "ping", "hello", "client|setinfo", "command", "command|info", "command|docs",
				"mget", "get", "set", "pexpireat", "del", "incrby", "decrby", "expireat", "pexpire", "zremrangebyscore", "zcard", "zadd", "zrange", "zcount", "zremrangebyrank", "time",
				"replconf": // its replica acknowledging replication, every second
			default:
				t.Errorf("master %s: unexpected command %s (%d calls)", m, cmd, n)
			}
		}
	}
	if total != calls*perCall {
		t.Errorf("%d EVALSHA over the masters for %d checks, want one each", total, calls*perCall)
	}
}

// monitoredCommand returns the lower-case command name of a MONITOR line,
// e.g. `+1795315545.130076 [0 127.0.0.1:53674] "evalsha" "..."`.
func monitoredCommand(line string) string {
	_, rest, ok := strings.Cut(line, "] \"")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "\"")
	return strings.ToLower(name)
}

// monitor opens a raw MONITOR connection and streams its lines.
func monitor(t *testing.T, addr string) (net.Conn, <-chan string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q, %v", l, err)
	}
	out := make(chan string, 1024)
	go func() {
		defer close(out)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			out <- l
		}
	}()
	return conn, out
}
