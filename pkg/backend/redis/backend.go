// Package redis is the Redis backend: it decides checks with pkg/scripts'
// decide script (every rule of a descriptor in one Lua call, many
// descriptors per call) against a single Redis, a Sentinel-managed master,
// or a Redis Cluster, through go-redis.
//
// It is the client side of the script contract that pkg/scripts owns (the
// Lua, the keys, the arguments, the reply; pkg/scripts/CONTRACT.md): it
// owns the connection options (options.go, validate.go) and the go-redis
// client built from them (client.go), script loading and the NOSCRIPT
// fallback (backend.go), the calls of one Decide (calls.go), routing them
// to cluster masters (route.go), sending pipelines (exec.go), coalescing
// concurrent Decides' pipelines (coalesce.go) and merging their calls
// into one script call (merge.go), reading replies and
// classifying Redis's errors (errors.go), and the circuit breakers, one
// per Redis node (breaker.go). It knows nothing of gRPC, Envoy or
// configuration files, and nothing of the algorithms beyond handing
// pkg/scripts the rules.
//
// On one node (standalone, Sentinel) the checks of a Decide go in one
// EVALSHA, and concurrent Decide calls share pipelines (coalescing,
// coalesce.go; it can be turned off, and each Decide then sends its own
// pipeline) whose calls are merged into one EVALSHA of at most 16
// descriptors (merge.go). On a cluster every check is a call of its own,
// the pipelines are per master and sent concurrently, and a pipeline's
// calls on one descriptor (one hash tag) are merged. A check that cannot be
// decided (Redis down, slow, failing over) gets a Result.Err wrapping
// backend.ErrUnavailable with the reason; one failed fast by its node's
// open breaker wraps backend.ErrCircuitOpen too.
package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// Backend decides checks on Redis. It is safe for concurrent use.
type Backend struct {
	opts     Options // normalized
	client   goredis.UniversalClient
	cluster  *goredis.ClusterClient // the same client when Type is cluster, else nil
	script   scripts.Script
	breakers *breakers   // one per node
	mapped   atomic.Bool // go-redis has named a cluster master: it has a slot map
	log      *logrus.Entry

	lib     scripts.Library
	invoke  atomic.Pointer[invocation] // how decide calls are sent now: FCALL or EVALSHA
	noFuncs sync.Once                  // logs, once, that functions cannot be used
	rules   ruleCache                  // each rule's key part and ARGV slots
	pipes   pipelines
	co      *coalescer // nil when coalescing is off

	stop      context.CancelFunc
	loops     sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var _ backend.Backend = (*Backend)(nil)

// New builds a Backend from opts. Invalid options are an error; an
// unreachable Redis is not: New tries once (bounded by ctx and
// opts.Timeout) to load the script, and if Redis does not answer it logs
// that and keeps retrying in the background with backoff, while Decide
// fails with backend.ErrUnavailable. The service therefore starts, and
// reports itself unhealthy, instead of crash-looping on a missing Redis.
func New(ctx context.Context, opts Options) (*Backend, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, fmt.Errorf("redis backend: %w", err)
	}
	client, err := newClient(o)
	if err != nil {
		return nil, fmt.Errorf("redis backend: %w", err)
	}
	b := &Backend{
		opts:   o,
		client: client,
		script: scripts.DecideScript(),
		log:    o.Logger.WithFields(logrus.Fields{"backend": "redis", "type": o.Type}),
	}
	b.cluster, _ = client.(*goredis.ClusterClient)
	b.breakers = newBreakers(o, b.log, b.cluster != nil)
	b.lib = scripts.DecideLibrary()
	b.invoke.Store(b.evalshaInvocation())

	loadCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	err = b.loadScript(loadCtx)
	cancel()
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	b.stop = stop
	if !o.DisableCoalescing {
		b.co = newCoalescer(bg, o, b.cluster != nil, b.exec)
	}
	if err != nil {
		what := "not reachable at start"
		if errors.As(err, new(goredis.Error)) {
			what = "answered at start with an error"
		}
		b.log.WithError(b.explain(err)).Warn("redis: " + what + "; retrying in the background, decisions fail until it answers")
		b.loops.Add(1)
		go b.retryLoad(bg)
	}
	return b, nil
}

