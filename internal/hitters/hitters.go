// Package hitters answers "who is limited right now": the descriptors with
// the most denials, and with the most hits, per domain and rule, over the
// last minute and the last hour.
//
// It keeps Filtered Space-Saving summaries (summary.go) in a ring of time
// buckets per window, sharded by item so that concurrent requests rarely
// share a lock. Memory is fixed by Options whatever the traffic: Capacity
// counters and at least 8×Capacity filter cells per shard and bucket, and
// descriptor values cut to MaxValueLen bytes. Counts are estimates with a
// stated bound (Entry.Error): the true count over the window lies between
// Count-Error and Count, and an item heavier than its shard's total
// weight divided by Capacity (in the window, or in any one bucket) is
// always listed. Traffic spread over many descriptors (an attack from
// many addresses) is counted mostly in the filter, which costs less than
// taking over a counter.
//
// Raw descriptor values are kept here, for the admin listener; they must
// never become metric labels.
//
// The package knows nothing of gRPC, Redis or the service.
package hitters

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// Defaults for Options' zero values.
const (
	DefaultCapacity    = 64
	DefaultMaxValueLen = 128
	// DefaultMaxBytes bounds a Tracker's memory: about 5.5 MiB of
	// counters, heaps, indexes and filters for the default Capacity, and
	// the rest shared by the text the counters keep (about 550 bytes
	// each).
	DefaultMaxBytes = 16 << 20
	shards          = 8
)

// minDescBytes is the least room a counter keeps for its descriptor, its
// domain and its rule name, whatever Options.MaxBytes.
const minDescBytes = 32

// Kind says what is counted.
type Kind int

// The kinds.
const (
	// Denials counts denied descriptors, once per denial.
	Denials Kind = iota
	// Hits counts decided descriptors, weighted by their cost.
	Hits
	kinds
)

// Window is a span of recent time.
type Window int

// The windows. A window is made of buckets: Minute of six 10-second
// buckets, Hour of twelve 5-minute buckets; a query covers the current
// bucket and the previous ones, so between 50 and 60 seconds (55 and 60
// minutes) of the most recent past.
const (
	Minute Window = iota
	Hour
	windows
)

var windowShapes = [windows]struct {
	width time.Duration
	n     int
}{
	Minute: {10 * time.Second, 6},
	Hour:   {5 * time.Minute, 12},
}

// String returns "1m" or "1h".
func (w Window) String() string {
	if w == Hour {
		return "1h"
	}
	return "1m"
}

