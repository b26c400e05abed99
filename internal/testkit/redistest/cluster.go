package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ClusterOptions shapes a test cluster.
type ClusterOptions struct {
	// Masters is the number of masters; 0 means 3 (the fewest Redis
	// Cluster accepts). Each master gets one replica.
	Masters int
	// NodeTimeout is cluster-node-timeout: how long a silent master stays
	// up before the cluster fails it over. 0 means 1s, so failover tests
	// finish in a few seconds.
	NodeTimeout time.Duration
	// Args are extra redis-server options for every node, e.g.
	// "--requirepass", "secret".
	Args []string
}

// ClusterSet is a running Redis Cluster: Masters() masters, each with one
// replica, all slots assigned.
type ClusterSet struct {
	root  string
	opts  ClusterOptions
	nodes []*process

	clients clientList
}

// clusterTimeout bounds creating the cluster and waiting for a failover.
const clusterTimeout = 30 * time.Second

// Cluster starts a cluster and stops it when t ends. It skips t if
// redis-server is not installed and fails t if the cluster does not form.
func Cluster(t testing.TB, opts ClusterOptions) *ClusterSet {
	t.Helper()
	c, err := StartCluster(opts)
	return started(t, "redis cluster", c, err)
}

// EachCoverage runs fn in two subtests, each on a cluster of its own built
// from opts: one requiring full slot coverage (Redis's default: while a
// master is down and not yet replaced, every node answers CLUSTERDOWN) and
// one with --cluster-require-full-coverage no (the other masters keep
// serving their slots). fullCoverage says which one fn runs on.
func EachCoverage(t *testing.T, opts ClusterOptions, fn func(t *testing.T, c *ClusterSet, fullCoverage bool)) {
	for _, tt := range []struct {
		name         string
		args         []string
		fullCoverage bool
	}{
		{"full coverage required (Redis default)", nil, true},
		{"full coverage not required", []string{"--cluster-require-full-coverage", "no"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.Args = append(append([]string(nil), opts.Args...), tt.args...)
			fn(t, Cluster(t, o), tt.fullCoverage)
		})
	}
}

// StartCluster is Cluster for callers without a testing.TB; the caller must
// Close the cluster. A cluster that does not become healthy within
// clusterTimeout (gossip starved of CPU on a loaded machine, such as a CI
// run of every package at once) is stopped and started once more on fresh
// ports; the error says both attempts' reasons.
func StartCluster(opts ClusterOptions) (*ClusterSet, error) {
	c, err := startCluster(opts)
	var unhealthy *unhealthyError
	if !errors.As(err, &unhealthy) {
		return c, err
	}
	c, again := startCluster(opts)
	if again != nil {
		return nil, fmt.Errorf("%w; started again: %w", err, again)
	}
	return c, nil
}

// unhealthyError is a cluster that formed but did not become healthy.
type unhealthyError struct{ err error }

func (e *unhealthyError) Error() string { return e.err.Error() }
func (e *unhealthyError) Unwrap() error { return e.err }

// startCluster is one attempt of StartCluster.
func startCluster(opts ClusterOptions) (*ClusterSet, error) {
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = time.Second
	}
	cli, err := cliBinary()
	if err != nil {
		return nil, err
	}
	if _, err := serverBinary(); err != nil {
		return nil, err
	}
	root, err := tempRoot()
	if err != nil {
		return nil, err
	}
	c := &ClusterSet{root: root, opts: opts}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()

	// Start the nodes concurrently: each waits for its own PING.
	n := opts.Masters * 2
	c.nodes = make([]*process, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "node" + strconv.Itoa(i)
			dir := root + "/" + name
			conf := func(port, busPort int) []string {
				return append(baseConfig(dir, port),
					"cluster-enabled yes",
					"cluster-config-file nodes.conf",
					"cluster-node-timeout "+strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
					"cluster-port "+strconv.Itoa(busPort),
				)
			}
			c.nodes[i], errs[i] = newProcess(root, name, conf, true, false, opts.Args)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	args := []string{"--cluster", "create"}
	for _, p := range c.nodes {
		args = append(args, p.addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	args = append(args, cliAuthArgs(opts.Args)...)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		err = fmt.Errorf("%s --cluster create: %w\n%s", CLIName(), err, out)
		if ctx.Err() != nil {
			// Still "Waiting for the cluster to join" at the deadline:
			// gossip starved of CPU, as WaitHealthy's timeout below.
			return nil, &unhealthyError{err}
		}
		return nil, err
	}
	if err := c.WaitHealthy(clusterTimeout); err != nil {
		return nil, &unhealthyError{err}
	}
	ok = true
	return c, nil
}

// cliAuthArgs passes a --requirepass found in the node options on to
// redis-cli.
func cliAuthArgs(args []string) []string {
	for i, a := range args {
		if a == "--requirepass" && i+1 < len(args) {
			return []string{"-a", args[i+1], "--no-auth-warning"}
		}
	}
	return nil
}

// password returns the --requirepass value of the node options, if any.
func (c *ClusterSet) password() string {
	if a := cliAuthArgs(c.opts.Args); a != nil {
		return a[1]
	}
	return ""
}

// Addrs lists every node, masters and replicas, killed or not.
func (c *ClusterSet) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		out[i] = p.addr()
	}
	return out
}