// loadScript loads the decide script into Redis's script cache (every master of a
// cluster), so that EVALSHA finds it, then, with Options.Functions, the
// decide function library (loadLibrary), switching the calls to FCALL
// when it loads. A Redis that cannot load the library (before 7, or a user
// whose ACL forbids FUNCTION LOAD) keeps EVALSHA, and says so once; only a
// Redis that does not answer is an error.
func (b *Backend) loadScript(ctx context.Context) error {
	sha, err := b.client.ScriptLoad(ctx, b.script.Source).Result()
	if err != nil {
		return fmt.Errorf("load decide script: %w", err)
	}
	if sha != b.script.SHA1 {
		return fmt.Errorf("load decide script: Redis named it %s, want %s", sha, b.script.SHA1)
	}
	if !b.opts.Functions {
		return nil
	}
	switch err := b.loadLibrary(ctx); {
	case err == nil:
		b.invoke.Store(b.fcallInvocation())
	case functionsRefused(err):
		b.withoutFunctions(err)
	default:
		return err
	}
	return nil
}

// retryLoad retries loadScript with exponential backoff until it succeeds
// or the backend is closed. Decide does not depend on it (a NOSCRIPT reply
// falls back to EVAL); it only makes the first decisions after an outage
// cheaper and logs when Redis becomes reachable.
func (b *Backend) retryLoad(ctx context.Context) {
	defer b.loops.Done()
	wait := 100 * time.Millisecond
	const maxWait = 30 * time.Second
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
		err := b.loadScript(lctx)
		cancel()
		if err == nil {
			b.log.WithField("attempts", attempt).Info("redis: reachable, decide script loaded")
			return
		}
		if ctx.Err() != nil {
			return
		}
		if attempt%10 == 0 {
			b.log.WithError(err).WithField("attempts", attempt).Warn("redis: still not reachable")
		}
		wait = min(2*wait, maxWait)
	}
}

// Decide decides the checks with one script call per Redis node: all of
// them in one call (a batch, each check decided as its own call would)
// when there is one node, one call per check on a cluster. With coalescing
// (the default) the calls join the pipelines of concurrent Decide calls
// bound for the same node, and the calls of a pipeline are merged into
// script calls (on a cluster, those of one descriptor); without, they go
// in one pipeline of their
// own (one per cluster master). Either way every Decide returns within
// Timeout.
// The checks bound for a node whose circuit breaker is open are not sent:
// they fail at once with backend.ErrCircuitOpen, and the checks bound for
// other nodes go on. See backend.Backend.
func (b *Backend) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	return b.decide(ctx, checks, false)
}

// maxBatchWeight bounds what one batch call of a Decide decides, so that
// one call holds Redis (which runs one script at a time) for a bounded
// time, and its reply arrives within Options.Timeout however many checks a
// request carries: a check weighs backend.Weight of its rules (one per
// rule, backend.SlidingLogWeight per sliding log, whose decision searches
// its sorted set).
const maxBatchWeight = 512

// batchPrefix returns how many of the checks of idx (at least one) the
// next batch call decides: as many as weigh at most maxBatchWeight.
func batchPrefix(checks []backend.Check, idx []int) int {
	w := 0
	for n, i := range idx {
		w += backend.Weight(checks[i].Rules)
		if w > maxBatchWeight && n > 0 {
			return n
		}
	}
	return len(idx)
}

