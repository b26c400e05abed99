package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// invocation is how decide calls are sent: the command and the function's
// or script's name, boxed once (argv[0] and argv[1] of every call).
type invocation struct {
	cmd, name any
	fcall     bool
}

func (b *Backend) evalshaInvocation() *invocation {
	return &invocation{cmd: "evalsha", name: b.script.SHA1}
}

func (b *Backend) fcallInvocation() *invocation {
	return &invocation{cmd: "fcall", name: b.lib.Function, fcall: true}
}

// loadLibrary loads the decide function library (FUNCTION LOAD) on the
// node, or every master of a cluster (replicas get it by replication). A
// library of this name already loaded is this very library: its name holds
// the script's SHA-1.
func (b *Backend) loadLibrary(ctx context.Context) error {
	load := func(ctx context.Context, c *goredis.Client) error {
		err := c.FunctionLoad(ctx, b.lib.Source).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	}
	var err error
	if b.cluster != nil {
		err = b.cluster.ForEachMaster(ctx, load)
	} else {
		err = b.client.Do(ctx, "function", "load", b.lib.Source).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("load decide function library: %w", err)
	}
	return nil
}

// functionsRefused reports whether err says this Redis will not load or run
// a function library for this user: a Redis before 7 (no FUNCTION command)
// or an ACL that forbids it. Another error (a Redis that does not answer)
// says nothing about functions.
func functionsRefused(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR unknown command") ||
		strings.HasPrefix(msg, "ERR unknown subcommand")
}

// withoutFunctions switches the decide calls to EVALSHA for good, and says
// so once, loudly: the service works, but Redis spends more per decision.
func (b *Backend) withoutFunctions(err error) {
	b.invoke.Store(b.evalshaInvocation())
	b.noFuncs.Do(func() {
		b.log.WithError(err).Warn("redis: cannot use the decide function library (Redis before 7, or this user may not run FUNCTION LOAD or FCALL); deciding with EVALSHA, which costs Redis more CPU per decision (set --redis-functions=false to choose it and silence this warning)")
	})
}

// functionMissing reports whether err is FCALL's answer for a function the
// node does not hold: a node restarted without persistence, FUNCTION
// FLUSH, a replica promoted or a master added that never loaded it.
func functionMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// exec sends one pipeline of FCALL or EVALSHA, one per call. Calls that met
// NOSCRIPT are sent again, once, with EVAL (the script's source). Calls
// whose function the node does not hold load the library and are sent
// again with FCALL; if the library cannot be loaded, with EVAL. Results
// are read per command from call.cmd.
//
// All calls should belong to one Redis node: with a cluster, go-redis
// splits a pipeline by node itself, but when one node fails it marks every
// command of the pipeline failed, also those other nodes answered.
func (b *Backend) exec(ctx context.Context, calls []*call) {
	b.pipeline(ctx, calls)
	// A script cache emptied by SCRIPT FLUSH, a restart or a failover to a
	// node that never loaded it: EVAL carries the source, runs it on the node
	// owning the keys and caches it there. A function missing on a node:
	// load the library (every master) and call it again.
	var again, missing []*call // to send again with EVAL; whose function is missing
	for _, c := range calls {
		// (HasErrorPrefix allocates even for a nil error.)
		if err := c.cmd.Err(); err != nil {
			switch {
			case goredis.HasErrorPrefix(err, "NOSCRIPT"):
				again = append(again, c)
			case functionMissing(err):
				missing = append(missing, c)
			case c.argv[0] == "fcall" && functionsRefused(err):
				// A node that will not run FCALL (a failover to a Redis
				// before 7, an ACL changed): EVALSHA from now on.
				b.withoutFunctions(err)
				again = append(again, c)
			}
		}
	}
	for _, c := range again {
		argv := append([]any(nil), c.argv...)
		argv[0], argv[1] = "eval", b.script.Source
		c.cmd = newDecideCmd(argv)
	}
	if len(missing) > 0 {
		err := b.loadLibrary(ctx)
		if err != nil && functionsRefused(err) {
			b.withoutFunctions(err)
		}
		b.log.WithError(err).WithField("calls", len(missing)).Debug("redis: function not found, loaded the library")
		for _, c := range missing {
			if err != nil {
				argv := append([]any(nil), c.argv...)
				argv[0], argv[1] = "eval", b.script.Source
				c.cmd = newDecideCmd(argv)
			} else {
				c.cmd = newDecideCmd(c.argv)
			}
		}
		again = append(again, missing...)
	}
	if len(again) > 0 {
		b.log.WithField("calls", len(again)).Debug("redis: NOSCRIPT or function not found, sending the calls again")
		b.pipeline(ctx, again)
	}
	b.tryAgain(ctx, calls)
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

// tryAgain sends again, until ctx ends, the calls a node refused with
// TRYAGAIN: while a slot moves, Redis refuses a call of several keys some
// of which are missing (a descriptor with a sliding log, whose keys are
// migrated one by one) and runs none of it, so sending it again is safe.
// The pause doubles from 1 ms to 64 ms; the slot's move ends it, usually
// within milliseconds (the keys of one descriptor are migrated one after
// the other).
func (b *Backend) tryAgain(ctx context.Context, calls []*call) {
	for pause := time.Millisecond; ; pause = min(2*pause, 64*time.Millisecond) {
		var again []*call
		for _, c := range calls {
			if goredis.IsTryAgainError(c.cmd.Err()) {
				again = append(again, c)
			}
		}
		if len(again) == 0 {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		for _, c := range again {
			c.cmd = newDecideCmd(c.cmd.Args())
		}
		b.pipeline(ctx, again)
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
	if b.opts.WaitReplicas > 0 {
		b.waitPipeline(ctx, calls) // the strict mode: wait.go
		return
	}
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
