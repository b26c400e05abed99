package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// reshardLimit is the limit of the binding rule of every reshardNodes
// entry: a descriptor admits exactly this many calls of cost 1.
const reshardLimit = 20

// reshardNodes are the descriptors driven through a slot move: every
// algorithm alone, and multi-rule nodes mixing them. The first rule of
// each binds (the others have higher limits); periods are long and the
// clock is fixed, so nothing refills while a test runs.
var reshardNodes = []struct {
	name  string
	rules []limit.Rule
}{
	{"fixed window", []limit.Rule{{Unit: limit.Day, Limit: reshardLimit}}},
	{"fixed window, calendar", []limit.Rule{{Unit: limit.Day, Limit: reshardLimit, Location: time.UTC}}},
	{"sliding window", []limit.Rule{{Algorithm: limit.SlidingWindow, Unit: limit.Day, Limit: reshardLimit}}},
	{"sliding log", []limit.Rule{{Algorithm: limit.SlidingLog, Unit: limit.Day, Limit: reshardLimit}}},
	{"token bucket", []limit.Rule{{Algorithm: limit.TokenBucket, Unit: limit.Day, Limit: reshardLimit}}},
	{"leaky bucket", []limit.Rule{{Algorithm: limit.LeakyBucket, Unit: limit.Day, Limit: reshardLimit}}},
	{"gcra", []limit.Rule{{Algorithm: limit.GCRA, Unit: limit.Day, Limit: reshardLimit}}},
	{"3 fixed windows", []limit.Rule{
		{Unit: limit.Hour, Limit: reshardLimit},
		{Unit: limit.Day, Limit: reshardLimit + 3},
		{Unit: limit.Hour, Multiplier: 6, Limit: reshardLimit + 6},
	}},
	{"token bucket + sliding window + fixed window", []limit.Rule{
		{Algorithm: limit.TokenBucket, Unit: limit.Day, Limit: reshardLimit},
		{Algorithm: limit.SlidingWindow, Unit: limit.Day, Limit: reshardLimit + 3},
		{Unit: limit.Day, Limit: reshardLimit + 6},
	}},
	{"sliding log + fixed window", []limit.Rule{
		{Algorithm: limit.SlidingLog, Unit: limit.Day, Limit: reshardLimit},
		{Unit: limit.Hour, Limit: reshardLimit + 3},
	}},
	{"sliding log + token bucket", []limit.Rule{
		{Algorithm: limit.SlidingLog, Unit: limit.Day, Limit: reshardLimit},
		{Algorithm: limit.TokenBucket, Unit: limit.Day, Limit: reshardLimit + 3},
	}},
}

// reshardCluster shapes the clusters the reshard tests move slots on: no
// failover there, so a node starved of CPU on a loaded machine (a CI run
// of every package at once) is not failed over in the middle of a move
// after the default 1 s, which made every node answer CLUSTERDOWN.
var reshardCluster = redistest.ClusterOptions{NodeTimeout: 15 * time.Second}

// reshardBackend is a backend on c with the function library (the
// binary's default) and a clock that stands still.
func reshardBackend(t *testing.T, c *redistest.ClusterSet) *Backend {
	opts := clusterOptions(c)
	opts.Functions = true
	opts.KeyPrefix = "rs:"
	now := time.Now()
	opts.FakeRedisClock = func() time.Time { return now }
	return newBackend(t, opts)
}

// tally counts one descriptor's decisions and the calls that failed.
type tally struct {
	name, identity string
	rules          []limit.Rule

	mu              sync.Mutex
	calls, admitted int
	duringMove      int  // calls before moveDone was set
	moveDone        bool // set by the test, with no call in flight
	failed          []error
}

// decide sends one call of cost 1 for the descriptor and counts it.
func (tl *tally) decide(b *Backend) {
	r := b.Decide(context.Background(), []backend.Check{{Identity: tl.identity, Rules: tl.rules, Cost: limit.Cost{N: 1}}})[0]
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.calls++
	if !tl.moveDone {
		tl.duringMove++
	}
	switch {
	case r.Err != nil:
		tl.failed = append(tl.failed, r.Err)
	case r.Allowed:
		tl.admitted++
	}
}

// check fails t unless exactly reshardLimit calls were admitted and none
// failed.
func (tl *tally) check(t *testing.T) {
	t.Helper()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.failed) > 0 {
		t.Errorf("%s: %d of %d calls failed; first: %v", tl.name, len(tl.failed), tl.calls, tl.failed[0])
	}
	if tl.admitted != reshardLimit {
		t.Errorf("%s: admitted %d of %d calls (%d while its slot moved), want exactly the limit, %d", tl.name, tl.admitted, tl.calls, tl.duringMove, reshardLimit)
	}
}

