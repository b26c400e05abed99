package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// declaredEnv is what each of declaredKinds runs on: a backend with the
// defaults, one whose pipelines wait for mergeN calls (so that calls
// queued together are merged), and the descriptors, one per reshardNodes
// entry.
type declaredEnv struct {
	b, merge *Backend
	checks   []backend.Check
}

// mergeN is how many queued calls of one descriptor the merge backend
// sends in one pipeline, merged into one script call.
const mergeN = 3

// queuedNow is how many calls wait in b's coalescing queues.
func queuedNow(b *Backend) int {
	if b.co.single != nil {
		_, q := queueState(b)
		return q
	}
	b.co.mu.RLock()
	defer b.co.mu.RUnlock()
	n := 0
	for _, nd := range b.co.nodes {
		n += queued(nd)
	}
	return n
}

// declaredKinds are the kinds of call TestEveryKeyDeclared makes.
var declaredKinds = []struct {
	name string
	run  func(t *testing.T, e declaredEnv)
}{
	{"single", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		for range 2 { // a new descriptor, then one with state
			for _, c := range checks {
				decideOK(t, b, c)
			}
		}
	}},
	{"peek", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		for _, c := range checks {
			c.Cost = limit.Cost{}
			decideOK(t, b, c)
		}
	}},
	{"denied", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		for _, c := range checks {
			c.Cost = limit.Cost{N: 10 * reshardLimit}
			decideOK(t, b, c)
		}
	}},
	{"refund", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		for _, c := range checks {
			c.Cost = limit.Cost{N: 1, Refund: true}
			decideOK(t, b, c)
		}
	}},
	{"charge", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		for _, c := range checks {
			c.Cost = limit.Cost{N: 2 * reshardLimit, Charge: true}
			decideOK(t, b, c)
		}
	}},
	{"limit override", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		for _, c := range checks {
			// Another unit for the binding rule: another rule id, whose
			// record lives beside the configured rules' ...
			over := append([]limit.Rule(nil), c.Rules...)
			over[0].Unit, over[0].Limit = limit.Minute, 7
			decideOK(t, b, backend.Check{Identity: c.Identity, Rules: over, Cost: limit.Cost{N: 1}})
			// ... and then the configured rules again, beside it.
			decideOK(t, b, c)
		}
	}},
	{"batch", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		for i, r := range b.Decide(context.Background(), checks) {
			if r.Err != nil {
				t.Errorf("batch check %d: %v", i, r.Err)
			}
		}
		// The same descriptors twice in one batch (repeat items).
		for i, r := range b.Decide(context.Background(), append(checks[:len(checks):len(checks)], checks...)) {
			if r.Err != nil {
				t.Errorf("repeated batch check %d: %v", i, r.Err)
			}
		}
	}},
	{"merged", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		_ = b
		for _, c := range checks {
			reqs := make([][]backend.Check, mergeN)
			for i := range reqs {
				reqs[i] = []backend.Check{c}
			}
			for i, ch := range queueAllBy(t, e.merge, reqs, func() int { return queuedNow(e.merge) }) {
				if r := <-ch; r[0].Err != nil {
					t.Errorf("merged request %d of %s: %v", i, c.Identity, r[0].Err)
				}
			}
		}
	}},
	{"together", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		if _, ok := b.DecideTogether(context.Background(), checks); !ok {
			// A cluster declines several checks: the service then decides
			// each alone and refunds the admitted ones when one is denied.
			for i, r := range b.Decide(context.Background(), checks) {
				if r.Err != nil {
					t.Errorf("check %d: %v", i, r.Err)
				}
				c := checks[i]
				c.Cost.Refund = true
				decideOK(t, b, c)
			}
			return
		}
		// One check denied: the others' takes are put back.
		deny := append([]backend.Check(nil), checks...)
		deny[len(deny)-1].Cost = limit.Cost{N: 10 * reshardLimit}
		res, _ := b.DecideTogether(context.Background(), deny)
		for i, r := range res {
			if r.Err != nil {
				t.Errorf("together check %d: %v", i, r.Err)
			}
		}
	}},
	{"reset", func(t *testing.T, e declaredEnv) {
		b, checks := e.b, e.checks
		for _, c := range checks {
			if err := b.Reset(context.Background(), c.Identity, c.Rules); err != nil {
				t.Errorf("reset %s: %v", c.Identity, err)
			}
		}
	}},
}

