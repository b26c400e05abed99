package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

// threeRules is one descriptor with three rules that never deny in a test.
const threeRules = `domain: api
descriptors:
  - key: user
    rate_limits:
      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 1000, burst: 100000}
      - {name: hourly, algorithm: sliding_window, unit: hour, requests_per_unit: 1000000}
      - {name: daily, algorithm: fixed_window, unit: day, requests_per_unit: 10000000, time_zone: Asia/Shanghai}
`

// monitor records, from Redis's MONITOR stream, the commands clients sent
// (not those a script ran) and the key count of each script call (FCALL
// or EVALSHA).
type monitor struct {
	conn net.Conn
	done chan struct{}

	mu       sync.Mutex
	commands map[string]int // lower-case command name → calls
	numkeys  map[string]int // FCALL or EVALSHA numkeys argument → calls
	marker   string         // set by sync; the reader closes done on seeing it
	err      error
}

// monitorLine parses `+1700000000.123456 [0 127.0.0.1:5000] "evalsha" "…" "3" …`.
var monitorLine = regexp.MustCompile(`^\+\d+\.\d+ \[\d+ ([^\]]+)\] "([^"]*)"(?: "([^"]*)")?(?: "([^"]*)")?`)

// startMonitor opens a MONITOR connection to addr.
func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "+OK" {
		t.Fatalf("MONITOR on %s: %q %v", addr, line, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	m := &monitor{conn: conn, done: make(chan struct{}), commands: map[string]int{}, numkeys: map[string]int{}}
	go func() {
		defer close(m.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				m.mu.Lock()
				m.err = err
				m.mu.Unlock()
				return
			}
			f := monitorLine.FindStringSubmatch(strings.TrimSpace(line))
			if f == nil || f[1] == "lua" {
				continue // a command run by a script, not sent by a client
			}
			cmd := strings.ToLower(f[2])
			m.mu.Lock()
			if cmd == "echo" && m.marker != "" && f[3] == m.marker {
				m.mu.Unlock()
				return
			}
			m.commands[cmd]++
			if cmd == "evalsha" || cmd == "fcall" {
				m.numkeys[f[4]]++
			}
			m.mu.Unlock()
		}
	}()
	return m
}

// finish sends a marker through c (a client of the same node), waits for
// the monitor to see it, so every earlier command has been counted, and
// returns the counts.
func (m *monitor) finish(t *testing.T, c *redis.Client) (commands, numkeys map[string]int) {
	t.Helper()
	marker := sluicetest.Unique("marker")
	m.mu.Lock()
	m.marker = marker
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Echo(ctx, marker).Err(); err != nil {
		t.Fatalf("ECHO: %v", err)
	}
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatal("MONITOR did not show the marker")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		t.Fatalf("MONITOR stream: %v", m.err)
	}
	m.conn.Close()
	return m.commands, m.numkeys
}

// control are the commands a client may send that touch no data: the
// health probe's PING, connection set-up, the cluster client's topology
// queries, replication between nodes, and this test's own INFO, CONFIG
// and ECHO.
var control = map[string]bool{
	"ping": true, "hello": true, "client": true, "auth": true, "select": true, "command": true,
	"cluster": true, "readonly": true, "replconf": true, "psync": true,
	"info": true, "config": true, "echo": true,
}

// TestOneEvalshaPerDescriptor checks the single-call claim end to end: N
// requests, each with three descriptors of three rules, reach one Redis as
// exactly N script calls -- FCALL by default, EVALSHA with
// SLUICE_REDIS_FUNCTIONS=false -- each naming every rule of every
// descriptor of its request (3 keys: each descriptor's counter key holds
// its three rules' records), and a cluster as 3N calls of one descriptor
// each; no other data command is sent, and 3N keys are left.
// MONITOR
// tells the commands clients sent from those the script ran; INFO
// commandstats (reset before the measured calls) confirms the count.
func TestOneEvalshaPerDescriptor(t *testing.T) {
	const n, per = 50, 3 // requests, descriptors per request
	for _, topo := range []struct {
		name  string
		batch bool // one call decides every descriptor of a request
		start func(t *testing.T) (map[string]string, []redisNode)
	}{
		{"standalone", true, func(t *testing.T) (map[string]string, []redisNode) {
			rs := redistest.Standalone(t)
			return standaloneEnv(rs), []redisNode{{rs.Addr(), rs.Client()}}
		}},
		{"cluster", false, func(t *testing.T) (map[string]string, []redisNode) {
			c := cluster.Get(t)
			var nodes []redisNode
			for _, m := range c.Masters() {
				nodes = append(nodes, redisNode{m, c.NodeClient(m)})
			}
			return clusterEnv(t, c), nodes
		}},
	} {
		for _, functions := range []bool{true, false} {
			script, other := "fcall", "evalsha"
			if !functions {
				script, other = other, script
			}
			t.Run(topo.name+"/"+script, func(t *testing.T) {
				testOneScriptCallPerDescriptor(t, n, per, topo.batch, functions, script, other, topo.start)
			})
		}
	}
}

