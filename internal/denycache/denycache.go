// Package denycache wraps a backend.Backend with a local cache of known
// denials, so that a client far over its limit costs no round trip to the
// store until its denial ends.
//
// When the inner backend denies a check whose answer can be predicted for a
// known interval (see memo.go for the exact laws, per algorithm), the
// wrapper remembers the check's identity, rules, cost and what each rule's
// Outcome will be, and answers the same check locally until then: the same
// Decision the inner backend would give, with every Reset counting down.
// It answers only what it can answer exactly:
//
//   - the same identity and the same rules (algorithm, period, time zone,
//     limit and burst: a changed config misses);
//   - the same cost, or a larger one when every denying rule is a fixed
//     window (for the other algorithms a larger cost waits longer by an
//     amount the denial does not reveal);
//   - never a peek (cost 0) or a refund: those always reach the inner
//     backend, and a refund, or an admitted request that consumed, forgets
//     every denial remembered for its identity.
//
// The guarantee, within one process: a cached answer is the inner backend's
// answer. It never admits anything (only denials are cached), and it denies
// only where the inner backend would deny. What this process cannot see by
// itself is state changed by other instances sharing a Redis: another
// instance's refund or reset may make the store admit sooner than a cached
// denial says. Instances tell each other: every refund and reset is
// announced (Options.Announce; over Redis pub/sub in sluice) and the
// others Forget the identity. What an announcement cannot cover (a lost
// message, an instance without the cache) is bounded by Options.MaxAge: no
// denial is answered locally for longer, and the error only ever errs on
// the side of denying. Consumption by other instances only makes a denial
// longer, which the cache then under-reports.
//
// The clock: a denial's interval starts at the instant read before the
// inner backend is called, so it ends no later than the store's own (the
// store decided after that instant). Instants are read from a monotonic
// clock (Options.Clock), never the wall clock: the cache measures only how
// long ago it asked the store, and a step of the host's wall clock changes
// nothing it answers.
//
// A request decided together (backend.TogetherDecider: if one check is
// denied, none consumes) is answered only whole: when a remembered denial
// answers every one of its checks, the store would deny every check and
// charge none, so the remembered denials are its answer. When only some
// are remembered the store decides it: the others' answers (a peek's
// numbers where they fit) are the store's, and so are their refunds and
// charged costs. See DecideTogether.
//
// The cache is bounded (Options.Size identities), sharded by identity with
// one lock per shard, and evicts with CLOCK (an approximation of LRU that
// needs no list update on a hit). A hit takes no lock beyond its shard's
// and allocates only the returned slices.
//
// The package knows nothing of gRPC, Redis or configuration files.
package denycache

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// DefaultSize is the number of identities cached when Options.Size is 0.
const DefaultSize = 10000

// DefaultMaxAge is how long a denial is answered locally, at most, when
// Options.MaxAge is 0.
const DefaultMaxAge = 10 * time.Second

// maxShards bounds the number of lock shards.
const maxShards = 64

// genStripes is the number of invalidation generations (a power of two).
const genStripes = 1024

// Options configures a Backend. The zero Options is a sensible default.
type Options struct {
	// Size is the most identities held. 0 means DefaultSize.
	Size int
	// Shards is the number of lock shards, rounded down to a power of two.
	// 0 picks one shard per 64 identities, at most 64.
	Shards int
	// Clock is the cache's clock: the time elapsed since a fixed origin of
	// its choosing. It must never go back. Nil means the process's
	// monotonic clock, so a step of the wall clock (NTP, a VM resumed, an
	// operator) neither stretches nor cuts short a remembered denial: the
	// cache only ever measures intervals, from the instant it asked the
	// store to the instant it answers in its place.
	Clock func() time.Duration
	// MaxAge bounds how long a denial is answered locally after the inner
	// backend gave it: after MaxAge the next check reaches the inner
	// backend again, even if the denial lasts longer. It bounds what this
	// process cannot see for sure: state changed by other instances whose
	// announcement (see Announce) did not arrive. 0 means DefaultMaxAge;
	// negative means no bound beyond the denial's own end.
	MaxAge time.Duration
	// Announce, when not nil, is told the identity of every refund the
	// inner backend accepted and every Reset, after the fact, so that the
	// other instances sharing the store can forget their own denials of it
	// (see Forget). It must not block.
	Announce func(identity string)
}

