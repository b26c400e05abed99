package redis

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The coalescer's state machine, without Redis: its send is fakeRedis,
// which reports every pipeline as it starts and finishes one only when the
// test releases it, so the tests decide what is in flight and what queues.

// fakeRedis is a coalescer's send that holds each pipeline until released.
type fakeRedis struct {
	started chan []*call  // each pipeline's calls, as it starts
	release chan struct{} // one receive finishes one pipeline
	// answer, when set, replies to each call; else every call gets the
	// reply of one admitted rule.
	answer func(*call)
	// senders, when set, receives who sent each pipeline, as it starts:
	// "lane" (a lane goroutine) or "caller" (a Decide's own goroutine).
	senders chan string
}

func newFakeRedis() *fakeRedis {
	return &fakeRedis{started: make(chan []*call, 64), release: make(chan struct{})}
}

func (f *fakeRedis) send(ctx context.Context, calls []*call) {
	if f.senders != nil {
		f.senders <- sender()
	}
	f.started <- slices.Clone(calls)
	select {
	case <-f.release:
	case <-ctx.Done():
	}
	for _, c := range calls {
		if err := ctx.Err(); err != nil {
			c.cmd.SetErr(err)
			continue
		}
		if f.answer != nil {
			f.answer(c)
			continue
		}
		c.cmd.SetVal([]int64{0, 0}) // one rule admitted, nothing left
	}
}

// sender names the goroutine running it: "lane" for a lane goroutine,
// else "caller".
func sender() string {
	buf := make([]byte, 64<<10)
	if strings.Contains(string(buf[:runtime.Stack(buf, false)]), ").lane(") {
		return "lane"
	}
	return "caller"
}

// next returns the calls of the next pipeline to start.
func (f *fakeRedis) next(t *testing.T) []*call {
	t.Helper()
	select {
	case b := <-f.started:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no pipeline started")
		return nil
	}
}

// none checks that no pipeline has started (and none is about to: callers
// waited on are done).
func (f *fakeRedis) none(t *testing.T) {
	t.Helper()
	select {
	case b := <-f.started:
		t.Fatalf("unexpected pipeline of %d calls", len(b))
	default:
	}
}

// testCoalescer returns a coalescer on fakeRedis, closed when t ends.
func testCoalescer(t *testing.T, cluster bool, lanes, limit int) (*coalescer, *fakeRedis) {
	f := newFakeRedis()
	ctx, cancel := context.WithCancel(context.Background())
	c := newCoalescer(ctx, Options{PipelineLimit: limit, pipelineLanes: lanes, Timeout: time.Minute}, cluster, f.send)
	t.Cleanup(func() {
		c.close()
		cancel()
		c.lanesWG.Wait()
	})
	return c, f
}

// testJob returns a job of one Decide: calls calls per node address (""
// when not a cluster), each call with its own command.
func testJob(calls int, addrs ...string) *job {
	if len(addrs) == 0 {
		addrs = []string{""}
	}
	j := &job{calls: make([]call, calls*len(addrs))}
	for i := range j.calls {
		j.calls[i].argv = []any{"evalsha", "sha", 0}
		j.ptrs = append(j.ptrs, &j.calls[i])
	}
	for i, a := range addrs {
		j.groups = append(j.groups, group{addr: a, calls: j.ptrs[i*calls : (i+1)*calls]})
	}
	return j
}

// decision is what coalescer.decide returned for one job.
type decision struct {
	abandoned bool
	why       error
}

// decideAsyncJob runs c.decide for j on its own goroutine.
func decideAsyncJob(ctx context.Context, c *coalescer, j *job) <-chan decision {
	out := make(chan decision, 1)
	go func() {
		a, why := c.decide(ctx, j)
		out <- decision{a, why}
	}()
	return out
}

// wait returns the decision, failing t if it does not come.
func wait(t *testing.T, ch <-chan decision) decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("decide did not return")
		return decision{}
	}
}

// queued reads how many requests wait in n's queue.
func queued(n *node) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue)
}

// sameCalls reports whether got holds exactly the calls of the jobs, in
// order.
func sameCalls(got []*call, jobs ...*job) bool {
	var want []*call
	for _, j := range jobs {
		want = append(want, j.ptrs...)
	}
	return slices.Equal(got, want)
}

