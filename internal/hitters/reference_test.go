package hitters

// A plain implementation of the tracker (a Go map from key to heap
// position, container/heap, one formatted string per takeover, a slice of
// filter cells), written for clarity rather than speed, as the reference
// the differential tests compare the current implementation with.
// newRefTracker takes the seed so that both trackers hash alike.

import (
	"container/heap"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

var refWindowShapes = [windows]struct {
	width time.Duration
	n     int
}{
	Minute: {10 * time.Second, 6},
	Hour:   {5 * time.Minute, 12},
}

type refCounter struct {
	key   uint64
	count uint64 // estimated weight: true weight ≤ count ≤ true weight + err
	err   uint64 // overestimation bound: the evicted item's count at takeover
	item  Item   // what the key names, from the latest update
}

// refSummary is Filtered Space-Saving (Homem and Carvalho, 2010): the
// space-saving algorithm (Metwally, Agrawal and El Abbadi, 2005) over a
// fixed number of counters, behind filter cells (alpha) where an item
// that is not monitored is counted until its cell's count exceeds the
// smallest monitored count.
type refSummary struct {
	cap   int
	idx   map[uint64]int // key → position in heap
	heap  refMinHeap
	alpha []uint64
	total uint64
}

func newRefSummary(capacity int) *refSummary {
	idx := make(map[uint64]int, capacity)
	cells := 1
	for cells < 8*capacity {
		cells *= 2
	}
	return &refSummary{cap: capacity, idx: idx, heap: refMinHeap{items: make([]refCounter, 0, capacity), idx: idx}, alpha: make([]uint64, cells)}
}

// refCell is the index of key's filter cell: bits 3 and up (the low three
// choose the shard).
func (s *refSummary) refCell(key uint64) int { return int(key>>3) % len(s.alpha) }

// add counts weight w for key; item names the key and is built only when
// the key is new to the refSummary (mk), or refreshed by update.
func (s *refSummary) add(key uint64, w uint64, mk func() Item, update func(*Item)) {
	s.total += w
	if i, ok := s.idx[key]; ok {
		c := &s.heap.items[i]
		c.count += w
		if update != nil {
			update(&c.item)
		}
		heap.Fix(&s.heap, i)
		return
	}
	if len(s.heap.items) < s.cap {
		heap.Push(&s.heap, refCounter{key: key, count: w, item: mk()})
		if update != nil {
			update(&s.heap.items[s.idx[key]].item)
		}
		return
	}
	// Counted in the filter while its cell's count stays at most the
	// smallest count.
	cell := s.refCell(key)
	if s.alpha[cell]+w <= s.heap.items[0].count {
		s.alpha[cell] += w
		return
	}
	// Take over the smallest refCounter: the new item may have been seen up
	// to its cell's count times while not monitored; the evicted item's
	// count goes back to its cell.
	min := &s.heap.items[0]
	delete(s.idx, min.key)
	alpha := s.alpha[cell]
	s.alpha[s.refCell(min.key)] = max(s.alpha[s.refCell(min.key)], min.count)
	min.err = alpha
	min.count = alpha + w
	min.key = key
	min.item = mk()
	if update != nil {
		update(&min.item)
	}
	s.idx[key] = 0
	heap.Fix(&s.heap, 0)
}

// reset empties the refSummary, keeping its memory.
func (s *refSummary) reset() {
	clear(s.idx)
	clear(s.heap.items)
	s.heap.items = s.heap.items[:0]
	clear(s.alpha)
	s.total = 0
}

// refMinHeap orders counters by count, smallest first, and keeps idx in step.
type refMinHeap struct {
	items []refCounter
	idx   map[uint64]int
}

func (h *refMinHeap) Len() int           { return len(h.items) }
func (h *refMinHeap) Less(i, j int) bool { return h.items[i].count < h.items[j].count }
func (h *refMinHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.idx[h.items[i].key] = i
	h.idx[h.items[j].key] = j
}
func (h *refMinHeap) Push(x any) {
	c := x.(refCounter)
	h.idx[c.key] = len(h.items)
	h.items = append(h.items, c)
}
func (h *refMinHeap) Pop() any {
	c := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.idx, c.key)
	return c
}

// refTracker counts descriptors. It is safe for concurrent use.
type refTracker struct {
	opts   Options
	seed   maphash.Seed
	shards [shards]refShard
}

type refShard struct {
	mu    sync.Mutex
	rings [kinds][windows]refRing
}

// refRing is one window's buckets; slot i holds bucket number nums[i].
type refRing struct {
	width time.Duration
	sums  []*refSummary
	nums  []int64
}