// PID returns the process id of the node at addr, 0 if unknown or stopped.
func (c *ClusterSet) PID(addr string) int {
	if p := c.node(addr); p != nil {
		return p.pid()
	}
	return 0
}

func (c *ClusterSet) node(addr string) *process {
	for _, p := range c.nodes {
		if p.addr() == addr {
			return p
		}
	}
	return nil
}

// adminClient opens a short-lived client to one node.
func (c *ClusterSet) adminClient(addr string) *redis.Client { return adminClient(addr, c.password()) }

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string
	master   bool
	failed   bool
	slots    [][2]int
}

// nodesView asks the first live node for CLUSTER NODES.
func (c *ClusterSet) nodesView(ctx context.Context) ([]clusterNode, error) {
	var lastErr error = errors.New("no live node")
	for _, p := range c.nodes {
		if !p.running() {
			continue
		}
		cl := c.adminClient(p.addr())
		s, err := cl.ClusterNodes(ctx).Result()
		_ = cl.Close()
		if err != nil {
			lastErr = err
			continue
		}
		return parseClusterNodes(s), nil
	}
	return nil, lastErr
}

func parseClusterNodes(s string) []clusterNode {
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := clusterNode{id: f[0], addr: f[1]}
		if i := strings.IndexAny(n.addr, "@,"); i >= 0 {
			n.addr = n.addr[:i]
		}
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "master":
				n.master = true
			case "fail", "fail?", "noaddr":
				n.failed = true
			}
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			lo, hi, found := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if found {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil {
				n.slots = append(n.slots, [2]int{a, b})
			}
		}
		out = append(out, n)
	}
	return out
}

// Masters lists the current masters that serve slots, as the cluster sees
// them now (after a failover the promoted replica is listed).
func (c *ClusterSet) Masters() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.nodesView(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range nodes {
		if n.master && !n.failed && len(n.slots) > 0 {
			out = append(out, n.addr)
		}
	}
	return out
}

// MasterOf returns the address of the live master serving slot.
func (c *ClusterSet) MasterOf(slot int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.nodesView(ctx)
	if err != nil {
		return "", fmt.Errorf("cluster nodes: %w", err)
	}
	for _, n := range nodes {
		if !n.master || n.failed {
			continue
		}
		for _, r := range n.slots {
			if slot >= r[0] && slot <= r[1] {
				return n.addr, nil
			}
		}
	}
	return "", fmt.Errorf("no live master serves slot %d", slot)
}

// OnePerMaster calls key(0), key(1), ... until every master serving slots
// has one key whose slot it serves, and returns master → the i of that key
// (the first one found). It fails t when 1000 keys do not cover every
// master.
func (c *ClusterSet) OnePerMaster(t testing.TB, key func(i int) string) map[string]int {
	t.Helper()
	masters := c.Masters()
	out := map[string]int{}
	for i := 0; len(out) < len(masters) && i < 1000; i++ {
		slot, err := c.KeySlot(key(i))
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.MasterOf(slot)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := out[m]; !ok {
			out[m] = i
		}
	}
	if len(out) != len(masters) {
		t.Fatalf("found keys on %d of %d masters", len(out), len(masters))
	}
	return out
}