// replied checks that every call of j holds the fake reply.
func replied(t *testing.T, j *job) {
	t.Helper()
	for i, c := range j.ptrs {
		if c.err != nil || len(c.reply) != 2 {
			t.Errorf("call %d: err %v, reply %v; want the reply", i, c.err, c.reply)
		}
	}
}

// TestCoalescerLoneCallGoesAtOnce: with a lane free and no window, a
// Decide's calls go out at once, in one pipeline of their own, and no lane
// is left running after.
func TestCoalescerLoneCallGoesAtOnce(t *testing.T) {
	c, f := testCoalescer(t, false, 2, 128)
	j := testJob(3)
	done := decideAsyncJob(context.Background(), c, j)
	if got := f.next(t); !sameCalls(got, j) {
		t.Fatalf("pipeline of %d calls, want the Decide's 3", len(got))
	}
	f.release <- struct{}{}
	if d := wait(t, done); d.abandoned || d.why != nil {
		t.Fatalf("decide: %+v", d)
	}
	replied(t, j)
	if !c.single.idle() {
		t.Error("a lane or queue is left after the lone call")
	}
	f.none(t)
}

// TestCoalescerQueueJoinsOnePipeline: while every lane is busy, Decides
// queue, and the lane that comes back sends all of them in one pipeline.
func TestCoalescerQueueJoinsOnePipeline(t *testing.T) {
	c, f := testCoalescer(t, false, 1, 128)
	first := testJob(1)
	d0 := decideAsyncJob(context.Background(), c, first)
	if got := f.next(t); !sameCalls(got, first) {
		t.Fatal("first pipeline is not the first Decide's")
	}
	jobs := []*job{testJob(1), testJob(2), testJob(1)}
	var dones []<-chan decision
	for i, j := range jobs {
		dones = append(dones, decideAsyncJob(context.Background(), c, j))
		waitUntil(t, 10*time.Second, "queued", func() bool { return queued(c.single) == i+1 })
	}
	f.none(t)
	f.release <- struct{}{}
	wait(t, d0)
	if got := f.next(t); !sameCalls(got, jobs...) {
		t.Fatalf("second pipeline has %d calls, want the 4 queued, in order", len(got))
	}
	f.release <- struct{}{}
	for i, d := range dones {
		if r := wait(t, d); r.abandoned || r.why != nil {
			t.Errorf("decide %d: %+v", i, r)
		}
		replied(t, jobs[i])
	}
	f.none(t)
}

// TestCoalescerLimitSplitsBetweenDecides: a pipeline carries at most
// Limit commands, cut between Decides, never inside one: a Decide with
// more calls than Limit goes alone, whole.
func TestCoalescerLimitSplitsBetweenDecides(t *testing.T) {
	c, f := testCoalescer(t, false, 1, 2)
	first := testJob(1)
	d0 := decideAsyncJob(context.Background(), c, first)
	f.next(t)
	jobs := []*job{testJob(1), testJob(1), testJob(1), testJob(3), testJob(1)}
	var dones []<-chan decision
	for i, j := range jobs {
		dones = append(dones, decideAsyncJob(context.Background(), c, j))
		waitUntil(t, 10*time.Second, "queued", func() bool { return queued(c.single) == i+1 })
	}
	f.release <- struct{}{}
	wait(t, d0)
	for _, want := range [][]*job{{jobs[0], jobs[1]}, {jobs[2]}, {jobs[3]}, {jobs[4]}} {
		if got := f.next(t); !sameCalls(got, want...) {
			t.Fatalf("pipeline of %d calls, want the calls of %d Decides", len(got), len(want))
		}
		f.release <- struct{}{}
	}
	for i, d := range dones {
		wait(t, d)
		replied(t, jobs[i])
	}
	f.none(t)
}