// Options configures a Tracker. The zero Options is a sensible default.
type Options struct {
	// Capacity is the number of counters per shard and bucket; 0 means
	// DefaultCapacity.
	Capacity int
	// MaxValueLen bounds each stored descriptor value, in bytes; longer
	// values are cut and end with "…". 0 means DefaultMaxValueLen.
	MaxValueLen int
	// MaxBytes bounds the Tracker's memory, in bytes: its counters,
	// heaps, indexes and filters take a fixed part (about Capacity × 300
	// bytes per summary, 288 summaries), and what is left is shared
	// evenly by the counters for the text they keep (domain, rule names
	// and the descriptor, cut and ending with "…" beyond their share; at
	// least 32 bytes each, so a MaxBytes below the fixed part and that is
	// not a bound). 0 means DefaultMaxBytes.
	MaxBytes int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Item names what was counted.
type Item struct {
	Domain string `json:"domain"`
	// Rule names the rule: for Denials the binding rule's name (or its id
	// when it has no name); for Hits every rule decided, joined by "+".
	Rule string `json:"rule"`
	// Descriptor is "k=v,k2=v2" with every value cut to MaxValueLen.
	Descriptor string `json:"descriptor"`
	// LastSeen is the latest event counted.
	LastSeen time.Time `json:"last_seen"`
	// ResetAt is when the latest denial said the rule admits again
	// (Denials only).
	ResetAt time.Time `json:"reset_at,omitzero"`
}

// Entry is one item of a top list.
type Entry struct {
	Item
	// Count is the estimated count over the window's buckets:
	// Count-Error ≤ true count ≤ Count. A bucket whose counters do not
	// hold the item adds its bound there (its filter cell's count) to both.
	Count uint64 `json:"count"`
	// Error bounds the overestimation.
	Error uint64 `json:"error"`
}

// Tracker counts descriptors. It is safe for concurrent use.
type Tracker struct {
	opts   Options
	seed   maphash.Seed
	shards [shards]shard
	// descBytes is each counter's share of MaxBytes for its text.
	descBytes int
}

type shard struct {
	mu    sync.Mutex
	rings [kinds][windows]ring
}

// ring is one window's buckets; slot i holds bucket number nums[i].
type ring struct {
	width time.Duration
	sums  []*summary
	nums  []int64
}

// New returns a Tracker.
func New(o Options) *Tracker {
	if o.Capacity <= 0 {
		o.Capacity = DefaultCapacity
	}
	if o.MaxValueLen <= 0 {
		o.MaxValueLen = DefaultMaxValueLen
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	t := &Tracker{opts: o, seed: maphash.MakeSeed()}
	summaries := shards * int(kinds) * (windowShapes[Minute].n + windowShapes[Hour].n)
	// The allocator rounds each block up to its size class, by at most
	// an eighth (and adds a header to large blocks holding pointers): an
	// eighth more for the fixed part, an eighth less for each text.
	fixed := summaries * summaryBytes(o.Capacity) * 9 / 8
	t.descBytes = max((o.MaxBytes-fixed)/(summaries*o.Capacity)*8/9, minDescBytes)
	for s := range t.shards {
		for k := range kinds {
			for w := range windows {
				shape := windowShapes[w]
				r := ring{width: shape.width, sums: make([]*summary, shape.n), nums: make([]int64, shape.n)}
				for i := range r.sums {
					r.sums[i] = newSummary(o.Capacity)
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
func (t *Tracker) Record(domain string, entries []descriptor.Entry, rules string, cost uint64, denied bool, binding string, reset time.Duration) {
	t.RecordAt(t.opts.Now(), domain, entries, rules, cost, denied, binding, reset)
}

// RecordAt is Record at time now, for a caller that has read the clock
// already (Options.Now should be the same clock, which Top reads).
func (t *Tracker) RecordAt(now time.Time, domain string, entries []descriptor.Entry, rules string, cost uint64, denied bool, binding string, reset time.Duration) {
	ev := event{domain: domain, entries: entries, maxValueLen: t.opts.MaxValueLen, descBytes: t.descBytes, now: now}
	hits := t.key(domain, rules, entries)
	sh := &t.shards[hits%shards]
	sh.mu.Lock()
	sh.add(Hits, hits, cost, rules, &ev, false, time.Time{})
	if denied {
		// With one rule decided, the denial's key is the hit's: same
		// hash, same shard, same lock.
		denials := hits
		if binding != rules {
			denials = t.key(domain, binding, entries)
		}
		if next := &t.shards[denials%shards]; next != sh {
			sh.mu.Unlock()
			sh = next
			sh.mu.Lock()
		}
		sh.add(Denials, denials, 1, binding, &ev, true, ev.now.Add(reset))
	}
	sh.mu.Unlock()
}

// keyBuf is the room on the stack for the bytes key hashes; a longer
// descriptor is hashed in pieces.
const keyBuf = 256

// key returns the hash naming (domain, rule, entries) and choosing its
// shard: maphash of domain, 0, rule, then 0, key, 1, value per entry. The
// bytes are gathered on the stack and hashed in one call when they fit.
func (t *Tracker) key(domain, rule string, entries []descriptor.Entry) uint64 {
	n := len(domain) + 1 + len(rule)
	for _, e := range entries {
		n += 2 + len(e.Key) + len(e.Value)
	}
	if n > keyBuf {
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
		return h.Sum64()
	}
	var buf [keyBuf]byte
	b := append(buf[:0], domain...)
	b = append(b, 0)
	b = append(b, rule...)
	for _, e := range entries {
		b = append(b, 0)
		b = append(b, e.Key...)
		b = append(b, 1)
		b = append(b, e.Value...)
	}
	return maphash.Bytes(t.seed, b)
}

// add counts w for key in every window of kind; the caller holds sh.mu.
func (sh *shard) add(kind Kind, key, w uint64, rule string, ev *event, denial bool, resetAt time.Time) {
	for win := range windows {
		sh.rings[kind][win].current(ev.now).add(key, w, rule, ev, denial, resetAt)
	}
}

// current returns the summary of now's bucket, emptied if it held an
// older bucket.
func (r *ring) current(now time.Time) *summary {
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
func (t *Tracker) Top(kind Kind, window Window, domain, rule string, n int) []Entry {
	if kind < 0 || kind >= kinds || window < 0 || window >= windows || n <= 0 {
		return nil
	}
	now := t.opts.Now()
	merged := map[uint64]*merging{}
	var fresh []*merging // this shard's entries
	for s := range t.shards {
		sh := &t.shards[s]
		sh.mu.Lock()
		r := &sh.rings[kind][window]
		cur := now.UnixNano() / int64(r.width)
		var live uint64 // bit i: bucket i is in the window (a ring has at most 64)
		fresh = fresh[:0]
		for i, sum := range r.sums {
			if r.nums[i] < 0 || r.nums[i] > cur || r.nums[i] <= cur-int64(len(r.sums)) {
				continue
			}
			live |= 1 << i
			for j := range sum.counters {
				c := &sum.counters[j]
				if (domain != "" && c.domain != domain) || (rule != "" && c.rule != rule) {
					continue
				}
				e := merged[c.key]
				if e == nil {
					e = &merging{key: c.key, Entry: Entry{Item: Item{Domain: c.domain, Rule: c.rule, Descriptor: string(c.desc), LastSeen: c.lastSeen, ResetAt: c.resetAt}}}
					merged[c.key] = e
					fresh = append(fresh, e)
				}
				e.in |= 1 << i
				e.Count += sum.count(c)
				e.Error += c.err
				if c.lastSeen.After(e.LastSeen) {
					e.LastSeen = c.lastSeen
				}
				if c.resetAt.After(e.ResetAt) {
					e.ResetAt = c.resetAt
				}
			}
		}
		// In a live bucket that does not monitor it, an item weighs
		// between 0 and its filter cell's alpha: add that to the count and
		// the error, so that Count-Error ≤ true ≤ Count over the window.
		for _, e := range fresh {
			for i, sum := range r.sums {
				if live&^e.in&(1<<i) != 0 {
					a := *sum.cell(e.key)
					e.Count += a
					e.Error += a
				}
			}
		}
		sh.mu.Unlock()
	}
	out := make([]Entry, 0, len(merged))
	for _, e := range merged {
		out = append(out, e.Entry)
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

// merging is an entry of Top being summed over a window's buckets.
type merging struct {
	Entry
	key uint64
	in  uint64 // bit i: bucket i monitors the item
}

// appendDescriptor appends entries as "k=v,k2=v2" to dst, cutting long
// keys and values to n bytes.
func appendDescriptor(dst []byte, entries []descriptor.Entry, n int) []byte {
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendCut(dst, e.Key, n)
		dst = append(dst, '=')
		dst = appendCut(dst, e.Value, n)
	}
	return dst
}

// formatDescriptor is appendDescriptor into dst's memory, holding at most
// limit bytes: longer, it is cut and ends with "…". dst is reused when it
// has the room, else replaced by a buffer of exactly the size needed, so
// that no buffer outgrows limit.
func formatDescriptor(dst []byte, entries []descriptor.Entry, n, limit int) []byte {
	cut := func(l int) int { // appendCut's length, at most
		if l <= n {
			return l
		}
		return n + len("…")
	}
	size := 0
	for i, e := range entries {
		if i > 0 {
			size++
		}
		size += cut(len(e.Key)) + 1 + cut(len(e.Value))
	}
	size = min(size, limit)
	if cap(dst) < size {
		dst = make([]byte, 0, size)
	}
	dst = dst[:0]
	if size < limit {
		return appendDescriptor(dst, entries, n)
	}
	// Too long: format the entries that reach the limit, and cut.
	full := appendDescriptor(make([]byte, 0, 2*limit+2*n), entriesWithin(entries, n, limit), n)
	if len(full) <= limit {
		return append(dst, full...)
	}
	return appendCut(dst, string(full), limit-len("…"))
}

// entriesWithin is the first entries of entries that, formatted with
// values cut to n bytes, take fewer than limit bytes, and the next one
// (formatted, they reach limit).
func entriesWithin(entries []descriptor.Entry, n, limit int) []descriptor.Entry {
	size := 0
	for i, e := range entries {
		size += min(len(e.Key), n+len("…")) + min(len(e.Value), n+len("…")) + 2
		if size >= limit {
			return entries[:i+1]
		}
	}
	return entries
}

// appendCut appends s bounded to n bytes, marking a cut with "…" (without
// splitting a UTF-8 sequence when s is valid UTF-8).
func appendCut(dst []byte, s string, n int) []byte {
	if len(s) <= n {
		return append(dst, s...)
	}
	i := n
	for i > 0 && i < len(s) && s[i]&0xC0 == 0x80 {
		i--
	}
	return append(append(dst, s[:i]...), "…"...)
}
