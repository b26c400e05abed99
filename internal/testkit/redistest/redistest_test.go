package redistest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// setK writes k=v through c, failing t on an error (via says how the
// command travelled).
func setK(ctx context.Context, t *testing.T, c redis.Cmdable, via string) {
	t.Helper()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET%s: %v", via, err)
	}
}

func TestStandaloneLifecycle(t *testing.T) {
	s := Standalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := s.Client()
	setK(ctx, t, c, "")
	pid := s.PID()
	if pid == 0 {
		t.Fatal("PID is 0 for a running server")
	}
	if host := s.Addr()[:10]; host != "127.0.0.1:" {
		t.Fatalf("Addr %q is not on loopback", s.Addr())
	}

	// The unix socket answers too.
	u := redis.NewClient(&redis.Options{Network: "unix", Addr: s.SocketPath()})
	defer u.Close()
	if got, err := u.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET over unix socket = %q, %v; want v", got, err)
	}

	s.Kill()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("process %d still alive after Kill", pid)
	}
	if err := pingRaw(s.Addr()); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.PID() == pid {
		t.Fatal("Restart kept the old PID")
	}
	// Nothing is persisted: the key is gone after a restart.
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET after restart: %v, want redis.Nil", err)
	}

	root := s.root
	s.Close()
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("temp dir %s left behind: %v", root, err)
	}
}

func TestStandalonePauseResume(t *testing.T) {
	s := Standalone(t)
	s.Pause()
	if err := pingRaw(s.Addr()); err == nil {
		t.Fatal("a paused server answered PING")
	}
	s.Resume()
	if err := waitFor(5*time.Second, "ping after resume", func() error { return pingRaw(s.Addr()) }); err != nil {
		t.Fatal(err)
	}
}

func TestStandaloneArgs(t *testing.T) {
	s := Standalone(t, "--requirepass", "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Client().Ping(ctx).Err(); err == nil {
		t.Fatal("PING without a password succeeded against --requirepass")
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: "secret"})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
}

func TestParseClusterNodes(t *testing.T) {
	in := "07c3 127.0.0.1:30004@31004,host slave e7d1 0 1426238317239 4 connected\n" +
		"67ed 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922 [5462->-abc]\n" +
		"e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 16000\n" +
		"9999 127.0.0.1:30003@31003 master,fail - 0 0 3 disconnected\n"
	got := parseClusterNodes(in)
	if len(got) != 4 {
		t.Fatalf("parsed %d nodes, want 4", len(got))
	}
	tests := []struct {
		i              int
		addr           string
		master, failed bool
		slots          [][2]int
	}{
		{0, "127.0.0.1:30004", false, false, nil},
		{1, "127.0.0.1:30002", true, false, [][2]int{{5461, 10922}}},
		{2, "127.0.0.1:30001", true, false, [][2]int{{0, 5460}, {16000, 16000}}},
		{3, "127.0.0.1:30003", true, true, nil},
	}
	for _, tt := range tests {
		n := got[tt.i]
		if n.addr != tt.addr || n.master != tt.master || n.failed != tt.failed || len(n.slots) != len(tt.slots) {
			t.Errorf("node %d = %+v, want addr %s master %v failed %v slots %v", tt.i, n, tt.addr, tt.master, tt.failed, tt.slots)
			continue
		}
		for j := range tt.slots {
			if n.slots[j] != tt.slots[j] {
				t.Errorf("node %d slots %v, want %v", tt.i, n.slots, tt.slots)
			}
		}
	}
}