// decide is Decide, with the one node's batch decided together when
// together is set (DecideTogether).
func (b *Backend) decide(ctx context.Context, checks []backend.Check, together bool) []backend.Result {
	clock := scriptClock{At: limit.MicrosOf(b.opts.Clock())}
	if b.opts.FakeRedisClock != nil {
		clock = scriptClock{Fixed: true, At: limit.MicrosOf(b.opts.FakeRedisClock())}
	}
	j := getJob(checks)
	results := j.results
	j.idx, j.together = j.idx[:0], together
	for i, c := range checks {
		if len(c.Rules) == 0 {
			results[i].Decision = limit.Decide(nil, nil, clock.At, c.Cost)
			continue
		}
		j.idx = append(j.idx, i)
	}
	if len(j.idx) > 1 && b.cluster == nil {
		// One node: the checks in batch calls of at most maxBatchWeight
		// (every check in one call when decided together).
		errs := func(i int, err error) { results[i].Err = fmt.Errorf("redis backend: %w", err) }
		for idx := j.idx; len(idx) > 0; {
			n := len(idx)
			if !together {
				n = batchPrefix(checks, idx)
			}
			b.addBatch(j, idx[:n], checks, clock, errs)
			idx = idx[n:]
		}
	} else {
		for _, i := range j.idx {
			if err := b.add(j, i, checks[i], clock); err != nil {
				results[i].Err = fmt.Errorf("redis backend: %w", err)
			}
		}
	}
	if len(j.calls) == 0 {
		putJob(j)
		return results
	}

	// Each node's breaker decides for the calls bound to it: a node that
	// keeps failing fails its own calls fast, not the other nodes'.
	b.group(ctx, j)
	sending, open := 0, false
	for gi := range j.groups {
		g := &j.groups[gi]
		g.br = b.breakers.get(g.addr)
		ok, probe := g.br.allow()
		if !ok {
			g.open, open = true, true
			for _, c := range g.calls {
				for _, it := range c.items {
					results[it.result].Err = g.br.err
				}
			}
			continue
		}
		g.probe = probe
		sending++
	}
	if open && b.cluster != nil {
		// The slots of a node failed fast may have moved (a failover):
		// have go-redis re-read the slot map (in the background, at most
		// once per 200ms), so that their new master, with a breaker of its
		// own, is used as soon as it serves them, not after the next probe.
		b.cluster.ReloadState(context.WithoutCancel(ctx))
	}
	if sending == 0 {
		putJob(j)
		return results
	}

	var abandoned bool
	var why error
	if b.co != nil {
		abandoned, why = b.co.decide(ctx, j)
	} else {
		for i := range j.calls {
			j.calls[i].arm()
		}
		rctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
		b.direct(rctx, j)
		cancel()
		for i := range j.calls {
			j.calls[i].took()
		}
	}
	for gi := range j.groups {
		g := &j.groups[gi]
		if g.open {
			continue
		}
		answered, down := 0, 0
		for _, c := range g.calls {
			if c.left {
				for _, it := range c.items {
					results[it.result].Err = fmt.Errorf("redis backend: %w: %w", backend.ErrUnavailable, why)
				}
				down++
				continue
			}
			if b.fill(results, c, j.outcomes) {
				answered++
			} else {
				down++
			}
		}
		v := healthy
		if answered == 0 && down > 0 {
			v = failed
		}
		if ctx.Err() != nil && v == failed {
			v = neutral // the caller gave up; that says nothing about Redis
		}
		g.br.done(v, g.probe)
	}
	if !abandoned {
		putJob(j)
	}
	return results
}

// Ping reports whether Redis answers now: the one server, the current
// Sentinel master, or every cluster master. It is bounded by Timeout and
// ignores the circuit breaker.
func (b *Backend) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	var err error
	if b.cluster != nil {
		err = b.cluster.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = b.client.Ping(ctx).Err()
	}
	if err != nil {
		return fmt.Errorf("redis backend: ping: %w: %w", backend.ErrUnavailable, err)
	}
	return nil
}

// Close stops the background retries and closes the connections. Calls in
// flight or queued for a pipeline fail at once with ErrUnavailable, and
// Close returns when no goroutine of the backend is left. Decide must not be
// called after Close; Close may be called more than once.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		if b.co != nil {
			b.co.close() // fails the queued calls
		}
		b.stop()
		b.closeErr = b.client.Close() // fails the calls in flight
		b.loops.Wait()
		if b.co != nil {
			b.co.lanesWG.Wait()
		}
	})
	return b.closeErr
}