// Backend is a backend.Backend that answers known denials locally and
// passes everything else to the inner backend. It is safe for concurrent
// use.
type Backend struct {
	inner    backend.Backend
	clock    func() time.Duration
	maxAge   limit.Micros // < 0: unbounded
	announce func(identity string)
	seed     maphash.Seed
	shards   []shard
	mask     uint64
	closed   atomic.Bool

	// gens are bumped by every invalidation. A denial is remembered only if
	// its identity's stripe did not move while the inner backend decided
	// it: a refund racing with the denial may have made it stale.
	gens [genStripes]atomic.Uint64
}

var _ backend.Backend = (*Backend)(nil)

// New wraps inner. Close closes inner too.
func New(inner backend.Backend, opts Options) *Backend {
	size := opts.Size
	if size <= 0 {
		size = DefaultSize
	}
	n := opts.Shards
	if n <= 0 {
		n = min(maxShards, max(1, size/64))
	}
	shards := 1
	for shards*2 <= n && shards*2 <= size {
		shards *= 2
	}
	per := (size + shards - 1) / shards
	b := &Backend{inner: inner, clock: opts.Clock, announce: opts.Announce, seed: maphash.MakeSeed(), shards: make([]shard, shards), mask: uint64(shards - 1)}
	if b.clock == nil {
		b.clock = monotonic()
	}
	switch {
	case opts.MaxAge == 0:
		b.maxAge = DefaultMaxAge.Microseconds()
	case opts.MaxAge < 0:
		b.maxAge = -1
	default:
		b.maxAge = max(1, opts.MaxAge.Microseconds())
	}
	for i := range b.shards {
		b.shards[i] = newShard(per)
	}
	return b
}

// Stats are the cache's counters since New.
type Stats struct {
	// Hits are checks answered locally.
	Hits uint64
	// Misses are checks that could have been answered locally (a cost, no
	// refund, some rules) but were not.
	Misses uint64
	// Inserts are denials remembered.
	Inserts uint64
	// Evictions are identities dropped to make room.
	Evictions uint64
	// Invalidations are identities forgotten because a refund or an
	// admitted cost changed their state.
	Invalidations uint64
	// Entries is the number of identities held now.
	Entries int
}

// Stats returns the counters. They are read shard by shard, so under load
// they are not one instant's snapshot.
func (b *Backend) Stats() Stats {
	var st Stats
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		st.Hits += sh.hits
		st.Misses += sh.misses + sh.quickMisses.Load()
		st.Inserts += sh.inserts
		st.Evictions += sh.evictions
		st.Invalidations += sh.invalidations
		st.Entries += len(sh.index)
		sh.mu.Unlock()
	}
	return st
}

// errShort answers the checks an inner backend left without a result.
var errShort = fmt.Errorf("denial cache: the inner backend returned too few results: %w", backend.ErrUnavailable)

// pending is a check passed to the inner backend.
type pending struct {
	i    int    // index in the caller's checks
	hash uint64 // of the identity
	gen  uint64 // the identity's generation before the inner call
}

// maxInlinePending is how many passed-on checks need no allocation.
const maxInlinePending = 8

// Decide answers the checks it can from the cache and passes the others,
// in their order, to the inner backend in one call.
func (b *Backend) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	if b.closed.Load() || ctx.Err() != nil {
		return b.inner.Decide(ctx, checks)
	}
	now := b.now()
	var results []backend.Result // allocated on the first hit
	var buf [maxInlinePending]pending
	passed := buf[:0]
	var out []limit.Outcome // the hits' outcomes, allocated on the first hit
	for i := range checks {
		c := &checks[i]
		h := maphash.String(b.seed, c.Identity)
		if cacheable(c) && !passedBefore(checks, passed, c.Identity) {
			if v, ok := b.shard(h).lookup(c.Identity, c.Rules, c.Cost.N, now); ok {
				if results == nil {
					results = make([]backend.Result, len(checks))
				}
				if len(out) < len(c.Rules) {
					n := 0
					for _, rest := range checks[i:] {
						n += len(rest.Rules)
					}
					out = make([]limit.Outcome, n)
				}
				results[i].Decision = v.answer(c.Cost.N, now, out[:len(c.Rules):len(c.Rules)])
				out = out[len(c.Rules):]
				continue
			}
		}
		passed = append(passed, pending{i: i, hash: h, gen: b.gens[stripe(h)].Load()})
	}
	if len(passed) == 0 {
		return results
	}
	sub := checks
	if len(passed) < len(checks) {
		sub = make([]backend.Check, len(passed))
		for k, p := range passed {
			sub[k] = checks[p.i]
		}
	}
	res := b.inner.Decide(ctx, sub)
	if results == nil && len(res) == len(checks) {
		results = res // nothing answered here: the inner backend's answer is the answer
	} else if results == nil {
		results = make([]backend.Result, len(checks))
	}
	for k, p := range passed {
		if k >= len(res) { // a broken inner backend: never return fewer results
			results[p.i].Err = errShort
			continue
		}
		results[p.i] = res[k]
		b.learn(&checks[p.i], &res[k], p, now)
	}
	return results
}

