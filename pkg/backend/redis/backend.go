// Package redis is the Redis backend: it decides checks with one Lua call
// (pkg/scripts' decide.lua) per descriptor against a single Redis, a
// Sentinel-managed master, or a Redis Cluster, through go-redis.
//
// It owns the key schema (Key), the connection options (Options), script
// loading and the NOSCRIPT fallback, pipelining, timeouts and the circuit
// breaker. It knows nothing of gRPC, Envoy or configuration files, and
// nothing of the algorithms beyond handing pkg/scripts the rules.
//
// One Decide call sends one EVALSHA per check, all in one pipeline; with a
// cluster, one pipeline per master, sent concurrently. A check that cannot be decided (Redis down, slow, failing
// over) gets a Result.Err wrapping backend.ErrUnavailable with the reason.
package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// Backend decides checks on Redis. It is safe for concurrent use.
type Backend struct {
	opts    Options // normalized
	client  goredis.UniversalClient
	cluster *goredis.ClusterClient // the same client when Type is cluster, else nil
	script  scripts.Script
	breaker *breaker
	log     *logrus.Entry

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
		script: scripts.Decide(),
		log:    o.Logger.WithFields(logrus.Fields{"backend": "redis", "type": o.Type}),
		breaker: &breaker{
			threshold: o.Breaker.Failures,
			openFor:   o.Breaker.OpenFor,
			now:       o.Clock,
			log:       o.Logger,
		},
	}
	b.cluster, _ = client.(*goredis.ClusterClient)

	loadCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	err = b.loadScript(loadCtx)
	cancel()
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	b.stop = stop
	if err != nil {
		b.log.WithError(err).Warn("redis: not reachable at start; retrying in the background, decisions fail until it answers")
		b.loops.Add(1)
		go b.retryLoad(bg)
	}
	return b, nil
}

// loadScript loads decide.lua into Redis's script cache (every master of a
// cluster), so that EVALSHA finds it.
func (b *Backend) loadScript(ctx context.Context) error {
	sha, err := b.client.ScriptLoad(ctx, b.script.Source).Result()
	if err != nil {
		return fmt.Errorf("load decide script: %w", err)
	}
	if sha != b.script.SHA1 {
		return fmt.Errorf("load decide script: Redis named it %s, want %s", sha, b.script.SHA1)
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

// decideCmd is an EVALSHA/EVAL that go-redis must never send twice: the
// script writes, so a retry after a lost reply would count a request twice.
// Commands that never left (dial failures, MOVED, ASK) are still re-sent.
type decideCmd struct{ *goredis.Cmd }

func (decideCmd) NoRetry() bool { return true }

// call is one check ready to send.
type call struct {
	result int // index in checks and results
	keys   []string
	argv   []any
	rules  int
}

// Decide decides every check with one script call each, all in one
// pipeline, under one Timeout. See backend.Backend.
func (b *Backend) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	results := make([]backend.Result, len(checks))
	clock := scripts.Time{At: limit.MicrosOf(b.opts.Clock())}
	if b.opts.Now != nil {
		clock = scripts.Time{Fixed: true, At: limit.MicrosOf(b.opts.Now())}
	}
	calls := make([]call, 0, len(checks))
	for i, c := range checks {
		if len(c.Rules) == 0 {
			results[i].Decision = limit.Decide(nil, nil, clock.At, c.Cost)
			continue
		}
		cl, err := b.prepare(i, c, clock)
		if err != nil {
			results[i].Err = fmt.Errorf("redis backend: %w", err)
			continue
		}
		calls = append(calls, cl)
	}
	if len(calls) == 0 {
		return results
	}

	ok, probe := b.breaker.allow()
	if !ok {
		err := fmt.Errorf("%w: redis: circuit open after repeated failures", backend.ErrUnavailable)
		for _, c := range calls {
			results[c.result].Err = err
		}
		return results
	}
	rctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	v := b.run(rctx, calls, results)
	if ctx.Err() != nil && v == failed {
		v = neutral // the caller gave up; that says nothing about Redis
	}
	b.breaker.done(v, probe)
	return results
}

// prepare builds the keys and arguments of one check.
func (b *Backend) prepare(i int, c backend.Check, clock scripts.Time) (call, error) {
	if err := checkIdentity(c.Identity); err != nil {
		return call{}, err
	}
	keys := make([]string, len(c.Rules))
	for j, r := range c.Rules {
		if err := checkRule(r); err != nil {
			return call{}, fmt.Errorf("rule %d: %w", j, err)
		}
		keys[j] = Key(b.opts.KeyPrefix, c.Identity, r)
	}
	argv := make([]any, 0, 3+len(keys)+scripts.ArgCount(len(c.Rules)))
	argv = append(argv, nil, nil, len(keys)) // command and script, set when sent
	for _, k := range keys {
		argv = append(argv, k)
	}
	argv, err := scripts.AppendDecideArgs(argv, c.Rules, c.Cost, clock)
	if err != nil {
		return call{}, err
	}
	return call{result: i, keys: keys, argv: argv, rules: len(c.Rules)}, nil
}

// run sends the calls (EVALSHA; EVAL for those that met NOSCRIPT), fills
// results, and returns what the round trip says about Redis.
func (b *Backend) run(ctx context.Context, calls []call, results []backend.Result) verdict {
	cmds := b.send(ctx, calls, func(c call) []any {
		c.argv[0], c.argv[1] = "evalsha", b.script.SHA1
		return c.argv
	})
	// A script cache emptied by SCRIPT FLUSH, a restart or a failover to a
	// node that never loaded it: EVAL carries the source, runs it on the node
	// owning the keys and caches it there. Once, within this Decide.
	var again []call
	var at []int
	for j, cmd := range cmds {
		if goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, calls[j])
			at = append(at, j)
		}
	}
	if len(again) > 0 {
		b.log.WithField("calls", len(again)).Debug("redis: NOSCRIPT, sending the script with EVAL")
		retried := b.send(ctx, again, func(c call) []any {
			argv := append([]any(nil), c.argv...)
			argv[0], argv[1] = "eval", b.script.Source
			return argv
		})
		for k, j := range at {
			cmds[j] = retried[k]
		}
	}

	answered, down := 0, 0
	for j, cmd := range cmds {
		res := &results[calls[j].result]
		err := cmd.Err()
		if err == nil {
			d, perr := scripts.ParseDecideReply(cmd.Val(), calls[j].rules)
			if perr != nil {
				res.Err = fmt.Errorf("redis backend: %w", perr)
			} else {
				res.Decision = d
			}
			answered++
			continue
		}
		if isUnavailable(err) {
			down++
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("no answer within %v: %w", b.opts.Timeout, err)
			}
			res.Err = fmt.Errorf("%w: redis: %w", backend.ErrUnavailable, err)
			continue
		}
		answered++ // Redis answered, with an error about this call
		res.Err = fmt.Errorf("redis backend: decide script: %w", err)
	}
	if down > 0 && b.cluster != nil {
		// The slot map may be stale (a failover): have go-redis re-read it.
		b.cluster.ReloadState(context.WithoutCancel(ctx))
	}
	if answered == 0 && down > 0 {
		return failed
	}
	return healthy
}

