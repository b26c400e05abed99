package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Coalescing: concurrent Decide calls bound for the same Redis node share
// pipelines.
//
// Each node has a queue of requests (the calls of one Decide for that
// node) and at most lanes pipelines in flight. A request that arrives while
// a lane is free (with Window 0) is sent at once, alone: on an idle node
// by its own caller (node.lead), as without coalescing; while another
// pipeline is in flight, by a parked lane goroutine (below), if there is
// one. Requests that arrive while every lane
// is busy queue, and the first lane to come back takes them all (up to
// Limit commands) into its next pipeline. So under light load nothing waits
// and no goroutine hand-off is added, and under heavy load the pipelines
// grow by themselves, one round trip carrying many checks. A positive
// Window makes the queue wait that long after its first call for more,
// before a lane sends it.
//
// A lane that finds work queued when it comes back continues as a lane
// goroutine, which sends pipelines until the queue is empty and then parks
// (at most lanes of them per node) until a lane is handed to it again, or
// until it has waited parkIdle for one and exits (a node that lost its
// traffic, such as a failed master, keeps no goroutine). So under load the pipelines go out from a few long-lived goroutines, whose
// stacks have grown through go-redis once, instead of from the callers'
// goroutines or a new goroutine each busy spell, whose stacks grow anew
// (the garbage collector halves idle stacks). Callers wait on their
// request with their own deadline and context, so a caller never waits
// past its own deadline, and a caller that leaves early leaves its memory
// to the lane (its job is not pooled again).

// errClosed fails the calls queued when the backend closes.
var errClosed = errors.New("redis backend closed")

// errQueued fails calls that waited for a pipeline until their deadline.
var errQueued = fmt.Errorf("waited for a pipeline until the deadline: %w", context.DeadlineExceeded)

// request is the calls of one Decide bound for one node.
type request struct {
	calls    []*call
	addr     string    // the node's address; "" when not a cluster
	enq      time.Time // when it was queued
	deadline time.Time // enq + Timeout: the latest its pipeline may end
	state    atomic.Uint32
	done     chan struct{} // receives once when state becomes reqDone
}

// Request states. A request is queued, then sent (in a pipeline), then
// done (its calls' commands hold their replies). The caller may leave a
// queued or sent request (its context ended, or its deadline passed); the
// lane then skips it or drops its replies. Transitions are CAS, so exactly
// one of lane and caller owns the outcome.
const (
	reqQueued uint32 = iota
	reqSent
	reqDone
	reqLeft
)

func newRequest() *request { return &request{done: make(chan struct{}, 1)} }

// fail completes a request that could not be queued with err.
func (r *request) fail(err error) {
	for _, c := range r.calls {
		c.fail(err)
	}
	r.state.Store(reqDone)
	r.done <- struct{}{}
}

// finish marks a sent request done and wakes its caller, unless the caller
// left.
func (r *request) finish() {
	if r.state.CompareAndSwap(reqSent, reqDone) {
		r.done <- struct{}{}
	}
}

// coalescer holds the per-node queues of one Backend. It knows nothing of
// Redis: it hands each batch's calls to send, which sends them in one
// pipeline and returns when every call holds its reply or error (the
// Backend's exec). Its tests give it a send of their own.
type coalescer struct {
	send   func(ctx context.Context, calls []*call)
	window time.Duration
	limit  int // commands per pipeline
	lanes  int // pipelines in flight per node
	// mergeItems bounds the descriptors of a merged script call
	// (merge.go); below 2, a pipeline's calls are not merged.
	mergeItems int
	// byTag: calls are merged only with calls of their hash tag (a
	// cluster, where a script may touch the keys of one slot only).
	byTag bool
	// timeout bounds a Decide's wait, from its submission (Options.Timeout).
	timeout time.Duration
	// parkIdle is how long a parked lane goroutine waits to be handed a
	// lane before it exits (parkIdle; tests shorten it).
	parkIdle time.Duration

	ctx     context.Context // cancelled by Close
	lanesWG sync.WaitGroup

	single *node // the one node when not a cluster

	mu     sync.RWMutex
	nodes  map[string]*node // cluster masters by address; "" for unknown
	closed bool
}

// idleNodeTTL is how long a cluster node's queue outlives its last use.
// Queues are pruned when a new address appears (after a failover or a
// resharding moved slots, or a pod restarted under a new IP), so the map
// holds the masters in use plus those used within idleNodeTTL, not every
// address the cluster ever had.
const idleNodeTTL = time.Minute

// parkIdle is how long a parked lane goroutine waits for a lane before it
// exits: far longer than the gaps between pipelines under load, so a busy
// node keeps its goroutines, and short enough that an idle node (a master
// that failed over, a quiet spell) holds none for long.
const parkIdle = 2 * time.Second