// redisNode is one Redis node of a topology: its address and a client.
type redisNode struct {
	addr   string
	client *redis.Client
}

// testOneScriptCallPerDescriptor runs TestOneEvalshaPerDescriptor on one
// topology with functions on (the script calls are FCALL) or off (EVALSHA).
func testOneScriptCallPerDescriptor(t *testing.T, n, per int, batch, functions bool, script, other string, start func(t *testing.T) (map[string]string, []redisNode)) {
	env, nodes := start(t)
	env["SLUICE_REDIS_FUNCTIONS"] = fmt.Sprint(functions)
	p := sluicetest.Start(t, sluicetest.Options{
		ConfigDir: configDir(t, map[string]string{"api.yaml": threeRules}),
		Env:       env,
	})
	ctx := ctxFor(t, 30*time.Second)
	monitors := make([]*monitor, len(nodes))
	for i, nd := range nodes {
		if err := nd.client.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT on %s: %v", nd.addr, err)
		}
		monitors[i] = startMonitor(t, nd.addr)
	}

	users := sluicetest.Unique("u") // this run's descriptors: the cluster is shared with other tests
	for i := range n {
		var ds [][]sluicetest.Entry
		for d := range per {
			ds = append(ds, entries("user", fmt.Sprintf("%s-%d.%d", users, i, d)))
		}
		resp := call(t, p, sluicetest.Request("api", 0, ds...))
		if resp.OverallCode != ok {
			t.Fatalf("call %d: %v", i+1, resp)
		}
	}
	// Calls and their key counts: on one node, one call per request
	// names all its descriptors (each one key: the counter key, for
	// all three rules); on a cluster, one call per descriptor.
	calls, keysPerCall := n*per, 1
	if batch {
		calls, keysPerCall = n, per
	}

	commands, numkeys := map[string]int{}, map[string]int{}
	stats := map[string][2]int{}
	for i, nd := range nodes {
		c, k := monitors[i].finish(t, nd.client)
		for name, v := range c {
			commands[name] += v
		}
		for name, v := range k {
			numkeys[name] += v
		}
		for name, v := range redistest.CommandStats(t, nd.client) {
			s := stats[name]
			stats[name] = [2]int{s[0] + v.Calls, s[1] + v.Failed}
		}
	}
	// At most one reload of the script (after NOSCRIPT or a missing
	// function: a failed call, then EVAL, SCRIPT LOAD or FUNCTION LOAD)
	// is allowed.
	reloads := commands["eval"] + commands["script"] + commands["function"]
	if reloads > 1 {
		t.Errorf("%d script reloads, want at most 1", reloads)
	}
	if got := commands[script]; got != calls+reloads {
		t.Errorf("clients sent %d %s for %d requests of %d descriptors, want %d", got, strings.ToUpper(script), n, per, calls+reloads)
	}
	if got := commands[other]; got != 0 {
		t.Errorf("clients sent %d %s, want none", got, strings.ToUpper(other))
	}
	if k := fmt.Sprint(keysPerCall); numkeys[k] < calls || len(numkeys) != 1 {
		t.Errorf("script call key counts %v, want every call with %s keys (a counter key per descriptor, for all three rules)", numkeys, k)
	}
	var keys []string
	for _, nd := range nodes {
		k, err := nd.client.Keys(ctx, "*"+users+"-*").Result()
		if err != nil {
			t.Fatalf("KEYS on %s: %v", nd.addr, err)
		}
		keys = append(keys, k...)
	}
	if len(keys) != n*per {
		t.Errorf("%d keys in Redis after %d descriptors of three rules, want %d: %q", len(keys), n*per, n*per, keys)
	}
	for name, calls := range commands {
		if name != script && name != "eval" && name != "script" && name != "function" && !control[name] {
			t.Errorf("clients sent %d %s: a data command other than %s", calls, strings.ToUpper(name), strings.ToUpper(script))
		}
	}
	if s := stats[script]; s[0]-s[1] != calls {
		t.Errorf("INFO commandstats: %d %s (%d failed), want %d that succeeded", s[0], strings.ToUpper(script), s[1], calls)
	}
	t.Logf("%d requests of %d three-rule descriptors: client commands %v; INFO commandstats %s %v (calls, failed)",
		n, per, commands, script, stats[script])
}
