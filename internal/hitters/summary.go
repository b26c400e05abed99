package hitters

import "container/heap"

// counter is one monitored item of a space-saving summary.
type counter struct {
	key   uint64
	count uint64 // estimated weight: true weight ≤ count ≤ true weight + err
	err   uint64 // overestimation bound: the evicted item's count at takeover
	item  Item   // what the key names, from the latest update
}

// summary is the space-saving algorithm (Metwally, Agrawal and El Abbadi,
// 2005) over a fixed number of counters: any item whose weight exceeds
// total/capacity is guaranteed to be monitored, and each count
// overestimates its item's weight by at most err. Memory is the capacity,
// whatever the number of distinct items.
type summary struct {
	cap   int
	idx   map[uint64]int // key → position in heap
	heap  minHeap
	total uint64
}

func newSummary(capacity int) *summary {
	idx := make(map[uint64]int, capacity)
	return &summary{cap: capacity, idx: idx, heap: minHeap{items: make([]counter, 0, capacity), idx: idx}}
}

// add counts weight w for key; item names the key and is built only when
// the key is new to the summary (mk), or refreshed by update.
func (s *summary) add(key uint64, w uint64, mk func() Item, update func(*Item)) {
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
		heap.Push(&s.heap, counter{key: key, count: w, item: mk()})
		if update != nil {
			update(&s.heap.items[s.idx[key]].item)
		}
		return
	}
	// Take over the smallest counter: the new item may have been seen up
	// to its count times while not monitored.
	min := &s.heap.items[0]
	delete(s.idx, min.key)
	min.err = min.count
	min.count += w
	min.key = key
	min.item = mk()
	if update != nil {
		update(&min.item)
	}
	s.idx[key] = 0
	heap.Fix(&s.heap, 0)
}

// reset empties the summary, keeping its memory.
func (s *summary) reset() {
	clear(s.idx)
	clear(s.heap.items)
	s.heap.items = s.heap.items[:0]
	s.total = 0
}

// minHeap orders counters by count, smallest first, and keeps idx in step.
type minHeap struct {
	items []counter
	idx   map[uint64]int
}

func (h *minHeap) Len() int           { return len(h.items) }
func (h *minHeap) Less(i, j int) bool { return h.items[i].count < h.items[j].count }
func (h *minHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.idx[h.items[i].key] = i
	h.idx[h.items[j].key] = j
}
func (h *minHeap) Push(x any) {
	c := x.(counter)
	h.idx[c.key] = len(h.items)
	h.items = append(h.items, c)
}
func (h *minHeap) Pop() any {
	c := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.idx, c.key)
	return c
}