// newCoalescer returns the coalescer of a backend with options o
// (normalized), whose pipelines send sends; cluster says whether calls are
// bound for several nodes (by address) or all for one. ctx ends with the
// backend: the lanes' pipelines run under it.
func newCoalescer(ctx context.Context, o Options, cluster bool, send func(ctx context.Context, calls []*call)) *coalescer {
	c := &coalescer{
		send:       send,
		window:     o.PipelineWindow,
		limit:      o.PipelineLimit,
		lanes:      o.pipelineLanes,
		mergeItems: o.mergeItems,
		byTag:      cluster,
		timeout:    o.Timeout,
		parkIdle:   parkIdle,
		ctx:        ctx,
		nodes:      map[string]*node{},
	}
	if c.mergeItems == 0 {
		c.mergeItems = maxMergeItems
	}
	if o.DisableMerging {
		c.mergeItems = 1
	}
	if !cluster {
		c.single = c.newNode("")
	}
	return c
}

// newNode returns the queue of the node at addr.
func (c *coalescer) newNode(addr string) *node {
	// Tokens pending: at most one per lane handed over, one per parked
	// goroutine stopped.
	return &node{c: c, addr: addr, wake: make(chan bool, 2*c.lanes)}
}

// node returns the queue of the node at addr, creating it on first use,
// and records its use at now (the caller's clock reading: no second one).
// It returns nil once the coalescer is closed.
func (c *coalescer) node(addr string, now time.Time) *node {
	if c.single != nil {
		return c.single
	}
	c.mu.RLock()
	n, closed := c.nodes[addr], c.closed
	c.mu.RUnlock()
	if closed {
		return nil
	}
	if n != nil {
		n.touch(now)
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if n = c.nodes[addr]; n == nil {
		c.pruneLocked(now)
		n = c.newNode(addr)
		c.nodes[addr] = n
	}
	n.touch(now)
	return n
}

// pruneLocked forgets the queues that have been idle (nothing queued, no
// pipeline in flight, no window timer armed) for idleNodeTTL. A caller
// still holding a pruned node can use it: it works on its own, outside the
// map. c.mu must be held for writing.
func (c *coalescer) pruneLocked(now time.Time) {
	for addr, n := range c.nodes {
		if now.UnixNano()-n.lastUsed.Load() > int64(idleNodeTTL) && n.idle() {
			delete(c.nodes, addr)
			n.mu.Lock()
			n.pruned = true
			n.unparkLocked()
			n.mu.Unlock()
		}
	}
}

// close fails every queued request and stops the window timers. Lanes in
// flight finish on their own once the client is closed under them; wait
// for them with lanesWG.
func (c *coalescer) close() {
	c.mu.Lock()
	c.closed = true
	all := make([]*node, 0, len(c.nodes)+1)
	for _, n := range c.nodes {
		all = append(all, n)
	}
	c.mu.Unlock()
	if c.single != nil {
		all = append(all, c.single)
	}
	for _, n := range all {
		n.close()
	}
}

// node is the queue and lanes of one Redis node.
type node struct {
	c    *coalescer
	addr string

	lastUsed atomic.Int64 // Unix ns of the last lookup, to the second

	mu     sync.Mutex
	queue  []*request
	queued int // commands in queue
	lanes  int // lane goroutines running
	armed  bool
	timer  *time.Timer // the window timer, when Window > 0
	closed bool
	// parked is how many lane goroutines wait, without a lane, to be
	// handed one (wake receives true) or to exit (false); at most lanes.
	// A lane goroutine that empties the queue parks instead of exiting, so
	// that under load pipelines go out from a few goroutines whose stacks
	// have grown through go-redis once, not from a new one each time.
	parked int
	wake   chan bool
	// pruned: the node left the coalescer's map (pruneLocked), so close
	// will not reach it: its lane goroutines exit instead of parking.
	pruned bool
}

// touch records a use at now. It writes at most once a second, so that
// concurrent callers do not all write the same cache line.
func (n *node) touch(now time.Time) {
	t := now.UnixNano()
	if t-n.lastUsed.Load() >= int64(time.Second) {
		n.lastUsed.Store(t)
	}
}

// idle reports whether nothing is queued, in flight or armed on n.
func (n *node) idle() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue) == 0 && n.lanes == 0 && !n.armed
}

// submit queues r, starting a lane if one is free and the queue is ready.
// With mayLead, the caller is asked to be that lane itself (lead is true),
// unless a pipeline is in flight and a lane goroutine is parked: it then
// must call n.lead. It fails once the backend is closed.
func (n *node) submit(r *request, mayLead bool) (lead bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false, errClosed
	}
	r.state.Store(reqQueued)
	n.queue = append(n.queue, r)
	n.queued += len(r.calls)
	if mayLead && n.lanes < n.c.lanes && n.readyLocked(r.enq) {
		if n.lanes > 0 && n.parked > 0 {
			// Under load (a pipeline in flight): a parked lane goroutine
			// sends it, rather than the caller's goroutine, whose stack
			// would grow through go-redis again.
			n.lanes++
			n.parked--
			n.wake <- true
			return false, nil
		}
		n.lanes++
		n.c.lanesWG.Add(1)
		return true, nil
	}
	n.startLocked(r.enq)
	return false, nil
}