// learn updates the cache from the inner backend's answer to c.
func (b *Backend) learn(c *backend.Check, r *backend.Result, p pending, now limit.Micros) {
	if r.Err != nil || len(c.Rules) == 0 {
		return
	}
	gen := &b.gens[stripe(p.hash)]
	sh := b.shard(p.hash)
	if c.Cost.Refund || ((r.Allowed || c.Cost.Charge) && c.Cost.N > 0) {
		// The state changed: remembered denials of this identity may now
		// be wrong (a refund) or report stale numbers (a consumption, or
		// a charged cost, consumed even when denied).
		gen.Add(1)
		if sh.live.Load() > 0 { // see insert for why this needs no lock
			sh.invalidate(c.Identity)
		}
		if c.Cost.Refund && b.announce != nil {
			b.announce(c.Identity) // other instances' denials may be too long now
		}
		return
	}
	// A peek or a denial changes no count, but a rule sharing a remembered
	// rule's state with another limit or burst may have shortened that
	// state's life in the store (it expires by the latest rule's
	// reckoning): forget the identity's denials then.
	var v variant
	ok := !r.Allowed && c.Cost.N > 0
	if ok {
		v, ok = remember(c.Rules, c.Cost.N, r.Decision, now)
		if ok && b.maxAge >= 0 && v.until-now > b.maxAge {
			v.until = now + b.maxAge
		}
	}
	if !ok && sh.live.Load() == 0 {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.conflicts(c.Identity, c.Rules) {
		gen.Add(1)
		sh.drop(c.Identity)
		return
	}
	if ok {
		sh.insert(c.Identity, v, now, gen, p.gen)
	}
}

// cacheable reports whether a cached denial may answer c. A charged cost
// must reach the store, which takes it even when denied.
func cacheable(c *backend.Check) bool {
	return c.Cost.N > 0 && !c.Cost.Refund && !c.Cost.Charge && len(c.Rules) > 0
}

// passedBefore reports whether an earlier check of this batch with the same
// identity goes to the inner backend: a later one must follow it there, so
// that it sees whatever the earlier one changes.
func passedBefore(checks []backend.Check, passed []pending, identity string) bool {
	for _, p := range passed {
		if checks[p.i].Identity == identity {
			return true
		}
	}
	return false
}

// now reads the cache's clock in microseconds. Every instant the cache
// stores or compares comes from here: an instant on the cache's own
// timeline, never a wall-clock time.
func (b *Backend) now() limit.Micros { return b.clock().Microseconds() }

// monotonic returns a clock reading the time elapsed since the call, from
// the monotonic clock (time.Since of a time.Now reading uses it).
func monotonic() func() time.Duration {
	origin := time.Now()
	return func() time.Duration { return time.Since(origin) }
}

func (b *Backend) shard(h uint64) *shard { return &b.shards[h&b.mask] }

func stripe(h uint64) uint64 { return h >> 54 } // the top 10 bits: genStripes

// Len returns the number of identities held.
func (b *Backend) Len() int {
	n := 0
	for i := range b.shards {
		n += b.shards[i].len()
	}
	return n
}

// Ping asks the inner backend.
func (b *Backend) Ping(ctx context.Context) error { return b.inner.Ping(ctx) }

// Close closes the inner backend. Later checks all reach it (and fail
// there).
func (b *Backend) Close() error {
	b.closed.Store(true)
	return b.inner.Close()
}
