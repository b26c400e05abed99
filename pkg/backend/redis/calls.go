package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// decideCmd is an FCALL/EVALSHA/EVAL that go-redis must never send twice: the
// script writes, so a retry after a lost reply would count a request twice.
// Commands that never left (dial failures, MOVED, ASK) are still re-sent.
// It reads the reply as integers (IntSliceCmd), without boxing each one.
type decideCmd struct{ *goredis.IntSliceCmd }

func (decideCmd) NoRetry() bool { return true }

// newDecideCmd returns the command for argv, whose first key is at
// position 3 (command, script, numkeys, keys...). Saying so spares go-redis
// from parsing numkeys when it routes the command to a cluster node.
func newDecideCmd(argv []any) decideCmd {
	c := decideCmd{goredis.NewIntSliceCmd(context.Background(), argv...)}
	c.SetFirstKeyPos(3)
	return c
}

// call is one script call ready to send: one check, or a batch of checks
// bound for the same node, its command, and where its results go.
type call struct {
	items    []item // the checks it decides, in the order of its reply
	batch    bool   // the batch layout (even of one item); else a single call
	together bool   // a batch decided together ("t"): never merged
	left     bool   // its caller left before the reply came (coalescing only)
	argv     []any  // "fcall" or "evalsha", function or sha, numkeys, keys..., ARGV...
	// cmd is the command that sends it, made (arm) only when it is sent
	// as it is: a call merged into another (merge.go) needs none.
	cmd decideCmd
	// reply and err are its outcome, which fill reads: its command's
	// (took), its part of a merged call's, or why it was not sent.
	reply []int64
	err   error
	// parts are the calls a merged call decides (merge.go), in the order
	// of its reply; nil for a call built by one Decide.
	parts []*call
}

// arm gives c a new command for its arguments, to send.
func (c *call) arm() { c.cmd = newDecideCmd(c.argv) }

// took records the outcome of c's command, once sent.
func (c *call) took() { c.reply, c.err = c.cmd.Val(), c.cmd.Err() }

// fail records that c could not be decided, for err.
func (c *call) fail(err error) { c.reply, c.err = nil, err }

// item is one check of a call.
type item struct {
	result int // index in checks and results
	out    int // index of its first outcome in the job's outcomes
	rules  int
	nkeys  int // its KEYS in the call
}

// ruleKey is what a rule's ruleArgs depends on: every Rule field but
// Name, and for a meter also Name (its state id, limit.Rule.ID).
type ruleKey struct {
	alg        limit.Algorithm
	unit       limit.Unit
	multiplier uint32
	limit      uint64
	burst      uint64
	loc        *time.Location
	slot       uint8
	meter      string // a meter's Name
}

// ruleCacheMax bounds the rule cache. Configured rules are few; requests
// can carry their own limits (descriptor limit overrides), so the cache is
// cleared when it fills rather than grown without bound.
const ruleCacheMax = 4096

// ruleCache maps rules to their ruleArgs. Rules are read far more often
// than new ones appear, which is what sync.Map is for.
type ruleCache struct {
	m sync.Map // ruleKey → *ruleArgs
	n atomic.Int64
}

// get returns r's RuleArgs, computing and caching it on first sight.
func (c *ruleCache) get(r limit.Rule) (*ruleArgs, error) {
	k := ruleKey{r.Algorithm, r.Unit, r.Multiplier, r.Limit, r.Burst, r.Location, r.Slot, ""}
	if r.Algorithm.IsMeter() {
		k.meter = r.Name
	}
	if v, ok := c.m.Load(k); ok {
		return v.(*ruleArgs), nil
	}
	a, err := prepareRule(r)
	if err != nil {
		return nil, err
	}
	if c.n.Add(1) > ruleCacheMax {
		c.m.Clear()
		c.n.Store(1)
	}
	c.m.Store(k, a)
	return a, nil
}