// fillSlot writes plain keys into the descriptor's slot (its hash tag),
// after its own, so that the slot holds keys to migrate before and after
// the descriptor's whatever order GETKEYSINSLOT lists them in.
func fillSlot(t *testing.T, c *redistest.ClusterSet, identity string, n int) {
	t.Helper()
	cl := c.Client()
	for i := range n {
		if err := cl.Set(context.Background(), fmt.Sprintf("filler{%s}:%d", identity, i), "x", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReshardByHandExact moves the slot of each descriptor by the steps of
// redis-cli --cluster reshard, one at a time, with two calls between every
// two steps, in two orders of the slot's keys: the descriptor's own keys
// (counter key first) before six unrelated keys of its slot, and after them
// (counter key last). Half the limit taken before the move, the calls
// during and after it must admit exactly the other half, none may fail,
// and every MIGRATE must succeed (no BUSYKEY: the target holds no key of
// the slot before the slot's keys reach it). A descriptor with a sliding
// log has two keys: while one is migrated and the other not, Redis refuses
// its call with TRYAGAIN and the backend sends it again, so its calls
// between two steps do not hold the move up: they run beside the next
// steps (as calls run beside redis-cli's MIGRATEs), and must succeed once
// its keys are on one node.
func TestReshardByHandExact(t *testing.T) {
	c := redistest.Cluster(t, reshardCluster)
	b := reshardBackend(t, c)
	orders := []struct {
		name  string
		order func([]string)
	}{
		// "filler{...}" sorts before "rs:{...}", and the counter key
		// "rs:{id}" before its window and log keys "rs:{id}:...".
		{"own keys last", func(ks []string) { slices.Sort(ks) }},
		{"own keys first", func(ks []string) { slices.Sort(ks); slices.Reverse(ks) }},
	}
	n := 0
	for _, order := range orders {
		for _, node := range reshardNodes {
			n++
			t.Run(order.name+"/"+node.name, func(t *testing.T) {
				tl := &tally{name: node.name, identity: fmt.Sprintf("byhand|%d", n), rules: node.rules}
				for range reshardLimit / 2 {
					tl.decide(b)
				}
				fillSlot(t, c, tl.identity, 6)
				slot := redistest.Slot(tl.identity)
				from, err := c.MasterOf(slot)
				if err != nil {
					t.Fatal(err)
				}
				var to string
				for _, m := range c.Masters() {
					if m != from {
						to = m
						break
					}
				}
				multiKey := false
				for _, r := range node.rules {
					multiKey = multiKey || r.Algorithm == limit.SlidingLog
				}
				var calls sync.WaitGroup
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				err = c.MoveSlot(ctx, slot, to, redistest.MoveOptions{
					Between: func(redistest.MoveStep) error {
						if multiKey {
							calls.Go(func() { tl.decide(b) })
							calls.Go(func() { tl.decide(b) })
							return nil
						}
						tl.decide(b)
						tl.decide(b)
						return nil
					},
					Order: order.order,
				})
				calls.Wait()
				tl.mu.Lock()
				tl.moveDone = true
				tl.mu.Unlock()
				if err != nil {
					var me *redistest.MoveError
					if errors.As(err, &me) && me.Busy() {
						t.Errorf("the move stopped with BUSYKEY: %v", err)
					} else {
						t.Errorf("the move failed: %v", err)
					}
				}
				for tl.calls < 3*reshardLimit {
					tl.decide(b)
				}
				tl.check(t)
			})
		}
	}
}

// TestReshardUnderLoad runs the real redis-cli --cluster reshard, one key
// per MIGRATE, moving the slots of one descriptor of each reshardNodes
// entry from one master to another while a goroutine per descriptor keeps
// calling. Half of each limit is taken before; each descriptor must admit
// exactly its limit in all, no call may fail, and the reshard must
// complete (redis-cli stops at a MIGRATE refused with BUSYKEY).
func TestReshardUnderLoad(t *testing.T) {
	c := redistest.Cluster(t, reshardCluster)
	b := reshardBackend(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	masters := c.Masters()
	from, to := masters[0], masters[1]
	slots, err := c.SlotsOf(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	// redis-cli moves the source's lowest slots first: one descriptor in
	// each of the first len(reshardNodes).
	tallies := make([]*tally, len(reshardNodes))
	for i, node := range reshardNodes {
		id := ""
		for k := 0; id == ""; k++ {
			if s := fmt.Sprintf("load|%d|%d", i, k); redistest.Slot(s) == slots[i] {
				id = s
			}
		}
		tallies[i] = &tally{name: node.name, identity: id, rules: node.rules}
		for range reshardLimit / 2 {
			tallies[i].decide(b)
		}
		fillSlot(t, c, id, 100)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, tl := range tallies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				tl.decide(b)
			}
		}()
	}
	out, err := c.Reshard(ctx, from, to, len(reshardNodes), 1)
	close(done)
	wg.Wait()
	if err != nil {
		if strings.Contains(out, "BUSYKEY") {
			t.Errorf("the reshard stopped with BUSYKEY: %v", err)
		} else {
			t.Errorf("the reshard failed: %v", err)
		}
	}
	for _, tl := range tallies {
		tl.moveDone = true
		for tl.calls < 3*reshardLimit+tl.duringMove {
			tl.decide(b)
		}
		t.Logf("%s: %d calls while the slots moved", tl.name, tl.duringMove)
		tl.check(t)
	}
}
