// Package memory is sluice's embedded backend: rate-limit state in sharded
// in-process maps, decided with pkg/limit's functions directly. It serves a
// single sluice instance with no Redis at all, and is the store of the
// "local" failure mode.
//
// State is keyed by Check.Identity, then by rule (limit.Rule.Key, which
// matches limit.Rule.ID). A check locks only the shard of its identity, so
// checks of different descriptors rarely contend. Every state carries its
// own expiry (limit.State.Expires), which no rule sharing it can shorten;
// every entry remembers when all its states expire; a background sweeper
// drops expired entries, and an expired entry met before the sweeper is
// treated as empty.
//
// The number of descriptor identities held is bounded (Options.
// MaxDescriptors). When a shard is full, storing a new identity evicts
// one: an expired one if one of the shard's least recently used is
// expired, else the least recently used. An evicted descriptor restarts
// empty (its next request sees full quota), so the bound should sit well
// above the number of descriptors active at once; Evictions counts them.
//
// The package knows nothing of Redis, gRPC or configuration files, and
// nothing of how a rule counts: the arithmetic is pkg/limit's (the token
// bucket's refill is limit's drain, in pkg/limit/meter.go).
package memory

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// Defaults for Options' zero values.
const (
	// DefaultSweepInterval is how often expired state is dropped.
	DefaultSweepInterval = 10 * time.Second
	// DefaultMaxDescriptors bounds the descriptor identities held: about
	// 0.3 GB of heap for one-rule descriptors, 0.56 GB for three rules
	// (measured with 17-byte identities).
	DefaultMaxDescriptors = 1_000_000
	// evictScan is how many of a full shard's least recently used entries
	// are searched for an expired one before the least recently used is
	// evicted.
	evictScan = 8
	// minShards is the fewest lock shards the default picks.
	minShards = 64
)

// Options configures a Backend. The zero Options is a sensible default:
// the wall clock, max(64, 4×GOMAXPROCS) shards, a sweep every
// DefaultSweepInterval, at most DefaultMaxDescriptors descriptors.
type Options struct {
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Shards is the number of lock shards, rounded up to a power of two.
	// 0 means max(64, 4×GOMAXPROCS) rounded up.
	Shards int
	// SweepInterval is how often the background sweeper drops expired
	// state. 0 means DefaultSweepInterval; a negative value disables the
	// sweeper (call Sweep yourself).
	SweepInterval time.Duration
	// MaxDescriptors bounds how many descriptor identities the backend
	// holds; each shard holds at most MaxDescriptors/Shards, rounded up.
	// Storing one more evicts one (see the package doc). 0 means
	// DefaultMaxDescriptors; a negative value means no bound.
	MaxDescriptors int
}

// Backend is the in-process backend. It is safe for concurrent use. Create
// it with New and stop its sweeper with Close; the zero Backend is not
// usable. Its memory grows with the number of descriptors that hold state,
// up to Options.MaxDescriptors, and shrinks as their state expires.
type Backend struct {
	now    func() time.Time
	seed   maphash.Seed
	shards []shard
	mask   uint64

	evictions atomic.Uint64

	closed atomic.Bool
	stop   chan struct{}  // closed by Close to stop the sweeper
	swept  sync.WaitGroup // the sweeper goroutine
	once   sync.Once
}

// shard is one lock and the entries whose identity hashes to it, in a
// list from the most to the least recently used.
type shard struct {
	mu      sync.Mutex
	entries map[string]*entry
	max     int      // entries held at most; 0: no bound
	lru     entry    // sentinel: lru.next is the most recently used
	_       [40]byte // keep neighbouring shards' locks off one cache line
}

// entry is the state of one descriptor identity: one ruleState per rule
// seen, and when all of it expires.
type entry struct {
	id         string
	expiry     limit.Micros // 0: all states are already equivalent to zero
	rules      []ruleState
	prev, next *entry // the shard's recency list
}

// ruleState is one rule's state. The state's Expires, not the latest rule
// seen, says when it expires: rules sharing it with other limits cannot
// drop it early.
type ruleState struct {
	key   limit.StateKey
	id    string // limit.Rule.ID, to order states deterministically
	state limit.State
}

var _ backend.Backend = (*Backend)(nil)

