package denycache

import (
	"sync"
	"sync/atomic"

	"github.com/sluice-rl/sluice/pkg/limit"
)

// maxVariants is how many remembered denials one identity keeps (different
// rule sets or costs). A new one replaces the one that expires first.
const maxVariants = 4

// slot holds the remembered denials of one identity. Slots live in a
// shard's fixed ring, recycled by the CLOCK hand.
type slot struct {
	identity string
	ref      bool // read since the hand last passed
	n        int  // variants in use
	variants [maxVariants]variant
}

// shard is one lock, a map from identity to slot, and the CLOCK ring.
type shard struct {
	mu    sync.Mutex
	index map[string]int32
	slots []slot
	hand  int
	free  []int32 // slots emptied by expiry or invalidation

	// live is len(index), readable without the lock. insert raises it
	// before it reads the generation, so an invalidation that bumps the
	// generation and then reads live == 0 cannot miss an insert in flight:
	// that insert sees the new generation and gives up.
	live atomic.Int32

	// quickMisses are misses decided without the lock (live == 0).
	quickMisses atomic.Uint64

	hits, misses, inserts, evictions, invalidations uint64
}

func newShard(capacity int) shard {
	return shard{index: make(map[string]int32), slots: make([]slot, 0, capacity)}
}

// lookup returns the remembered denial that answers cost n for identity
// and rules at now, or false (a miss). The variant returned is a copy whose
// memos are never modified, so the caller computes the answer outside the
// lock.
func (s *shard) lookup(identity string, rules []limit.Rule, n uint64, now limit.Micros) (variant, bool) {
	return s.find(identity, rules, n, now, true)
}

// find is lookup; it counts the hit or the miss when count is set. A
// request decided together looks its checks up uncounted, and counts them
// once it knows whether the cache answers it (countHit, countMiss).
func (s *shard) find(identity string, rules []limit.Rule, n uint64, now limit.Micros, count bool) (variant, bool) {
	if s.live.Load() == 0 {
		if count {
			s.quickMisses.Add(1)
		}
		return variant{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[identity]
	if !ok {
		if count {
			s.misses++
		}
		return variant{}, false
	}
	sl := &s.slots[i]
	for j := 0; j < sl.n; j++ {
		v := &sl.variants[j]
		if now >= v.until { // expired: drop it and look at what moved into j
			sl.remove(j)
			j--
			continue
		}
		if v.matches(rules) && v.answers(n, now) {
			sl.ref = true
			if count {
				s.hits++
			}
			return *v, true
		}
	}
	if sl.n == 0 {
		s.release(i)
	}
	if count {
		s.misses++
	}
	return variant{}, false
}

// countHit counts a check answered from the cache after an uncounted find.
func (s *shard) countHit() {
	s.mu.Lock()
	s.hits++
	s.mu.Unlock()
}

// countMiss counts a check that the cache could have answered but did not,
// after an uncounted find.
func (s *shard) countMiss() { s.quickMisses.Add(1) }

// insert remembers v for identity, evicting by CLOCK when the shard is
// full, unless gen has moved from seen (an invalidation raced with the
// denial). The caller holds s.mu.
func (s *shard) insert(identity string, v variant, now limit.Micros, gen *atomic.Uint64, seen uint64) {
	s.live.Add(1) // before reading gen: see live
	defer func() { s.live.Store(int32(len(s.index))) }()
	if gen.Load() != seen {
		return
	}
	i, ok := s.index[identity]
	if !ok {
		i = s.claim(now)
		sl := &s.slots[i]
		sl.identity, sl.ref = identity, false
		s.index[identity] = i
	}
	s.slots[i].add(v, now)
	s.inserts++
}

// claim returns a free slot index: a released one, a new one while below
// capacity, or the CLOCK victim.
func (s *shard) claim(now limit.Micros) int32 {
	if k := len(s.free); k > 0 {
		i := s.free[k-1]
		s.free = s.free[:k-1]
		return i
	}
	if len(s.slots) < cap(s.slots) {
		s.slots = append(s.slots, slot{})
		return int32(len(s.slots) - 1)
	}
	// Every slot is in use. Sweep: an expired slot or one not read since the
	// hand last passed is the victim; the others lose their ref bit. Two
	// turns always find one.
	for {
		sl := &s.slots[s.hand]
		i := int32(s.hand)
		s.hand = (s.hand + 1) % len(s.slots)
		if sl.ref && !sl.expired(now) {
			sl.ref = false
			continue
		}
		delete(s.index, sl.identity)
		*sl = slot{}
		s.evictions++
		return i
	}
}

// release empties slot i and makes it reusable.
func (s *shard) release(i int32) {
	defer func() { s.live.Store(int32(len(s.index))) }()
	delete(s.index, s.slots[i].identity)
	s.slots[i] = slot{}
	s.free = append(s.free, i)
}

// invalidate forgets every denial remembered for identity.
func (s *shard) invalidate(identity string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop(identity)
}

// clear forgets every denial remembered in the shard.
func (s *shard) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range s.index {
		s.release(i) // deleting from a map while ranging over it is allowed
		s.invalidations++
	}
}

// drop forgets every denial remembered for identity. The caller holds
// s.mu.
func (s *shard) drop(identity string) {
	if i, ok := s.index[identity]; ok {
		s.release(i)
		s.invalidations++
	}
}

// conflicts reports whether a denial remembered for identity has a rule
// with the same state as one of rules but another measure (limit, burst,
// or, for a meter, whose state outlives them, period or algorithm). The
// caller holds s.mu.
func (s *shard) conflicts(identity string, rules []limit.Rule) bool {
	i, ok := s.index[identity]
	if !ok {
		return false
	}
	sl := &s.slots[i]
	for j := 0; j < sl.n; j++ {
		for _, m := range sl.variants[j].memos {
			for k := range rules {
				r := &rules[k]
				if r.Key() == m.rule.Key() && !sameMeasure(r, &m.rule) {
					return true
				}
			}
		}
	}
	return false
}

// len returns the identities held.
func (s *shard) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.index)
}

// add stores v, replacing a variant with the same rules and cost, or the
// one that expires first when all are in use.
func (sl *slot) add(v variant, now limit.Micros) {
	for j := 0; j < sl.n; j++ {
		w := &sl.variants[j]
		if now >= w.until || (w.cost == v.cost && w.sameRules(&v)) {
			sl.variants[j] = v
			return
		}
	}
	if sl.n < maxVariants {
		sl.variants[sl.n] = v
		sl.n++
		return
	}
	first := 0
	for j := 1; j < sl.n; j++ {
		if sl.variants[j].until < sl.variants[first].until {
			first = j
		}
	}
	sl.variants[first] = v
}

// remove removes variant j, keeping the others packed.
func (sl *slot) remove(j int) {
	sl.n--
	sl.variants[j] = sl.variants[sl.n]
	sl.variants[sl.n] = variant{}
}

// expired reports whether every variant has expired at now.
func (sl *slot) expired(now limit.Micros) bool {
	for j := 0; j < sl.n; j++ {
		if now < sl.variants[j].until {
			return false
		}
	}
	return true
}

// sameMeasure reports whether a and b, which share their state, measure it
// alike: a denial remembered under one holds under the other.
func sameMeasure(a, b *limit.Rule) bool {
	return a.Limit == b.Limit && a.Burst == b.Burst && a.Algorithm == b.Algorithm &&
		a.Unit == b.Unit && max(a.Multiplier, 1) == max(b.Multiplier, 1)
}