// TestCoalescerCallerLeavesQueue: a caller whose context ends while its
// Decide is queued leaves at once, with the context's error, its calls
// marked left; the lane then skips them: they are never sent.
func TestCoalescerCallerLeavesQueue(t *testing.T) {
	c, f := testCoalescer(t, false, 1, 128)
	first := testJob(1)
	d0 := decideAsyncJob(context.Background(), c, first)
	f.next(t)
	ctx, cancel := context.WithCancel(context.Background())
	leaving := testJob(2)
	d1 := decideAsyncJob(ctx, c, leaving)
	waitUntil(t, 10*time.Second, "queued", func() bool { return queued(c.single) == 1 })
	cancel()
	r := wait(t, d1)
	if !r.abandoned || !errors.Is(r.why, context.Canceled) {
		t.Fatalf("leaving caller: %+v, want abandoned with context.Canceled", r)
	}
	for i, cl := range leaving.ptrs {
		if !cl.left {
			t.Errorf("call %d not marked left", i)
		}
	}
	f.release <- struct{}{}
	wait(t, d0)
	waitUntil(t, 10*time.Second, "the lane to stop", c.single.idle)
	f.none(t)
}

// TestCoalescerCloseFailsQueued: closing fails the queued Decides with
// errClosed without sending them, and every Decide after it at once.
func TestCoalescerCloseFailsQueued(t *testing.T) {
	c, f := testCoalescer(t, false, 1, 128)
	first := testJob(1)
	d0 := decideAsyncJob(context.Background(), c, first)
	f.next(t)
	queuedJob := testJob(2)
	d1 := decideAsyncJob(context.Background(), c, queuedJob)
	waitUntil(t, 10*time.Second, "queued", func() bool { return queued(c.single) == 1 })
	c.close()
	wait(t, d1)
	for i, cl := range queuedJob.ptrs {
		if !errors.Is(cl.err, errClosed) {
			t.Errorf("queued call %d: err %v, want errClosed", i, cl.err)
		}
	}
	after := testJob(1)
	wait(t, decideAsyncJob(context.Background(), c, after))
	if !errors.Is(after.ptrs[0].err, errClosed) {
		t.Errorf("Decide after close: err %v, want errClosed", after.ptrs[0].err)
	}
	f.release <- struct{}{} // the pipeline in flight finishes on its own
	wait(t, d0)
	replied(t, first)
	f.none(t)
}

// TestCoalescerNodesAreIndependent: with a cluster, each node has its own
// queue and lanes: a Decide's calls for two nodes split by node, and while
// one node's lanes are busy its calls queue but the other node's go out at
// once.
func TestCoalescerNodesAreIndependent(t *testing.T) {
	c, f := testCoalescer(t, true, 1, 128)
	onlyA := testJob(1, "a:1")
	d0 := decideAsyncJob(context.Background(), c, onlyA)
	if got := f.next(t); !sameCalls(got, onlyA) {
		t.Fatal("first pipeline is not node a's Decide")
	}
	both := testJob(1, "a:1", "b:1")
	d1 := decideAsyncJob(context.Background(), c, both)
	if got := f.next(t); len(got) != 1 || got[0] != both.ptrs[1] {
		t.Fatal("node b's call waited for node a")
	}
	nodeA := c.node("a:1", time.Now())
	waitUntil(t, 10*time.Second, "node a's call queued", func() bool { return queued(nodeA) == 1 })
	f.release <- struct{}{}
	f.release <- struct{}{}
	if got := f.next(t); len(got) != 1 || got[0] != both.ptrs[0] {
		t.Fatal("node a's queued call was not sent once its lane came back")
	}
	f.release <- struct{}{}
	wait(t, d0)
	wait(t, d1)
	replied(t, onlyA)
	replied(t, both)
	f.none(t)
}

