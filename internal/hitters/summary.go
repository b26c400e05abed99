package hitters

import (
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// counter is one monitored item of a space-saving summary. It stays in its
// slot of summary.counters while it is monitored; only its heap node moves.
type counter struct {
	key uint64
	err uint64 // overestimation bound: the evicted item's count at takeover
	pos int    // position of its node in summary.heap
	// What the key names, from the item's first count since it was taken
	// in, and the latest event counted. desc is the descriptor formatted
	// by appendDescriptor; its buffer is reused when the counter is taken
	// over, so a takeover allocates nothing.
	domain, rule      string
	desc              []byte
	lastSeen, resetAt time.Time
}

// node is a counter's place in the min-heap: its estimated weight (true
// weight ≤ count ≤ true weight + err) and its slot.
type node struct {
	count uint64
	slot  int
}

// summary is Filtered Space-Saving (Homem and Carvalho, 2010): the
// space-saving algorithm (Metwally, Agrawal and El Abbadi, 2005) over a
// fixed number of counters, behind a filter of hashed cells. An item that
// is not monitored is counted in its cell (alpha) until its cell's count
// would pass the smallest monitored count; only then does it take over the
// smallest counter, with its cell's count as its error, and the evicted
// item's count goes back to its own cell. So under churn most counts touch
// one cell instead of the heap and the index.
//
// What holds (the argument is in docs/decisions/0084-filtered-heavy-hitters.md):
// every item not monitored weighs at most its cell's alpha, and every alpha
// is at most the smallest count; the monitored counts add up to at most the
// total. Hence each monitored item's count overestimates its weight by at
// most err, and any item whose weight exceeds total/capacity (indeed the
// smallest count) is monitored. Memory is the capacity and the filter,
// whatever the number of distinct items.
//
// The counters sit in fixed slots; a binary min-heap of nodes orders them
// by count (the smallest is the one taken over), each counter knowing its
// node's position, and an open-addressing index maps a key to its slot.
// Sifting moves nodes and writes positions, never the index, and the heap
// compares and moves exactly as container/heap would, so which counter a
// tie leaves at the root, and hence which item a takeover evicts, is what
// the reference implementation in the tests does.
type summary struct {
	counters []counter // in use: len; capacity: cap
	heap     []node
	index    index
	// alpha is the filter: alpha[cellOf(key)] bounds the weight of every
	// item in that cell that is not monitored. All zero until the summary
	// is full (nothing is evicted before).
	alpha []uint64
	total uint64
}

// filterCells is the number of filter cells per counter (rounded up to a
// power of two in all). More cells mean smaller cells, so fewer takeovers
// and smaller errors, for 8 bytes each.
const filterCells = 8

// cellShift drops the key's low bits, which choose the shard and so are
// alike within a summary.
const cellShift = 3

// cell returns key's filter cell.
func (s *summary) cell(key uint64) *uint64 {
	return &s.alpha[(key>>cellShift)&uint64(len(s.alpha)-1)]
}

// maxKeptDesc bounds the descriptor buffer a counter keeps across a reset:
// a longer one (a rare long descriptor) is released rather than held for
// the life of the process.
const maxKeptDesc = 256

// summaryBytes is the memory of a summary of capacity counters apart
// from the text its counters keep: the summary, its counters, heap, index
// and filter.
func summaryBytes(capacity int) int {
	cells := 1
	for cells < filterCells*capacity {
		cells *= 2
	}
	bits := uint(1)
	for 1<<bits < 4*capacity {
		bits++
	}
	return int(unsafe.Sizeof(summary{})) + capacity*int(unsafe.Sizeof(counter{})+unsafe.Sizeof(node{})) +
		(1<<bits)*int(unsafe.Sizeof(cell{})) + cells*8
}

func newSummary(capacity int) *summary {
	cells := 1
	for cells < filterCells*capacity {
		cells *= 2
	}
	return &summary{
		counters: make([]counter, 0, capacity),
		heap:     make([]node, 0, capacity),
		index:    newIndex(capacity),
		alpha:    make([]uint64, cells),
	}
}

// event is what one Record counts: the descriptor, which each summary
// formats only when it takes the descriptor in, and the time.
type event struct {
	domain      string
	entries     []descriptor.Entry
	maxValueLen int
	descBytes   int // a counter's room for domain, rule and descriptor
	now         time.Time
}

// add counts weight w for key, which names (ev.domain, rule, ev.entries).
// The counter's last-seen time becomes ev.now; a denial (denial true)
// also sets its reset time to resetAt. An item that is not monitored and
// stays in the filter records no time.
func (s *summary) add(key, w uint64, rule string, ev *event, denial bool, resetAt time.Time) {
	s.total += w
	at, found := s.index.find(key) // key's slot, or else the index cell for it
	var c *counter
	var pos int // c's node, to sift down once its count has grown
	switch {
	case found:
		c = &s.counters[at]
		pos = c.pos
		s.heap[pos].count += w
	case len(s.counters) < cap(s.counters):
		// A free slot: nothing was evicted yet, so the item is new and
		// counted exactly (its cell's alpha is zero).
		slot := len(s.counters)
		s.counters = s.counters[:slot+1]
		c = &s.counters[slot]
		s.index.insertAt(at, key, slot)
		s.take(c, key, rule, ev)
		a := s.cell(key)
		c.err = *a
		s.heap = append(s.heap, node{count: *a + w, slot: slot})
		s.up(len(s.heap) - 1)
		s.seen(c, ev, denial, resetAt)
		return
	default:
		a := s.cell(key)
		root := &s.heap[0]
		if *a+w <= root.count {
			// Filtered: the item may weigh up to its cell's alpha, which
			// stays at most the smallest count.
			*a += w
			return
		}
		// Take over the smallest counter: the new item weighs at most its
		// cell's alpha plus w, and at least w. The evicted item, up to its
		// count, goes back to its cell.
		c = &s.counters[root.slot]
		err := *a
		if e := s.cell(c.key); *e < root.count {
			*e = root.count
		}
		s.index.insertAt(at, key, root.slot)
		s.index.remove(c.key)
		s.take(c, key, rule, ev)
		c.err = err
		root.count = err + w
		pos = 0
	}
	s.seen(c, ev, denial, resetAt)
	s.down(pos)
}

// take makes c name key: the item of ev under rule, with no event counted
// yet.
func (s *summary) take(c *counter, key uint64, rule string, ev *event) {
	c.key, c.domain, c.rule = key, ev.domain, rule
	c.desc = formatDescriptor(c.desc, ev.entries, ev.maxValueLen, max(ev.descBytes-len(ev.domain)-len(rule), len("…")))
	c.lastSeen, c.resetAt = time.Time{}, time.Time{}
}

// seen records ev on c.
func (s *summary) seen(c *counter, ev *event, denial bool, resetAt time.Time) {
	c.lastSeen = ev.now
	if denial {
		c.resetAt = resetAt
	}
}

// count returns c's estimated weight.
func (s *summary) count(c *counter) uint64 { return s.heap[c.pos].count }

// down moves the node at i, whose count may have grown, towards the
// leaves until no child is smaller (container/heap's down, moving the node
// once instead of swapping at each level).
func (s *summary) down(i int) {
	h := s.heap
	x := h[i]
	for {
		j := 2*i + 1
		if j >= len(h) {
			break
		}
		if j2 := j + 1; j2 < len(h) && h[j2].count < h[j].count {
			j = j2
		}
		if h[j].count >= x.count {
			break
		}
		h[i] = h[j]
		s.counters[h[i].slot].pos = i
		i = j
	}
	h[i] = x
	s.counters[x.slot].pos = i
}

// up moves the node at j towards the root while it is smaller than its
// parent (container/heap's up).
func (s *summary) up(j int) {
	h := s.heap
	x := h[j]
	for j > 0 {
		i := (j - 1) / 2
		if x.count >= h[i].count {
			break
		}
		h[j] = h[i]
		s.counters[h[j].slot].pos = j
		j = i
	}
	h[j] = x
	s.counters[x.slot].pos = j
}

// reset empties the summary, keeping its memory (but no descriptor buffer
// longer than maxKeptDesc).
func (s *summary) reset() {
	for i := range s.counters {
		c := &s.counters[i]
		desc := c.desc[:0]
		if cap(desc) > maxKeptDesc {
			desc = nil
		}
		*c = counter{desc: desc}
	}
	s.counters = s.counters[:0]
	s.heap = s.heap[:0]
	s.index.clear()
	clear(s.alpha)
	s.total = 0
}

// index maps the keys of a summary's counters to their slots: open
// addressing with linear probing over a power-of-two table at most a
// quarter full, placed by the key's high bits (the low bits choose the shard, so
// they are alike within a summary). Keys are already hashes, so nothing is
// hashed again.
type index struct {
	cells []cell
	shift uint // 64 - log2(len(cells))
}

// cell is one place of the index; slot is the counter's slot plus one, 0
// for an empty cell.
type cell struct {
	key  uint64
	slot int
}

func newIndex(capacity int) index {
	bits := uint(1)
	for 1<<bits < 4*capacity {
		bits++
	}
	return index{cells: make([]cell, 1<<bits), shift: 64 - bits}
}

// find returns the slot of key and true, or, when key is absent, the cell
// where it would be inserted and false.
func (x *index) find(key uint64) (int, bool) {
	mask := len(x.cells) - 1
	for i := int(key >> x.shift); ; i = (i + 1) & mask {
		c := &x.cells[i]
		if c.slot == 0 {
			return i, false
		}
		if c.key == key {
			return c.slot - 1, true
		}
	}
}

// insertAt puts key → slot in cell i, which find returned for key.
func (x *index) insertAt(i int, key uint64, slot int) {
	x.cells[i] = cell{key: key, slot: slot + 1}
}

// remove deletes key, shifting back the cells after it that would no
// longer be found across the gap (no tombstones, so probes stay short
// whatever the churn).
func (x *index) remove(key uint64) {
	mask := len(x.cells) - 1
	i := int(key >> x.shift)
	for ; x.cells[i].key != key; i = (i + 1) & mask {
		if x.cells[i].slot == 0 {
			return // absent
		}
	}
	if x.cells[i].slot == 0 {
		return // absent: key matched an empty cell's zero key
	}
	for {
		x.cells[i] = cell{}
		j := i
		for {
			j = (j + 1) & mask
			c := x.cells[j]
			if c.slot == 0 {
				return
			}
			// c may fill the gap at i if i lies between c's home and j.
			if home := int(c.key >> x.shift); (j-home)&mask >= (j-i)&mask {
				x.cells[i] = c
				i = j
				break
			}
		}
	}
}

func (x *index) clear() { clear(x.cells) }
