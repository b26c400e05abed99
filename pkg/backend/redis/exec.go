package redis

import (
	"context"
	"sync"

	goredis "github.com/redis/go-redis/v9"
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