// TestCoalescerQueueSentByLaneGoroutine: a lane that comes back to a
// queue passes it to a lane goroutine, whether the queued Decide waits on
// one node or on several, never to a queued caller's goroutine.
func TestCoalescerQueueSentByLaneGoroutine(t *testing.T) {
	for _, tt := range []struct {
		name  string
		addrs []string // the queued Decide's nodes; the first is busy
	}{
		{"one node", []string{"a:1"}},
		{"two nodes", []string{"a:1", "b:1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, f := testCoalescer(t, true, 1, 128)
			f.senders = make(chan string, 64)
			busy := testJob(1, "a:1")
			d0 := decideAsyncJob(context.Background(), c, busy)
			f.next(t)
			if by := <-f.senders; by != "caller" {
				t.Errorf("a lone Decide with a lane free was sent by a %s, want its caller", by)
			}
			queuedJob := testJob(1, tt.addrs...)
			d1 := decideAsyncJob(context.Background(), c, queuedJob)
			if len(tt.addrs) > 1 {
				f.next(t) // node b's call, at once
				<-f.senders
			}
			nodeA := c.node("a:1", time.Now())
			waitUntil(t, 10*time.Second, "queued on node a", func() bool { return queued(nodeA) == 1 })
			// Release every call in flight: node a's busy one and, with
			// two nodes, node b's, which wait on the same channel (one
			// release could go to either).
			for range len(tt.addrs) {
				f.release <- struct{}{}
			}
			wait(t, d0)
			if got := f.next(t); len(got) != 1 || got[0] != queuedJob.ptrs[0] {
				t.Fatal("node a's queued call was not sent once its lane came back")
			}
			if by := <-f.senders; by != "lane" {
				t.Errorf("the queued call was sent by a %s, want a lane goroutine", by)
			}
			f.release <- struct{}{} // node a's queued call
			if d := wait(t, d1); d.abandoned || d.why != nil {
				t.Fatalf("decide: %+v", d)
			}
			replied(t, queuedJob)
			waitUntil(t, 10*time.Second, "the lanes to end", nodeA.idle)
			f.none(t)
		})
	}
}

// TestCoalescerParkedLanesBounded: at most lanes lane goroutines park on a
// node; one more that empties the queue exits, and closing the coalescer
// stops the parked ones.
func TestCoalescerParkedLanesBounded(t *testing.T) {
	f, c := parkingCoalescer(t, false, 2)
	n := c.single
	for range 3 {
		startLane(n)
	}
	waitUntil(t, 10*time.Second, "two lanes parked, the third gone", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.parked == 2 && n.lanes == 0
	})
	c.close()
	lanesEnded(t, c)
	if parkedLanes(n) != 0 {
		t.Error("parked lanes are counted after close")
	}
	f.none(t)
}

// TestCoalescerParkedLaneExitsWhenIdle: a parked lane goroutine that is
// handed no lane for parkIdle exits, so a node that lost its traffic (a
// master that failed over) keeps no goroutine until it is pruned; the node
// still starts lanes afterwards.
func TestCoalescerParkedLaneExitsWhenIdle(t *testing.T) {
	f, c := parkingCoalescer(t, false, 2)
	c.parkIdle = 20 * time.Millisecond
	n := c.single
	for round := range 2 {
		for range 2 {
			startLane(n)
		}
		// Without the idle exit the two lanes stay parked until Close.
		lanesEnded(t, c)
		if p := parkedLanes(n); p != 0 {
			t.Fatalf("round %d: %d lanes counted as parked after they exited", round, p)
		}
	}
	c.close()
	f.none(t)
}

// parkingCoalescer returns a fake Redis and a coalescer sending to it, of
// lanes lanes per node (cluster: nodes by address), whose lane goroutines
// park; it is cancelled when the test ends.
func parkingCoalescer(t *testing.T, cluster bool, lanes int) (*fakeRedis, *coalescer) {
	t.Helper()
	f := newFakeRedis()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return f, newCoalescer(ctx, Options{PipelineLimit: 128, pipelineLanes: lanes, Timeout: time.Minute}, cluster, f.send)
}

// loneWithParkedLane parks a lane goroutine of c's node, then sends a
// Decide of one call while nothing else is in flight, which its caller
// must send itself (what must be true of it is said by when); it returns
// the node, the job and the Decide's outcome.
func loneWithParkedLane(t *testing.T, c *coalescer, f *fakeRedis, when string) (*node, *job, <-chan decision) {
	t.Helper()
	n := c.single
	startLane(n)
	waitUntil(t, 10*time.Second, "the lane to park", func() bool { return parkedLanes(n) == 1 })
	first := testJob(1)
	d0 := decideAsyncJob(context.Background(), c, first)
	f.next(t)
	if by := <-f.senders; by != "caller" {
		t.Errorf("%s, a Decide was sent by a %s, want its caller", when, by)
	}
	return n, first, d0
}