// newRefTracker returns a refTracker hashing with seed.
func newRefTracker(o Options, seed maphash.Seed) *refTracker {
	if o.Capacity <= 0 {
		o.Capacity = DefaultCapacity
	}
	if o.MaxValueLen <= 0 {
		o.MaxValueLen = DefaultMaxValueLen
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &refTracker{opts: o, seed: seed}
	for s := range t.shards {
		for k := range kinds {
			for w := range windows {
				shape := refWindowShapes[w]
				r := refRing{width: shape.width, sums: make([]*refSummary, shape.n), nums: make([]int64, shape.n)}
				for i := range r.sums {
					r.sums[i] = newRefSummary(o.Capacity)
					r.nums[i] = -1
				}
				t.shards[s].rings[k][w] = r
			}
		}
	}
	return t
}

// Record counts one decided descriptor: a hit of weight cost under
// rules (the names of the rules decided), and, when denied, a denial
// under the binding rule's name, whose reset is the denial's wait.
func (t *refTracker) Record(domain string, entries []descriptor.Entry, rules string, cost uint64, denied bool, binding string, reset time.Duration) {
	now := t.opts.Now()
	// The descriptor is formatted (a copy of the values) at most once, and
	// only when a refSummary takes it in.
	desc, formatted := "", false
	format := func() string {
		if !formatted {
			desc, formatted = t.format(entries), true
		}
		return desc
	}
	seen := func(it *Item) { it.LastSeen = now }
	t.add(Hits, domain, entries, rules, cost, now, format, seen)
	if denied {
		t.add(Denials, domain, entries, binding, 1, now, format, func(it *Item) { it.LastSeen, it.ResetAt = now, now.Add(reset) })
	}
}

// add counts w for (domain, rule, entries) in every window of kind.
func (t *refTracker) add(kind Kind, domain string, entries []descriptor.Entry, rule string, w uint64, now time.Time, format func() string, update func(*Item)) {
	var h maphash.Hash
	h.SetSeed(t.seed)
	h.WriteString(domain)
	h.WriteByte(0)
	h.WriteString(rule)
	for _, e := range entries {
		h.WriteByte(0)
		h.WriteString(e.Key)
		h.WriteByte(1)
		h.WriteString(e.Value)
	}
	key := h.Sum64()
	mk := func() Item {
		return Item{Domain: domain, Rule: rule, Descriptor: format()}
	}
	sh := &t.shards[key%shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for win := range windows {
		sh.rings[kind][win].current(now).add(key, w, mk, update)
	}
}

// current returns the refSummary of now's bucket, emptied if it held an
// older bucket.
func (r *refRing) current(now time.Time) *refSummary {
	n := now.UnixNano() / int64(r.width)
	i := int(n % int64(len(r.sums)))
	if r.nums[i] != n {
		r.sums[i].reset()
		r.nums[i] = n
	}
	return r.sums[i]
}

// Top returns the n heaviest items of kind over window, heaviest first,
// keeping only domain's items when domain is not empty and rule's when
// rule is not empty.
func (t *refTracker) Top(kind Kind, window Window, domain, rule string, n int) []Entry {
	if kind < 0 || kind >= kinds || window < 0 || window >= windows || n <= 0 {
		return nil
	}
	now := t.opts.Now()
	merged := map[uint64]*Entry{}
	for s := range t.shards {
		sh := &t.shards[s]
		sh.mu.Lock()
		r := &sh.rings[kind][window]
		cur := now.UnixNano() / int64(r.width)
		var live []*refSummary
		for i, sum := range r.sums {
			if r.nums[i] < 0 || r.nums[i] > cur || r.nums[i] <= cur-int64(len(r.sums)) {
				continue
			}
			live = append(live, sum)
			for _, c := range sum.heap.items {
				if (domain != "" && c.item.Domain != domain) || (rule != "" && c.item.Rule != rule) {
					continue
				}
				e := merged[c.key]
				if e == nil {
					e = &Entry{Item: c.item}
					merged[c.key] = e
				}
				e.Count += c.count
				e.Error += c.err
				if c.item.LastSeen.After(e.LastSeen) {
					e.LastSeen = c.item.LastSeen
				}
				if c.item.ResetAt.After(e.ResetAt) {
					e.ResetAt = c.item.ResetAt
				}
			}
		}
		// A live bucket that does not monitor an item of this shard adds
		// its filter cell's count, as a count and as an error.
		for key, e := range merged {
			if key%shards != uint64(s) {
				continue
			}
			for _, sum := range live {
				if _, ok := sum.idx[key]; !ok {
					a := sum.alpha[sum.refCell(key)]
					e.Count += a
					e.Error += a
				}
			}
		}
		sh.mu.Unlock()
	}
	out := make([]Entry, 0, len(merged))
	for _, e := range merged {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Count != b.Count:
			if a.Count > b.Count {
				return -1
			}
			return 1
		case a.Domain != b.Domain:
			return strings.Compare(a.Domain, b.Domain)
		case a.Rule != b.Rule:
			return strings.Compare(a.Rule, b.Rule)
		}
		return strings.Compare(a.Descriptor, b.Descriptor)
	})
	return out[:min(n, len(out))]
}

// format writes entries as "k=v,k2=v2", cutting long keys and values.
func (t *refTracker) format(entries []descriptor.Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(refCut(e.Key, t.opts.MaxValueLen))
		b.WriteByte('=')
		b.WriteString(refCut(e.Value, t.opts.MaxValueLen))
	}
	return b.String()
}

// cut bounds s to n bytes, marking a cut with "…" (without splitting a
// UTF-8 sequence when s is valid UTF-8).
func refCut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && i < len(s) && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}