// WatchPromotion reports, once, how long after since the cluster first
// shows a master other than old serving slot (the promoted replica), or -1
// when it shows none within limit. It polls every 5ms in a goroutine of
// its own; the channel is buffered, so nobody has to read it.
func (c *ClusterSet) WatchPromotion(slot int, old string, since time.Time, limit time.Duration) <-chan time.Duration {
	promoted := make(chan time.Duration, 1)
	go func() {
		for time.Since(since) < limit {
			if m, err := c.MasterOf(slot); err == nil && m != old {
				promoted <- time.Since(since)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		promoted <- -1
	}()
	return promoted
}

// KeySlot returns the cluster slot of key, as the cluster computes it.
func (c *ClusterSet) KeySlot(key string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range c.nodes {
		if !p.running() {
			continue
		}
		cl := c.adminClient(p.addr())
		n, err := cl.ClusterKeySlot(ctx, key).Result()
		_ = cl.Close()
		if err == nil {
			return int(n), nil
		}
	}
	return 0, errors.New("CLUSTER KEYSLOT: no live node answered")
}

// KillMaster kills (SIGKILL) the master serving slot and returns its
// address. Its replica takes over after NodeTimeout; WaitHealthy waits for
// that.
func (c *ClusterSet) KillMaster(slot int) (string, error) {
	addr, err := c.MasterOf(slot)
	if err != nil {
		return "", err
	}
	p := c.node(addr)
	if p == nil {
		return "", fmt.Errorf("master %s is not one of this set's nodes", addr)
	}
	p.kill()
	return addr, nil
}

// RestartNode starts a killed node again on its port; it rejoins the
// cluster (as a replica of whoever took over its slots).
func (c *ClusterSet) RestartNode(addr string) error {
	p := c.node(addr)
	if p == nil {
		return fmt.Errorf("%s is not one of this set's nodes", addr)
	}
	if err := alignShardIDs(filepath.Join(p.dir, "nodes.conf")); err != nil {
		return err
	}
	return p.restart()
}

// alignShardIDs gives every replica line of a nodes.conf its primary's
// shard-id. Valkey 8.0 can save a replica with another shard-id than its
// primary's after a failover, then refuses to start from that file
// ("Unrecoverable error: corrupted cluster config file";
// valkey-io/valkey#2171, fixed in later versions by doing the same on
// load). A file without shard-ids (Redis 7.0) is left as it is.
func alignShardIDs(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("read %s: %w", path, err)
	}
	lines := strings.Split(string(b), "\n")
	shard := map[string]string{} // node id -> shard-id
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		if _, id, ok := strings.Cut(f[1], "shard-id="); ok {
			shard[f[0]], _, _ = strings.Cut(id, ",")
		}
	}
	changed := false
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.Contains(f[2], "slave") {
			continue
		}
		own, want := shard[f[0]], shard[f[3]]
		if own == "" || want == "" || own == want {
			continue
		}
		lines[i] = strings.Replace(line, "shard-id="+own, "shard-id="+want, 1)
		changed = true
	}
	if !changed {
		return nil
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WaitHealthy waits until every live node reports cluster_state:ok with all
// slots assigned, every slot is served by a live master, and every live
// replica's link to its master is up.
func (c *ClusterSet) WaitHealthy(timeout time.Duration) error {
	return waitFor(timeout, "cluster healthy", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		live := 0
		for _, p := range c.nodes {
			if !p.running() {
				continue
			}
			live++
			cl := c.adminClient(p.addr())
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && !strings.Contains(info, "cluster_state:ok") {
				err = fmt.Errorf("%s: cluster_state not ok", p.addr())
			}
			if err == nil && !strings.Contains(info, "cluster_slots_ok:16384") {
				err = fmt.Errorf("%s: not all slots ok", p.addr())
			}
			var repl string
			if err == nil {
				repl, err = cl.Info(ctx, "replication").Result()
			}
			_ = cl.Close()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("%s: replica link down", p.addr())
			}
		}
		nodes, err := c.nodesView(ctx)
		if err != nil {
			return err
		}
		served := 0
		known := 0
		for _, n := range nodes {
			if n.failed {
				continue
			}
			known++
			if !n.master || c.node(n.addr) == nil || !c.node(n.addr).running() {
				continue
			}
			for _, r := range n.slots {
				served += r[1] - r[0] + 1
			}
		}
		if served != 16384 {
			return fmt.Errorf("live masters serve %d of 16384 slots", served)
		}
		if known < live {
			return fmt.Errorf("cluster knows %d healthy nodes, %d are running", known, live)
		}
		return nil
	})
}

// Client returns a go-redis cluster client seeded with every node, closed
// with the set.
func (c *ClusterSet) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		Password:                 c.password(),
		DialTimeout:              time.Second,
		ReadTimeout:              5 * time.Second,
		WriteTimeout:             5 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	c.clients.add(cl)
	return cl
}

// NodeClient returns a plain client for one node (e.g. to read INFO
// commandstats or run SCRIPT FLUSH there), closed with the set.
func (c *ClusterSet) NodeClient(addr string) *redis.Client {
	cl := c.adminClient(addr)
	c.clients.add(cl)
	return cl
}

// Close closes the clients handed out, stops every node by PID and removes
// the files. It is safe to call more than once.
func (c *ClusterSet) Close() {
	c.clients.closeAll()
	var wg sync.WaitGroup
	for _, p := range c.nodes {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop()
		}()
	}
	wg.Wait()
	_ = os.RemoveAll(c.root)
}
