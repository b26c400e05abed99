package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
	"github.com/sluice-rl/sluice/pkg/scripts"
)

// exec sends one pipeline of EVALSHA, one per call, then, once, EVAL for
// the calls that met NOSCRIPT, replacing their commands. Results are read
// per command from call.cmd.
//
// All calls should belong to one Redis node: with a cluster, go-redis
// splits a pipeline by node itself, but when one node fails it marks every
// command of the pipeline failed, also those other nodes answered.
func (b *Backend) exec(ctx context.Context, calls []*call) {
	b.pipeline(ctx, calls)
	// A script cache emptied by SCRIPT FLUSH, a restart or a failover to a
	// node that never loaded it: EVAL carries the source, runs it on the node
	// owning the keys and caches it there.
	var again []*call
	for _, c := range calls {
		// (HasErrorPrefix allocates even for a nil error.)
		if err := c.cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		b.log.WithField("calls", len(again)).Debug("redis: NOSCRIPT, sending the script with EVAL")
		for _, c := range again {
			argv := append([]any(nil), c.argv...)
			argv[0], argv[1] = "eval", b.script.Source
			c.cmd = newDecideCmd(argv)
		}
		b.pipeline(ctx, again)
	}
	if b.cluster != nil {
		for _, c := range calls {
			if isUnavailable(c.cmd.Err()) {
				// The slot map may be stale (a failover): have go-redis
				// re-read it (in the background, at most once at a time).
				b.cluster.ReloadState(context.WithoutCancel(ctx))
				break
			}
		}
	}
}

// pipelines are reused: go-redis's Pipeline keeps nothing after Exec.
type pipelines struct{ pool sync.Pool } // of *pipe

// pipe is a reusable pipeline and the slice its commands are handed in.
type pipe struct {
	p    goredis.Pipeliner
	cmds []goredis.Cmder
}

// pipeline sends the calls' commands in one go-redis pipeline and waits for
// the replies; errors are read per command.
func (b *Backend) pipeline(ctx context.Context, calls []*call) {
	pp, _ := b.pipes.pool.Get().(*pipe)
	if pp == nil {
		pp = &pipe{p: b.client.Pipeline()}
	}
	pp.cmds = pp.cmds[:0]
	for _, c := range calls {
		pp.cmds = append(pp.cmds, c.cmd)
	}
	err := pp.p.BatchProcess(ctx, pp.cmds...)
	if _, xerr := pp.p.Exec(ctx); err == nil {
		err = xerr
	}
	if err != nil {
		// go-redis does not always give every command the pipeline's
		// error: when the connection's handshake fails (AUTH refused with
		// WRONGPASS), Exec returns it and the commands stay without
		// error and without reply. Give it to them, so that the caller
		// reads Redis's words instead of an empty reply.
		for _, c := range calls {
			if c.cmd.Err() == nil && c.cmd.Val() == nil {
				c.cmd.SetErr(err)
			}
		}
	}
	clear(pp.cmds)
	b.pipes.pool.Put(pp)
	if b.opts.ObserveBatch != nil {
		b.opts.ObserveBatch(len(calls))
	}
}

// fill reads c's reply into res, and says whether the node answered (with
// a decision, an error about this call, or a passing refusal: see
// liveRefusal) or could not be reached. The breaker counts the calls that
// were not answered.
func (b *Backend) fill(res *backend.Result, c *call, outcomes []limit.Outcome) (answered bool) {
	err := c.cmd.Err()
	if err == nil {
		d, perr := scripts.ParseDecideInts(c.cmd.Val(), outcomes)
		if perr != nil {
			res.Err = fmt.Errorf("redis backend: %w", perr)
		} else {
			res.Decision = d
		}
		return true
	}
	if isUnavailable(err) {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v: %w", b.opts.Timeout, err)
		} else if strings.Contains(err.Error(), "unauthenticated") {
			// Redis refuses a long command from a client that has not
			// authenticated with a protocol error, not NOAUTH.
			err = fmt.Errorf("the server requires a password, none was given (REDIS_AUTH): %w", err)
		}
		res.Err = fmt.Errorf("redis backend: %w: %w", backend.ErrUnavailable, err)
		return liveRefusal(err)
	}
	res.Err = fmt.Errorf("redis backend: decide script: %w", err)
	return true // Redis answered, with an error about this call
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