func TestClusterFailover(t *testing.T) {
	c := Cluster(t, ClusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if got := len(c.Masters()); got != 3 {
		t.Fatalf("%d masters, want 3", got)
	}
	cl := c.Client()
	if err := cl.Set(ctx, "{a}x", "1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	slot, err := c.KeySlot("{a}x")
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the write to reach the replica, so the promoted replica has it.
	master, _ := c.MasterOf(slot)
	if err := c.NodeClient(master).Do(ctx, "WAIT", 1, 2000).Err(); err != nil {
		t.Fatalf("WAIT: %v", err)
	}
	killed, err := c.KillMaster(slot)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(clusterTimeout); err != nil {
		t.Fatal(err)
	}
	now, err := c.MasterOf(slot)
	if err != nil {
		t.Fatal(err)
	}
	if now == killed {
		t.Fatalf("slot %d still served by the killed master %s", slot, killed)
	}
	// go-redis learns the new slot map lazily; ReloadState asks for it.
	err = waitFor(clusterTimeout, "GET after failover", func() error {
		got, err := cl.Get(ctx, "{a}x").Result()
		if err != nil {
			cl.ReloadState(ctx)
			return err
		}
		if got != "1" {
			t.Fatalf("GET after failover = %q, want 1", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RestartNode(killed); err != nil {
		t.Fatalf("RestartNode: %v", err)
	}
	if err := c.WaitHealthy(clusterTimeout); err != nil {
		t.Fatal(err)
	}
}

func TestSentinel(t *testing.T) {
	s := Sentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	setK(ctx, t, s.Client(), " through sentinel")
	if s.MasterName() == "" || len(s.SentinelAddrs()) == 0 {
		t.Fatal("empty master name or sentinel list")
	}
}

// TestSentinelAuth: with --requirepass the data nodes want the password,
// the replica and the sentinel use it, and Client sends it.
func TestSentinelAuth(t *testing.T) {
	s := Sentinel(t, "--requirepass", "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	setK(ctx, t, s.Client(), " through sentinel with the password")
	anon := adminClient(s.MasterAddr(), "")
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil {
		t.Fatal("PING without a password succeeded against --requirepass")
	}
}

// TestPortTakenIsDetected: a start that loses its port to another process
// reports errPortTaken, which newProcess answers with new ports.
func TestPortTakenIsDetected(t *testing.T) {
	Require(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &process{dir: dir, port: l.Addr().(*net.TCPAddr).Port, conf: func(port, _ int) []string { return baseConfig(dir, port) }}
	err = p.start()
	defer p.stop()
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a taken port: %v, want errPortTaken", err)
	}
}

func TestParseCommandStats(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		want       map[string]CommandStat
	}{
		{"Redis 7", "# Commandstats\r\ncmdstat_fcall:calls=12,usec=90,usec_per_call=7.50,rejected_calls=0,failed_calls=2\r\ncmdstat_incrby:calls=5,usec=4,usec_per_call=0.80,rejected_calls=1,failed_calls=0\r\n",
			map[string]CommandStat{"fcall": {12, 2}, "incrby": {5, 0}}},
		{"Redis 6: no failed_calls", "cmdstat_evalsha:calls=3,usec=30,usec_per_call=10.00\n",
			map[string]CommandStat{"evalsha": {3, 0}}},
		{"a subcommand's name keeps its bar", "cmdstat_client|setname:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\n",
			map[string]CommandStat{"client|setname": {1, 0}}},
		{"no stats", "# Commandstats\r\n", map[string]CommandStat{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseCommandStats(tc.info)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s: got %+v, want %+v", k, got[k], v)
				}
			}
		})
	}
}

// CommandStats reads a real server's counts: a command that ran, one
// that failed.
func TestCommandStats(t *testing.T) {
	s := Standalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := s.Client()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	setK(ctx, t, c, "")
	setK(ctx, t, c, "")
	if err := c.IncrBy(ctx, "k", 1).Err(); err == nil {
		t.Fatal("INCRBY of a string that is not a number did not fail")
	}
	stats := CommandStats(t, c)
	if got := stats["set"]; got.Calls != 2 || got.Failed != 0 {
		t.Errorf("set: %+v, want 2 calls", got)
	}
	if got := stats["incrby"]; got.Calls != 1 || got.Failed != 1 {
		t.Errorf("incrby: %+v, want 1 call, 1 failed", got)
	}
	if got := CommandCalls(t, c)["set"]; got != 2 {
		t.Errorf("CommandCalls set: %d, want 2", got)
	}
}

// TestAlignShardIDs: a replica saved with another shard-id than its
// primary's gets the primary's; other lines, and files without shard-ids,
// stay as they are.
func TestAlignShardIDs(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{
			"replica diverged",
			"a 127.0.0.1:1@2,,tls-port=0,shard-id=S1 myself,master - 0 0 1 connected 0-5460\n" +
				"b 127.0.0.1:3@4,,tls-port=0,shard-id=S2 slave a 0 0 1 connected\nvars currentEpoch 1 lastVoteEpoch 0\n",
			"a 127.0.0.1:1@2,,tls-port=0,shard-id=S1 myself,master - 0 0 1 connected 0-5460\n" +
				"b 127.0.0.1:3@4,,tls-port=0,shard-id=S1 slave a 0 0 1 connected\nvars currentEpoch 1 lastVoteEpoch 0\n",
		},
		{
			"replica listed first",
			"b 127.0.0.1:3@4,,tls-port=0,shard-id=S2 myself,slave a 0 0 1 connected\n" +
				"a 127.0.0.1:1@2,,tls-port=0,shard-id=S1 master - 0 0 1 connected 0-5460\n",
			"b 127.0.0.1:3@4,,tls-port=0,shard-id=S1 myself,slave a 0 0 1 connected\n" +
				"a 127.0.0.1:1@2,,tls-port=0,shard-id=S1 master - 0 0 1 connected 0-5460\n",
		},
		{
			"consistent",
			"a 127.0.0.1:1@2,,shard-id=S1 master - 0 0 1 connected 0-5460\nb 127.0.0.1:3@4,,shard-id=S1 slave a 0 0 1 connected\n",
			"a 127.0.0.1:1@2,,shard-id=S1 master - 0 0 1 connected 0-5460\nb 127.0.0.1:3@4,,shard-id=S1 slave a 0 0 1 connected\n",
		},
		{
			"no shard-ids (Redis 7.0)",
			"a 127.0.0.1:1@2 master - 0 0 1 connected 0-5460\nb 127.0.0.1:3@4 slave a 0 0 1 connected\n",
			"a 127.0.0.1:1@2 master - 0 0 1 connected 0-5460\nb 127.0.0.1:3@4 slave a 0 0 1 connected\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nodes.conf")
			if err := os.WriteFile(path, []byte(tt.in), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := alignShardIDs(path); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	if err := alignShardIDs(filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Errorf("a missing file: %v", err)
	}
}
