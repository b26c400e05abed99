package redis

import (
	"context"
	"slices"
)

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