// decideOK decides one check and fails t if it could not be decided.
func decideOK(t *testing.T, b *Backend, c backend.Check) {
	t.Helper()
	if r := b.Decide(context.Background(), []backend.Check{c})[0]; r.Err != nil {
		t.Errorf("%s %+v: %v", c.Identity, c.Cost, r.Err)
	}
}

// TestEveryKeyDeclared reads MONITOR on every Redis node while the backend
// makes calls of every kind (declaredKinds) for descriptors of every
// algorithm and multi-rule node (reshardNodes), on a standalone Redis and
// on a cluster, with EVALSHA and with FCALL, and checks that every key a
// command run by the script touches is among the keys its call declared
// (Redis Cluster routes a script by those keys alone).
func TestEveryKeyDeclared(t *testing.T) {
	type node struct {
		addr   string
		client *goredis.Client
	}
	topologies := []struct {
		name  string
		start func(t *testing.T) (Options, []node)
	}{
		{"standalone", func(t *testing.T) (Options, []node) {
			s := redistest.Standalone(t)
			return Options{URL: s.Addr()}, []node{{s.Addr(), s.Client()}}
		}},
		{"cluster", func(t *testing.T) (Options, []node) {
			c := cluster.Get(t)
			var nodes []node
			for _, m := range c.Masters() {
				nodes = append(nodes, node{m, c.NodeClient(m)})
			}
			return clusterOptions(c), nodes
		}},
	}
	for _, topo := range topologies {
		for _, functions := range []bool{false, true} {
			invoke := "evalsha"
			if functions {
				invoke = "fcall"
			}
			t.Run(topo.name+"/"+invoke, func(t *testing.T) {
				opts, nodes := topo.start(t)
				opts.Functions = functions
				opts.KeyPrefix = fmt.Sprintf("declared-%s-%s:", topo.name, invoke)
				now := time.Now()
				opts.FakeRedisClock = func() time.Time { return now }
				e := declaredEnv{b: newBackend(t, opts)}
				// Calls of one descriptor queued together go out together,
				// merged: queueAllBy queues them one by one, and the last
				// one fills the pipeline, which sends it.
				opts.PipelineWindow = time.Hour
				opts.PipelineLimit = mergeN
				opts.Timeout = 30 * time.Second
				e.merge = newBackend(t, opts)
				for i, n := range reshardNodes {
					e.checks = append(e.checks, backend.Check{Identity: fmt.Sprintf("declared|%d", i), Rules: n.rules, Cost: limit.Cost{N: 1}})
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				monitors := make([]*redistest.Monitor, len(nodes))
				for i, n := range nodes {
					monitors[i] = redistest.StartMonitor(t, n.addr, "")
				}
				for _, kind := range declaredKinds {
					t.Run(kind.name, func(t *testing.T) {
						kind.run(t, e)
						calls, commands := 0, 0
						var bad []string
						for i, n := range nodes {
							monitors[i].Sync(t, n.client)
							u, c, k, err := redistest.UndeclaredKeys(ctx, n.client, monitors[i].Take(t))
							if err != nil {
								t.Fatalf("%s: %v", n.addr, err)
							}
							calls, commands = calls+c, commands+k
							for _, x := range u {
								bad = append(bad, x.String())
							}
						}
						if calls == 0 || commands == 0 {
							t.Fatalf("MONITOR showed %d script calls running %d commands, want some", calls, commands)
						}
						if len(bad) > 0 {
							t.Errorf("%d of %d commands run by %d script calls touched undeclared keys; the first:\n%s",
								len(bad), commands, calls, strings.Join(bad[:min(len(bad), 5)], "\n"))
						}
					})
				}
			})
		}
	}
}