// job is the working memory of one Decide: its calls, their arguments and
// keys, and the requests that carry them to the pipelines. Jobs are pooled;
// a job whose caller left before its commands came back is not returned to
// the pool, since a pipeline may still read it.
type job struct {
	calls    []call
	items    []item // the calls' items, carved in order
	idx      []int  // scratch: the checks to send
	argv     []any
	keys     []string
	rules    []*ruleArgs
	results  []backend.Result // handed to the caller
	outcomes []limit.Outcome  // the results' outcomes, handed to the caller
	nout     int              // outcomes given to calls so far
	ptrs     []*call          // calls grouped by node
	addrs    []string         // node of each call (a cluster)
	groups   []group          // the calls of each node, parts of ptrs
	reqs     []*request       // one per node (coalescing); reused with the job
	batch    []*request       // scratch for node.lead
	lcalls   []*call          // scratch for node.lead
	timer    *time.Timer
	together bool // the batch is decided together (DecideTogether)
}

// group is the calls of one Decide bound for one node, and what that
// node's breaker said of them.
type group struct {
	addr  string  // "" when not a cluster, or the node is unknown
	calls []*call // a part of the job's ptrs
	br    *breaker
	open  bool // the breaker failed these calls fast; not sent
	probe bool // these calls are the breaker's half-open probe
}

// request returns the job's next request, reused if the job had one.
func (j *job) request(calls []*call, addr string, enq, deadline time.Time) {
	n := len(j.reqs)
	if n < cap(j.reqs) {
		j.reqs = j.reqs[:n+1]
	} else {
		j.reqs = append(j.reqs, nil)
	}
	r := j.reqs[n]
	if r == nil {
		r = newRequest()
		j.reqs[n] = r
	}
	r.calls, r.addr, r.enq, r.deadline = calls, addr, enq, deadline
}

var jobs = sync.Pool{New: func() any { return new(job) }}

// getJob returns an empty job with room for checks.
func getJob(checks []backend.Check) *job {
	j := jobs.Get().(*job)
	nargs, nrules := 2, 0
	for _, c := range checks {
		nrules += len(c.Rules)
		nargs += 3 + 1 + len(c.Rules) + 2 + argCount(len(c.Rules))
	}
	j.calls = grow(j.calls[:0], len(checks))
	j.items = grow(j.items[:0], len(checks))
	j.argv = grow(j.argv[:0], nargs)
	j.keys = grow(j.keys[:0], len(checks)+nrules)
	j.results, j.outcomes = newResults(len(checks), nrules) // handed to the caller: never reused
	j.nout = 0
	return j
}

// oneCheck is what a Decide of one check of at most three rules, the
// common request, hands its caller: its result and the outcomes of its
// rules, in one allocation instead of two.
type oneCheck struct {
	results  [1]backend.Result
	outcomes [3]limit.Outcome
}

// newResults returns the results of a Decide of n checks and the outcomes
// of their nrules rules.
func newResults(n, nrules int) ([]backend.Result, []limit.Outcome) {
	if n == 1 && nrules <= len(oneCheck{}.outcomes) {
		m := new(oneCheck)
		return m.results[:], m.outcomes[:nrules:nrules]
	}
	return make([]backend.Result, n), make([]limit.Outcome, nrules)
}

// putJob clears j's references and returns it to the pool.
func putJob(j *job) {
	clear(j.calls)
	clear(j.items[:cap(j.items)])
	j.idx = j.idx[:0]
	clear(j.argv[:cap(j.argv)])
	clear(j.keys[:cap(j.keys)])
	clear(j.rules[:cap(j.rules)])
	clear(j.ptrs[:cap(j.ptrs)])
	clear(j.addrs[:cap(j.addrs)])
	clear(j.groups[:cap(j.groups)])
	for _, r := range j.reqs[:cap(j.reqs)] {
		if r != nil {
			r.calls = nil
		}
	}
	j.results, j.outcomes = nil, nil
	j.together = false
	jobs.Put(j)
}