// liveRefusal reports whether err is a reply by which a live node refuses
// a call at once, for a state that ends by itself, and ends everywhere at
// the same moment: the cluster is down (CLUSTERDOWN: a master failed and
// its replica is not promoted yet, so with cluster-require-full-coverage
// every node refuses every key), a slot is moving (TRYAGAIN, MOVED, ASK),
// the node is loading its data set (LOADING), or a failover is under way
// (MASTERDOWN, READONLY). The call fails (with ErrUnavailable), but the
// node's breaker does not count it: failing the node's calls fast would
// spare nobody a wait, and would keep them failing for up to an open
// period after the state ended. Refusals that more calls would make worse
// or that do not pass by themselves (OOM, BUSY, max clients, auth) count.
func liveRefusal(err error) bool {
	return goredis.IsClusterDownError(err) || goredis.IsTryAgainError(err) ||
		goredis.IsLoadingError(err) || goredis.IsMasterDownError(err) ||
		goredis.IsReadOnlyError(err) ||
		goredis.HasErrorPrefix(err, "MOVED") || goredis.HasErrorPrefix(err, "ASK")
}

// nodeOf returns the address of the cluster master serving c's keys, or ""
// when it is unknown (go-redis then routes the command itself) or the
// backend is not a cluster.
func (b *Backend) nodeOf(ctx context.Context, c *call) string {
	if b.cluster == nil {
		return ""
	}
	key, _ := c.argv[3].(*string)
	if key == nil {
		return ""
	}
	m, err := b.cluster.MasterForKey(ctx, *key)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}

// group sorts the job's calls by the node they are bound for into
// j.groups, each a contiguous part of j.ptrs (sized first, so the parts
// never move): one group when not a cluster.
func (b *Backend) group(ctx context.Context, j *job) {
	j.ptrs, j.groups = grow(j.ptrs, len(j.calls)), j.groups[:0]
	if b.cluster == nil {
		for i := range j.calls {
			j.ptrs = append(j.ptrs, &j.calls[i])
		}
		j.groups = append(j.groups, group{calls: j.ptrs})
		return
	}
	j.addrs = grow(j.addrs, len(j.calls))
	if b.mapped.Load() {
		for i := range j.calls {
			j.addrs = append(j.addrs, b.nodeOf(ctx, &j.calls[i]))
		}
	} else {
		b.unmapped(ctx, j)
	}
	for i, a := range j.addrs {
		if slices.Contains(j.addrs[:i], a) {
			continue
		}
		start := len(j.ptrs)
		for k := i; k < len(j.calls); k++ {
			if j.addrs[k] == a {
				j.ptrs = append(j.ptrs, &j.calls[k])
			}
		}
		j.groups = append(j.groups, group{addr: a, calls: j.ptrs[start:]})
	}
}

// unmapped fills j.addrs while go-redis may have no slot map yet. Asking
// it for a key's master then loads the map from the seed nodes,
// synchronously; so that is bounded by Timeout, and not even tried while
// the breaker of "" (the cluster, node unknown) is open: the calls then
// go to that breaker, which fails them fast. Once go-redis has named a
// master it keeps a slot map for good (it only replaces it), and nodeOf
// never waits again.
func (b *Backend) unmapped(ctx context.Context, j *job) {
	if b.breakers.get("").blocked() {
		for range j.calls {
			j.addrs = append(j.addrs, "")
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	for i := range j.calls {
		a := b.nodeOf(ctx, &j.calls[i])
		if a != "" {
			b.mapped.Store(true)
		}
		j.addrs = append(j.addrs, a)
	}
}

// direct sends the calls of one Decide itself, without coalescing: one
// pipeline per node whose breaker let its calls through, sent
// concurrently, all under ctx. (go-redis would split one pipeline by node
// itself, but fail every command when one node fails.)
func (b *Backend) direct(ctx context.Context, j *job) {
	var only *group
	live := 0
	for gi := range j.groups {
		if !j.groups[gi].open {
			only = &j.groups[gi]
			live++
		}
	}
	if live == 1 {
		b.exec(ctx, only.calls)
		return
	}
	var wg sync.WaitGroup
	for gi := range j.groups {
		g := &j.groups[gi]
		if g.open {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.exec(ctx, g.calls)
		}()
	}
	wg.Wait()
}