// New returns a Backend and starts its sweeper unless opts disables it.
func New(opts Options) *Backend {
	b := &Backend{now: opts.Now, seed: maphash.MakeSeed(), stop: make(chan struct{})}
	if b.now == nil {
		b.now = time.Now
	}
	n := opts.Shards
	if n <= 0 {
		n = max(minShards, 4*runtime.GOMAXPROCS(0))
	}
	size := 1
	for size < n && size < 1<<16 {
		size <<= 1
	}
	b.shards = make([]shard, size)
	b.mask = uint64(size - 1)
	limit := opts.MaxDescriptors
	if limit == 0 {
		limit = DefaultMaxDescriptors
	}
	for i := range b.shards {
		sh := &b.shards[i]
		sh.entries = make(map[string]*entry)
		sh.lru.next, sh.lru.prev = &sh.lru, &sh.lru
		if limit > 0 {
			sh.max = (limit + size - 1) / size
		}
	}
	interval := opts.SweepInterval
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	if interval > 0 {
		b.swept.Add(1)
		go b.sweeper(interval)
	}
	return b
}

func (b *Backend) sweeper(interval time.Duration) {
	defer b.swept.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
			b.Sweep()
		}
	}
}

// errClosed is returned for checks decided after Close.
var errClosed = fmt.Errorf("memory backend is closed: %w", backend.ErrUnavailable)

// Decide decides every check at the clock's current instant, each
// atomically under its shard's lock.
func (b *Backend) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	results := make([]backend.Result, len(checks))
	var fail error
	switch {
	case b.closed.Load():
		fail = errClosed
	case ctx.Err() != nil:
		fail = fmt.Errorf("memory backend: %w", ctx.Err())
	}
	if fail != nil {
		for i := range results {
			results[i].Err = fail
		}
		return results
	}
	now := limit.MicrosOf(b.now())
	for i := range checks {
		results[i].Decision = b.decide(&checks[i], now)
	}
	return results
}

// maxInlineRules is how many rules one check decides without allocating
// the slice of state pointers.
const maxInlineRules = 8

