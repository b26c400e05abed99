package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// CheckWait validates Options.WaitReplicas and Options.WaitTimeout: no
// negative count or timeout, and a WAIT that ends before the round trip's
// own bound (timeout, normalized), so a decision fails for want of
// replicas rather than for want of time.
func CheckWait(replicas int, wait, timeout time.Duration) error {
	if replicas < 0 {
		return fmt.Errorf("redis wait replicas %d is negative", replicas)
	}
	if wait < 0 {
		return fmt.Errorf("redis wait timeout %v is negative", wait)
	}
	if replicas > 0 && timeout > 0 && wait >= timeout {
		return fmt.Errorf("redis wait timeout %v must be below the redis timeout %v", wait, timeout)
	}
	return nil
}

// errNotReplicated fails the decisions of a pipeline whose writes fewer
// replicas than Options.WaitReplicas acknowledged. It is not a reply of
// Redis, so it reads as unavailable (backend.ErrUnavailable) and counts
// toward the node's breaker, as Redis's own NOREPLICAS does.
var errNotReplicated = errors.New("not acknowledged by enough replicas")

// waitPipeline is pipeline in the strict mode (Options.WaitReplicas): the
// calls' commands, then WAIT, on one connection to the calls' node, so
// that WAIT covers their writes. A call Redis answered fails when WAIT
// counts fewer replicas than asked (or fails itself); the counts it took
// stay in Redis. On a cluster the calls go to their masters' own clients,
// one pipeline per master, concurrently (a cluster pipeline would send the
// keyless WAIT to any master), so a MOVED or ASK reply fails its call.
func (b *Backend) waitPipeline(ctx context.Context, calls []*call) {
	if b.cluster == nil {
		b.waitOn(ctx, b.client.Pipeline(), calls)
		return
	}
	type group struct {
		node  *goredis.Client
		calls []*call
	}
	var groups []*group
	byAddr := map[string]*group{}
	for _, c := range calls {
		key, _ := c.argv[3].(*string)
		if key == nil {
			c.cmd.SetErr(errors.New("redis backend: strict mode: a call without a key"))
			continue
		}
		node, err := b.cluster.MasterForKey(ctx, *key)
		if err != nil {
			c.cmd.SetErr(err)
			continue
		}
		g := byAddr[node.Options().Addr]
		if g == nil {
			g = &group{node: node}
			byAddr[node.Options().Addr] = g
			groups = append(groups, g)
		}
		g.calls = append(g.calls, c)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.waitOn(ctx, g.node.Pipeline(), g.calls)
		}()
	}
	wg.Wait()
}

// waitOn sends the calls and WAIT in the pipeline p, of one connection.
func (b *Backend) waitOn(ctx context.Context, p goredis.Pipeliner, calls []*call) {
	for _, c := range calls {
		_ = p.Process(ctx, c.cmd)
	}
	wait := p.Do(ctx, "wait", b.opts.WaitReplicas, b.opts.WaitTimeout.Milliseconds())
	_, err := p.Exec(ctx)
	acked, werr := wait.Int()
	for _, c := range calls {
		switch {
		case c.cmd.Err() != nil:
		case c.cmd.Val() == nil && err != nil:
			c.cmd.SetErr(err) // as pipeline does: a handshake error Exec alone returned
		case werr != nil:
			c.cmd.SetErr(fmt.Errorf("%w: WAIT %d %d: %w", errNotReplicated, b.opts.WaitReplicas, b.opts.WaitTimeout.Milliseconds(), werr))
		case acked < b.opts.WaitReplicas:
			c.cmd.SetErr(fmt.Errorf("%w: %d of %d replicas within %v (SLUICE_REDIS_WAIT_REPLICAS)", errNotReplicated, acked, b.opts.WaitReplicas, b.opts.WaitTimeout))
		}
	}
	if b.opts.ObserveBatch != nil {
		b.opts.ObserveBatch(len(calls) + 1)
	}
}
