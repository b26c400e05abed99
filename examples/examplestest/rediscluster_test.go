package examplestest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
)

// startClusterNode starts a cluster-enabled redis-server on 127.0.0.1:port
// and stops it (by its PID) when the test ends.
func startClusterNode(t *testing.T, bin string, port int) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-node-timeout", "5000",
		"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// freeClusterPorts finds n ports on 127.0.0.1 that are free together with
// their cluster bus ports (port+10000).
func freeClusterPorts(t *testing.T, n int) []int {
	t.Helper()
	free := func(p int) bool {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	var out []int
	for p := 20000 + rand.IntN(20000); len(out) < n && p < 50000; p++ {
		if free(p) && free(p+10000) {
			out = append(out, p)
		}
	}
	if len(out) < n {
		t.Fatalf("found only %d free port pairs", len(out))
	}
	return out
}

// TestRedisClusterInitScript runs deploy/redis-cluster-init.sh, the script
// docker-compose.yml's redis-cluster-init service runs, against six real
// redis-server processes: it must form a healthy three-master cluster, and
// a second run must leave it alone.
func TestRedisClusterInitScript(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a real Redis Cluster")
	}
	redistest.Require(t)
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"sh", "getent"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	ports := freeClusterPorts(t, 6)
	var nodes []string
	for _, p := range ports {
		startClusterNode(t, server, p)
		nodes = append(nodes, "127.0.0.1:"+strconv.Itoa(p))
	}

	run := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", repoPath(t, "deploy/redis-cluster-init.sh"))
		cmd.Env = append(cmd.Environ(),
			"REDIS_NODES="+strings.Join(nodes, " "),
			"REDIS_WAIT_SECONDS=30")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cluster-init.sh: %v\n%s", err, out)
		}
		return string(out)
	}
	clusterInfo := func(node string) map[string]string {
		t.Helper()
		host, port, _ := net.SplitHostPort(node)
		out, err := exec.Command(cli, "-h", host, "-p", port, "cluster", "info").Output()
		if err != nil {
			t.Fatalf("cluster info on %s: %v", node, err)
		}
		info := map[string]string{}
		for _, l := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
				info[k] = v
			}
		}
		return info
	}

	if out := run(); !strings.Contains(out, "cluster formed") {
		t.Errorf("first run did not form the cluster:\n%s", out)
	}
	for _, n := range nodes {
		info := clusterInfo(n)
		got := fmt.Sprintf("state=%s slots=%s known=%s size=%s",
			info["cluster_state"], info["cluster_slots_assigned"], info["cluster_known_nodes"], info["cluster_size"])
		if want := "state=ok slots=16384 known=6 size=3"; got != want {
			t.Errorf("%s: %s, want %s", n, got, want)
		}
	}
	if out := run(); !strings.Contains(out, "already formed") {
		t.Errorf("second run did not see the existing cluster:\n%s", out)
	}
}

// TestRedisClusterInitScriptGivesUp: a node that never answers PING makes
// the script give up after REDIS_WAIT_SECONDS tries, naming the node,
// instead of waiting forever or going on to form a cluster.
func TestRedisClusterInitScriptGivesUp(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		redistest.Require(t)
	}
	port := freeClusterPorts(t, 1)[0] // nothing listens there
	node := "127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", repoPath(t, "deploy/redis-cluster-init.sh"))
	cmd.Env = append(cmd.Environ(), "REDIS_NODES="+node, "REDIS_WAIT_SECONDS=2")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("redis-cluster-init.sh: %v, want exit status 1\n%s", err, out)
	}
	if want := "redis-cluster-init: " + node + " does not answer PING"; !strings.Contains(string(out), want) {
		t.Errorf("output %q, want it to say %q", out, want)
	}
}