// send pipelines one command per call, built by argv, and waits for all.
//
// With a cluster the calls are grouped by the master serving their slot and
// each group is sent as its own pipeline, concurrently. go-redis would
// split one pipeline by node by itself, but when one node fails it marks
// every command of the pipeline failed, also those other nodes answered;
// separate pipelines keep one sick node from failing the whole batch.
func (b *Backend) send(ctx context.Context, calls []call, argv func(call) []any) []decideCmd {
	cmds := make([]decideCmd, len(calls))
	for j, c := range calls {
		cmds[j] = decideCmd{goredis.NewCmd(ctx, argv(c)...)}
	}
	if b.cluster == nil {
		pipeline(ctx, b.client, cmds)
		return cmds
	}
	groups := make(map[string][]decideCmd)
	for j, c := range calls {
		node := "" // unknown: go-redis will route it
		if m, err := b.cluster.MasterForKey(ctx, c.keys[0]); err == nil {
			node = m.Options().Addr
		}
		groups[node] = append(groups[node], cmds[j])
	}
	if len(groups) == 1 {
		pipeline(ctx, b.client, cmds)
		return cmds
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipeline(ctx, b.client, g)
		}()
	}
	wg.Wait()
	return cmds
}

// pipeline sends cmds in one go-redis pipeline; errors are read per
// command.
func pipeline(ctx context.Context, c goredis.UniversalClient, cmds []decideCmd) {
	pipe := c.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	_, _ = pipe.Exec(ctx)
}

// isUnavailable reports whether err means Redis cannot decide now (and a
// later try may succeed), as opposed to Redis answering that this call is
// wrong.
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return true // transport, timeout, pool exhausted, client closed
	}
	return goredis.IsClusterDownError(err) || goredis.IsLoadingError(err) ||
		goredis.IsMasterDownError(err) || goredis.IsTryAgainError(err) ||
		goredis.IsReadOnlyError(err) || goredis.IsMaxClientsError(err) ||
		goredis.IsOOMError(err) || goredis.IsAuthError(err) ||
		goredis.IsNoReplicasError(err) ||
		goredis.HasErrorPrefix(err, "NOSCRIPT") || goredis.HasErrorPrefix(err, "BUSY") ||
		goredis.HasErrorPrefix(err, "MOVED") || goredis.HasErrorPrefix(err, "ASK")
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
		return fmt.Errorf("%w: redis ping: %w", backend.ErrUnavailable, err)
	}
	return nil
}

// Close stops the background retries and closes the connections. Decide
// must not be called after Close; Close may be called more than once.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.stop()
		b.loops.Wait()
		b.closeErr = b.client.Close()
	})
	return b.closeErr
}