// grow returns s (empty) with capacity for at least n elements.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// prepare returns the RuleArgs of c's rules, in j.rules.
func (b *Backend) prepare(j *job, c backend.Check) ([]*ruleArgs, error) {
	j.rules = j.rules[:0]
	for n, r := range c.Rules {
		a, err := b.rules.get(r)
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", n, err)
		}
		j.rules = append(j.rules, a)
	}
	return j.rules, nil
}

// add builds the call for check c (result index i): its KEYS
// (appendKeys) and its argv, carved from the job's slices (sized by
// getJob, so they never move and the pointers boxed into argv stay valid).
func (b *Backend) add(j *job, i int, c backend.Check, clock scriptClock) error {
	rules, err := b.prepare(j, c)
	if err != nil {
		return err
	}
	k0 := len(j.keys)
	if j.keys, err = appendKeys(j.keys, b.opts.KeyPrefix, c.Identity, rules); err != nil {
		return err
	}
	a0 := len(j.argv)
	// "fcall" or "evalsha" and the function or SHA, boxed once.
	inv := b.invoke.Load()
	j.argv = append(j.argv, inv.cmd, inv.name, len(j.keys)-k0)
	for k := k0; k < len(j.keys); k++ {
		j.argv = append(j.argv, &j.keys[k]) // a *string boxes without allocating
	}
	j.argv = appendHead(j.argv, c.Cost, clock)
	for _, a := range rules {
		j.argv = a.appendTo(j.argv, clock)
	}
	i0 := len(j.items)
	j.items = append(j.items, item{result: i, out: j.nout, rules: len(c.Rules), nkeys: len(j.keys) - k0})
	j.addCall(a0, i0, false)
	return nil
}

// addCall appends the call whose argv starts at j.argv[a0] and whose items
// are j.items[i0:].
func (j *job) addCall(a0, i0 int, batch bool) {
	for _, it := range j.items[i0:] {
		j.nout += it.rules
	}
	argv := j.argv[a0:len(j.argv):len(j.argv)]
	j.calls = append(j.calls, call{items: j.items[i0:len(j.items):len(j.items)], batch: batch, argv: argv})
}

// addBatch builds one call deciding the checks of idx (result indexes),
// all bound for one node, with the decide script's batch layout: each
// check is decided as its own call would decide it. A check that cannot
// be sent (a bad identity or rule) gets its error in errs and is left out.
func (b *Backend) addBatch(j *job, idx []int, checks []backend.Check, clock scriptClock, errs func(i int, err error)) {
	// KEYS first (EVALSHA names them before ARGV): each check's keys, then
	// its slots, from the same RuleArgs.
	k0, i0 := len(j.keys), len(j.items)
	nout := j.nout
	for _, i := range idx {
		c := checks[i]
		k := len(j.keys)
		rules, err := b.prepare(j, c)
		if err == nil {
			j.keys, err = appendKeys(j.keys, b.opts.KeyPrefix, c.Identity, rules)
		}
		if err != nil {
			errs(i, err)
			continue
		}
		j.items = append(j.items, item{result: i, out: nout, rules: len(c.Rules), nkeys: len(j.keys) - k})
		nout += len(c.Rules)
	}
	if len(j.items) == i0 {
		return
	}
	a0 := len(j.argv)
	inv := b.invoke.Load()
	j.argv = append(j.argv, inv.cmd, inv.name, len(j.keys)-k0)
	for k := k0; k < len(j.keys); k++ {
		j.argv = append(j.argv, &j.keys[k])
	}
	if j.together {
		j.argv = appendTogetherHead(j.argv, clock)
	} else {
		j.argv = appendBatchHead(j.argv, clock)
	}
	var rep repeats
	for _, it := range j.items[i0:] {
		c := checks[it.result]
		rules, _ := b.prepare(j, c) // cached: cannot fail now
		s := len(j.argv)
		j.argv = appendBatchItem(j.argv, it.nkeys, c.Cost, rules, clock)
		j.argv = rep.fold(j.argv, s)
	}
	j.addCall(a0, i0, true)
	j.calls[len(j.calls)-1].together = j.together
}