func (b *Backend) decide(c *backend.Check, now limit.Micros) limit.Decision {
	if len(c.Rules) == 0 {
		return limit.Decide(nil, nil, now, c.Cost)
	}
	sh := &b.shards[b.shardIndex(c.Identity)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return b.decideLocked(sh, c, now)
}

// shardIndex is the index in b.shards of the shard holding identity.
func (b *Backend) shardIndex(identity string) uint64 {
	return maphash.String(b.seed, identity) & b.mask
}

// decideLocked decides c, which has rules, in its shard sh, whose lock the
// caller holds.
func (b *Backend) decideLocked(sh *shard, c *backend.Check, now limit.Micros) limit.Decision {
	e := sh.entries[c.Identity]
	if e == nil {
		if sh.max > 0 && len(sh.entries) >= sh.max {
			b.evict(sh, now)
		}
		e = &entry{id: c.Identity, rules: make([]ruleState, 0, len(c.Rules))}
		sh.entries[c.Identity] = e
	} else {
		sh.unlink(e)
		if e.expiry <= now {
			// Everything stored is equivalent to zero by now: start afresh,
			// keeping the arrays.
			for j := range e.rules {
				e.rules[j].state = limit.State{Log: e.rules[j].state.Log[:0]}
			}
		}
	}
	sh.pushFront(e)
	// Find (or add) every rule's state before taking pointers: appending
	// may move the slice.
	var idx [maxInlineRules]int
	index := idx[:0]
	for _, r := range c.Rules {
		index = append(index, e.find(r))
	}
	var ptrs [maxInlineRules]*limit.State
	states := ptrs[:0]
	for _, j := range index {
		states = append(states, &e.rules[j].state)
	}
	d := limit.Decide(c.Rules, states, now, c.Cost)

	e.expiry = e.settle(c.Rules, now)
	if e.expiry == 0 {
		sh.remove(e) // nothing left worth keeping
	}
	return d
}

// evict makes room for one entry in the full shard sh: it drops an expired
// entry among the evictScan least recently used, else the least recently
// used one, and counts the eviction of a live one.
func (b *Backend) evict(sh *shard, now limit.Micros) {
	victim := sh.lru.prev
	for e, i := sh.lru.prev, 0; e != &sh.lru && i < evictScan; e, i = e.prev, i+1 {
		if e.expiry <= now {
			sh.remove(e)
			return
		}
	}
	if victim != &sh.lru {
		sh.remove(victim)
		b.evictions.Add(1)
	}
}

// unlink takes e out of the recency list.
func (sh *shard) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

// pushFront makes e the most recently used entry.
func (sh *shard) pushFront(e *entry) {
	e.prev, e.next = &sh.lru, sh.lru.next
	sh.lru.next.prev = e
	sh.lru.next = e
}

// remove drops e from the shard.
func (sh *shard) remove(e *entry) {
	sh.unlink(e)
	delete(sh.entries, e.id)
}

// find returns the index of r's state in e.rules, adding a zero state for a
// rule not seen before.
func (e *entry) find(r limit.Rule) int {
	k := r.Key()
	for j := range e.rules {
		if e.rules[j].key == k {
			return j
		}
	}
	e.rules = append(e.rules, ruleState{key: k, id: r.ID()})
	return len(e.rules) - 1
}

// settle drops the states already equivalent to zero, and the states of
// rules the check did not name beyond backend.MaxOtherStates, and returns
// when the rest all expire (0 if nothing is left). limit.Decide keeps every
// stored state's Expires.
func (e *entry) settle(rules []limit.Rule, now limit.Micros) limit.Micros {
	var expiry limit.Micros
	kept := e.rules[:0]
	others := 0
	for _, rs := range e.rules {
		if rs.state.Expires <= now {
			continue
		}
		if !names(rules, rs.key) && !rs.key.OwnsKey() {
			others++
		}
		kept = append(kept, rs)
	}
	if others > backend.MaxOtherStates && backend.CountsBeside(rules) {
		kept = trimOthers(kept, rules, others-backend.MaxOtherStates)
	}
	for _, rs := range kept {
		expiry = max(expiry, rs.state.Expires)
	}
	clear(e.rules[len(kept):]) // let dropped logs be collected
	e.rules = kept
	return expiry
}

// names reports whether one of rules keeps its state under k.
func names(rules []limit.Rule, k limit.StateKey) bool {
	for _, r := range rules {
		if r.Key() == k {
			return true
		}
	}
	return false
}

// trimOthers drops from states the drop states of rules not in rules that
// expire last (ties: the larger rule ID), keeping the order of the rest.
func trimOthers(states []ruleState, rules []limit.Rule, drop int) []ruleState {
	var others []int
	for i, rs := range states {
		if !names(rules, rs.key) && !rs.key.OwnsKey() {
			others = append(others, i)
		}
	}
	slices.SortFunc(others, func(a, b int) int {
		x, y := &states[a], &states[b]
		if c := cmp.Compare(y.state.Expires, x.state.Expires); c != 0 {
			return c
		}
		return strings.Compare(y.id, x.id)
	})
	gone := make(map[int]bool, drop)
	for _, i := range others[:drop] {
		gone[i] = true
	}
	kept := states[:0]
	for i, rs := range states {
		if !gone[i] {
			kept = append(kept, rs)
		}
	}
	return kept
}

// Sweep drops every entry whose state has expired by the clock's current
// instant. The background sweeper calls it periodically.
func (b *Backend) Sweep() {
	now := limit.MicrosOf(b.now())
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for _, e := range sh.entries {
			if e.expiry <= now {
				sh.remove(e)
			}
		}
		sh.mu.Unlock()
	}
}

// Len returns the number of descriptor identities with stored state. A
// metrics exporter reads it.
func (b *Backend) Len() int {
	n := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many descriptors were evicted while their state
// still counted, to stay within Options.MaxDescriptors (expired ones
// dropped to make room are not counted). A metrics exporter reads it.
func (b *Backend) Evictions() uint64 { return b.evictions.Load() }

// Ping reports an error wrapping backend.ErrUnavailable after Close, nil
// otherwise: in-process state is always reachable.
func (b *Backend) Ping(context.Context) error {
	if b.closed.Load() {
		return errClosed
	}
	return nil
}

// Close stops the sweeper and waits for it. Later checks fail with an
// error wrapping backend.ErrUnavailable. Close is idempotent.
func (b *Backend) Close() error {
	b.once.Do(func() {
		b.closed.Store(true)
		close(b.stop)
		b.swept.Wait()
	})
	return nil
}