// lead is a lane run by a caller on its own goroutine, for one pipeline:
// under light load the caller sends its own call without handing it to
// another goroutine and back. The caller waits for that pipeline (whoever
// sent its own call), so lead sends only one, then passes the lane on
// (passLocked). When the pipeline is the caller's request alone, it runs
// under the caller's context, as without coalescing.
func (n *node) lead(ctx context.Context, own *request, j *job) {
	now := time.Now()
	n.mu.Lock()
	j.batch = n.takeLocked(now, j.batch[:0])
	n.mu.Unlock()
	if len(j.batch) > 0 {
		parent := n.c.ctx
		if len(j.batch) == 1 && j.batch[0] == own {
			parent = ctx
		}
		j.lcalls = n.send(parent, j.batch, j.lcalls[:0])
		clear(j.batch)
	}
	n.mu.Lock()
	n.passLocked(time.Now())
	n.mu.Unlock()
}

// passLocked passes on a lane that a caller's lead has used, with its
// count (n.lanes and lanesWG): if the queue is ready, to a parked lane
// goroutine, or else to a new one; otherwise the lane ends.
func (n *node) passLocked(now time.Time) {
	if !n.closed && n.readyLocked(now) {
		if n.parked > 0 {
			n.parked--
			n.wake <- true
			n.c.lanesWG.Done() // the parked goroutine holds a count of its own
			return
		}
		go n.lane()
		return
	}
	n.lanes--
	n.c.lanesWG.Done()
	n.armLocked(now)
}

// ready reports whether the queue should be sent now.
func (n *node) readyLocked(now time.Time) bool {
	if len(n.queue) == 0 {
		return false
	}
	return n.c.window <= 0 || n.queued >= n.c.limit || now.Sub(n.queue[0].enq) >= n.c.window
}

// startLocked starts a lane if one is free and the queue is ready, or
// arms the window timer if it will be.
func (n *node) startLocked(now time.Time) {
	if n.closed || n.lanes >= n.c.lanes || len(n.queue) == 0 {
		return
	}
	if !n.readyLocked(now) {
		n.armLocked(now)
		return
	}
	n.lanes++
	if n.parked > 0 {
		n.parked--
		n.wake <- true
		return
	}
	n.c.lanesWG.Add(1)
	go n.lane()
}

// unparkLocked stops the parked lane goroutines.
func (n *node) unparkLocked() {
	for ; n.parked > 0; n.parked-- {
		n.wake <- false
	}
}

// armLocked arms the window timer for the first queued request.
func (n *node) armLocked(now time.Time) {
	if n.armed || n.closed || len(n.queue) == 0 || n.c.window <= 0 {
		return
	}
	n.armed = true
	d := n.queue[0].enq.Add(n.c.window).Sub(now)
	if n.timer == nil {
		n.timer = time.AfterFunc(d, n.kick)
	} else {
		n.timer.Reset(d)
	}
}

// kick is the window timer's function.
func (n *node) kick() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.armed = false
	n.startLocked(time.Now())
}

// lane sends the queue's requests, one pipeline at a time, until the queue
// is empty (or not ready). It then parks, without its lane, until it is
// handed one again, unless lanes goroutines are parked already or the node
// is closed. Its lanesWG count is its lane's while it has one, its own
// while parked.
func (n *node) lane() {
	defer n.c.lanesWG.Done()
	var batch []*request
	var calls []*call
	var idle *time.Timer
	for {
		now := time.Now()
		n.mu.Lock()
		batch = n.takeLocked(now, batch[:0])
		if len(batch) == 0 {
			n.lanes--
			n.armLocked(now)
			park := !n.closed && !n.pruned && n.parked < n.c.lanes
			if park {
				n.parked++
			}
			n.mu.Unlock()
			clear(calls[:cap(calls)])
			if !park {
				return
			}
			if idle == nil {
				idle = time.NewTimer(n.c.parkIdle)
			} else {
				idle.Reset(n.c.parkIdle)
			}
			if !n.parkedWait(idle) {
				return
			}
			continue
		}
		n.mu.Unlock()
		calls = n.send(n.c.ctx, batch, calls[:0])
	}
}