// lanesEnded waits, at most 10 seconds, until every lane of c has ended
// and no lane goroutine is left (parked ones included).
func lanesEnded(t *testing.T, c *coalescer) {
	t.Helper()
	ended := make(chan struct{})
	go func() {
		c.lanesWG.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("a lane goroutine is left")
	}
}

// parkedLanes reads how many lane goroutines of n are parked.
func parkedLanes(n *node) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parked
}

// startLane starts a lane goroutine on n, as startLocked does.
func startLane(n *node) {
	n.mu.Lock()
	n.lanes++
	n.c.lanesWG.Add(1)
	n.mu.Unlock()
	go n.lane()
}

// TestCoalescerParkedLaneTakesOver: a lane goroutine that empties the
// queue parks instead of exiting, and the next lane handed over goes to it
// rather than to a queued caller; closing the coalescer stops it.
func TestCoalescerParkedLaneTakesOver(t *testing.T) {
	f, c := parkingCoalescer(t, false, 1)
	f.senders = make(chan string, 64)
	n, _, d0 := loneWithParkedLane(t, c, f, "alone with a lane free")
	queuedJob := testJob(1)
	d1 := decideAsyncJob(context.Background(), c, queuedJob)
	waitUntil(t, 10*time.Second, "queued", func() bool { return queued(n) == 1 })
	f.release <- struct{}{}
	wait(t, d0)
	if got := f.next(t); !sameCalls(got, queuedJob) {
		t.Fatal("the queued Decide was not sent once the lane came back")
	}
	if by := <-f.senders; by != "lane" {
		t.Errorf("the queued Decide was sent by a %s, want the parked lane goroutine", by)
	}
	f.release <- struct{}{}
	wait(t, d1)
	replied(t, queuedJob)
	waitUntil(t, 10*time.Second, "the lane to park again", func() bool { return parkedLanes(n) == 1 && n.idle() })

	c.close()
	lanesEnded(t, c)
	f.none(t)
}

// TestCoalescerPrunedNodeParksNoLane: pruning an idle cluster node stops
// its parked lane goroutines, and a lane that runs on it afterwards (a
// caller still held it) exits instead of parking, since closing the
// coalescer no longer reaches the node.
func TestCoalescerPrunedNodeParksNoLane(t *testing.T) {
	f, c := parkingCoalescer(t, true, 2)
	now := time.Now()
	n := c.node("a:1", now)
	startLane(n)
	waitUntil(t, 10*time.Second, "the lane to park", func() bool { return parkedLanes(n) == 1 })

	c.mu.Lock()
	c.pruneLocked(now.Add(2 * idleNodeTTL))
	_, kept := c.nodes["a:1"]
	c.mu.Unlock()
	if kept {
		t.Fatal("the idle node was not pruned")
	}
	lanesEnded(t, c)
	if parkedLanes(n) != 0 {
		t.Fatal("a parked lane is counted after pruning")
	}
	startLane(n)
	lanesEnded(t, c)
	if parkedLanes(n) != 0 {
		t.Error("a lane parked on a pruned node")
	}
	c.close()
	f.none(t)
}

// TestCoalescerParkedLaneUnderLoad: with a pipeline in flight, a Decide
// that finds a lane free goes to a parked lane goroutine rather than
// being sent by its caller; with none in flight (light load) its caller
// sends it, without a hand-off.
func TestCoalescerParkedLaneUnderLoad(t *testing.T) {
	c, f := testCoalescer(t, false, 2, 128)
	f.senders = make(chan string, 64)
	n, first, d0 := loneWithParkedLane(t, c, f, "with nothing in flight")
	second := testJob(1)
	d1 := decideAsyncJob(context.Background(), c, second)
	if got := f.next(t); !sameCalls(got, second) {
		t.Fatal("the second Decide did not go out at once on the free lane")
	}
	if by := <-f.senders; by != "lane" {
		t.Errorf("with a pipeline in flight, a Decide was sent by a %s, want the parked lane goroutine", by)
	}
	f.release <- struct{}{}
	f.release <- struct{}{}
	wait(t, d0)
	wait(t, d1)
	replied(t, first)
	replied(t, second)
	waitUntil(t, 10*time.Second, "the lanes to end", n.idle)
	f.none(t)
}