// parkedWait waits, parked, until a token comes on wake (it returns the
// token: true, a lane; false, exit) or idle fires. Then, unless a token
// is pending after all (sent while it took n.mu), it unparks itself and
// returns false: the lane goroutine exits.
func (n *node) parkedWait(idle *time.Timer) bool {
	select {
	case ok := <-n.wake:
		idle.Stop()
		return ok
	case <-idle.C:
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case ok := <-n.wake: // handed one while it took the lock
		return ok
	default:
		// No token pending: this goroutine is one of those parked counts.
		n.parked--
		return false
	}
}

// takeLocked moves the first requests of the queue, up to Limit commands
// (at least one request), into batch, when the queue is ready. Requests
// whose caller left are dropped; those whose deadline passed are failed
// without being sent.
func (n *node) takeLocked(now time.Time, batch []*request) []*request {
	if !n.readyLocked(now) {
		return batch
	}
	cmds, k := 0, 0
	for ; k < len(n.queue); k++ {
		r := n.queue[k]
		if cmds > 0 && cmds+len(r.calls) > n.c.limit {
			break
		}
		n.queued -= len(r.calls)
		if !r.state.CompareAndSwap(reqQueued, reqSent) {
			continue // the caller left
		}
		if !now.Before(r.deadline) {
			for _, c := range r.calls {
				c.fail(errQueued)
			}
			r.finish()
			continue
		}
		batch = append(batch, r)
		cmds += len(r.calls)
	}
	rest := copy(n.queue, n.queue[k:])
	clear(n.queue[rest:])
	n.queue = n.queue[:rest]
	return batch
}

// send sends the batch's calls in one pipeline, under parent and bounded by
// the earliest deadline among them, and wakes their callers. With merge,
// the calls of the batch's requests go in as few script calls as the
// bounds allow (merge.go), each call then holding its own reply.
func (n *node) send(parent context.Context, batch []*request, calls []*call) []*call {
	deadline := batch[0].deadline
	for _, r := range batch {
		calls = append(calls, r.calls...)
		if r.deadline.Before(deadline) {
			deadline = r.deadline
		}
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	if n.c.mergeItems > 1 && len(calls) > 1 {
		m := mergers.Get().(*merger)
		n.c.send(ctx, m.merge(calls, n.c.mergeItems, n.c.byTag))
		m.split()
		m.release()
	} else {
		for _, c := range calls {
			c.arm()
		}
		n.c.send(ctx, calls)
		for _, c := range calls {
			c.took()
		}
	}
	cancel()
	for _, r := range batch {
		r.finish()
	}
	clear(calls)
	return calls
}

// close fails the queued requests and stops the window timer.
func (n *node) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	n.unparkLocked()
	if n.timer != nil {
		n.timer.Stop()
	}
	for _, r := range n.queue {
		if r.state.CompareAndSwap(reqQueued, reqSent) {
			for _, c := range r.calls {
				c.fail(errClosed)
			}
			r.finish()
		}
	}
	clear(n.queue)
	n.queue, n.queued = n.queue[:0], 0
}

// decide sends the calls of one Decide (the job's groups), those of the
// nodes whose breaker let them through, through the node queues and waits
// for them, until its deadline (now + Timeout) or until ctx ends. If the caller leaves before
// every reply came, the calls not answered are marked left, why says why,
// and the job must not be reused: a lane may still read it.
func (c *coalescer) decide(ctx context.Context, j *job) (abandoned bool, why error) {
	now := time.Now()
	deadline := now.Add(c.timeout)
	j.reqs = j.reqs[:0]
	for gi := range j.groups {
		if g := &j.groups[gi]; !g.open {
			j.request(g.calls, g.addr, now, deadline)
		}
	}
	// The caller may send the last request's pipeline itself, once the
	// others are queued.
	var leader *node
	for i, r := range j.reqs {
		n := c.node(r.addr, now)
		if n == nil {
			r.fail(errClosed)
			continue
		}
		lead, err := n.submit(r, i == len(j.reqs)-1)
		if err != nil {
			r.fail(err)
		}
		if lead {
			leader = n
		}
	}
	if leader != nil {
		leader.lead(ctx, j.reqs[len(j.reqs)-1], j)
	}

	if j.timer == nil {
		j.timer = time.NewTimer(deadline.Sub(now))
	} else {
		j.timer.Reset(deadline.Sub(now))
	}
	defer j.timer.Stop()
	for i, r := range j.reqs {
		select {
		case <-r.done:
			continue
		case <-ctx.Done():
			why = ctx.Err()
		case <-j.timer.C:
			why = fmt.Errorf("no answer within %v: %w", c.timeout, context.DeadlineExceeded)
		}
		for _, r := range j.reqs[i:] {
			if r.state.CompareAndSwap(reqQueued, reqLeft) || r.state.CompareAndSwap(reqSent, reqLeft) {
				abandoned = true
				for _, c := range r.calls {
					c.left = true
				}
				continue
			}
			<-r.done // done meanwhile: its token is there
		}
		break
	}
	return abandoned, why
}
