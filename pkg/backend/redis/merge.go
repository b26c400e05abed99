package redis

import (
	"slices"
	"strings"
	"sync"
)

// Cross-request batching: the calls of the requests one coalesced pipeline
// carries to one node are merged into batch script calls (the decide
// script's batch layout, pkg/scripts/CONTRACT.md "Batches"), so that many
// concurrent requests cost Redis one command instead of one each. Every
// descriptor is decided as its own call would decide it, in the order the
// pipeline would have run the calls; each call gets back its own part of
// the merged reply, or the merged call's error
// (docs/decisions/0053-cross-request-batching.md).
//
// On one node (standalone, Sentinel) runs of consecutive calls are merged,
// so the order of the pipeline's descriptors is kept. On a cluster, where a
// script may touch the keys of one slot only (declared KEYS of several
// slots are refused with CROSSSLOT, even with allow-cross-slot-keys, Redis
// 7.0), a merged call joins the calls of one hash tag: the requests on one
// descriptor, such as a hot one. A call is merged only when it would have
// been decided the same way inside a batch: not a batch decided together
// (its all-or-nothing spans its own descriptors only), and with the same
// clock argument as the calls it joins (tests pin each call's instant).

// Bounds of one merged call. A script blocks Redis while it runs, so a
// merged call decides at most maxMergeItems descriptors, and carries at
// most maxMergeArgs ARGV slots (a descriptor with many rules counts for
// more). A call that alone exceeds them is sent as it is, never split.
// Measured in docs/decisions/0053-cross-request-batching.md: Redis's CPU
// per descriptor stops falling beyond about 16 descriptors per call.
const (
	maxMergeItems = 16
	maxMergeArgs  = 1024
)

// merger is the working memory of merging one pipeline's calls: the calls
// to send, the merged calls and their arguments. Mergers are pooled.
type merger struct {
	wire  []*call  // what the pipeline sends
	calls []call   // the merged calls, parts of wire
	argv  []any    // the merged calls' arguments
	parts []*call  // the merged calls' parts
	taken []bool   // calls already merged (byTag)
	tags  []string // each call's hash tag (byTag)
}

var mergers = sync.Pool{New: func() any { return new(merger) }}

// mergeable reports whether c may join a merged call.
func (c *call) mergeable() bool {
	return !c.together && len(c.items) > 0 && c.parts == nil
}

// nkeys returns the number of KEYS of c.
func (c *call) nkeys() int { return c.argv[2].(int) }

// now returns c's clock argument (ARGV[1]).
func (c *call) now() any { return c.argv[3+c.nkeys()] }

// itemArgs returns the batch layout's slots of c's descriptors: as they
// are for a batch call; for a single call, its count of KEYS and of
// slots, then its slots (the merger boxes the counts).
func (c *call) itemArgs() []any {
	k := 3 + c.nkeys()
	if c.batch {
		return c.argv[k+2:]
	}
	return c.argv[k+1:]
}

// mergedArgs returns how many ARGV slots c's descriptors take in a batch.
func (c *call) mergedArgs() int {
	if c.batch {
		return len(c.itemArgs())
	}
	return 2 + len(c.itemArgs())
}

// merge returns the calls to send for calls, one pipeline's, in order:
// each run of consecutive mergeable calls with the same clock argument
// becomes batch calls of at most maxItems descriptors (and maxMergeArgs
// ARGV slots), the other calls go as they are. With byTag (a cluster,
// where a call may touch one slot only) a merged call joins only calls of
// one hash tag, the first of them and those after it; calls of other tags
// touch other keys, so the order between them does not matter, and the
// order among the calls of one tag is kept. The result and the merged
// calls stay valid until m is released.
func (m *merger) merge(calls []*call, maxItems int, byTag bool) []*call {
	size := 0
	for _, c := range calls {
		size += len(c.argv) + 2
	}
	m.wire = grow(m.wire, len(calls))
	m.calls = grow(m.calls, len(calls)/2+1) // a merged call joins two calls at least
	m.argv = grow(m.argv, size)             // room for all: boxed pointers never move
	m.parts = grow(m.parts, len(calls))
	m.taken = grow(m.taken, len(calls))[:len(calls)]
	clear(m.taken)
	if byTag {
		m.tags = grow(m.tags, len(calls))
		for _, c := range calls {
			m.tags = append(m.tags, c.tag())
		}
	}
	for i, c := range calls {
		if m.taken[i] {
			continue
		}
		p0 := len(m.parts)
		m.parts = append(m.parts, c)
		if c.mergeable() {
			items, args := len(c.items), c.mergedArgs()
			now := c.now()
			for k := i + 1; k < len(calls) && items < maxItems; k++ {
				n := calls[k]
				if byTag && (m.taken[k] || m.tags[k] != m.tags[i]) {
					continue // another slot's, or already merged
				}
				if !n.mergeable() || n.now() != now ||
					items+len(n.items) > maxItems || args+n.mergedArgs() > maxMergeArgs {
					break
				}
				items, args = items+len(n.items), args+n.mergedArgs()
				m.parts = append(m.parts, n)
				m.taken[k] = true
			}
		}
		if parts := m.parts[p0:]; len(parts) == 1 {
			c.arm()
			m.wire = append(m.wire, c)
		} else {
			m.wire = append(m.wire, m.join(parts[:len(parts):len(parts)]))
		}
	}
	return m.wire
}

// tag returns the hash tag of c's first key (between its first '{' and
// the next '}'), which names its cluster slot: all keys of a call share it.
func (c *call) tag() string {
	if c.nkeys() == 0 {
		return ""
	}
	key := *c.argv[3].(*string)
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// join returns one batch call deciding the descriptors of parts, in order.
func (m *merger) join(parts []*call) *call {
	a0 := len(m.argv)
	nk := 0
	for _, p := range parts {
		nk += p.nkeys()
	}
	first := parts[0]
	m.argv = append(m.argv, first.argv[0], first.argv[1], nk)
	for _, p := range parts {
		m.argv = append(m.argv, p.argv[3:3+p.nkeys()]...)
	}
	m.argv = append(m.argv, first.now(), any("b"))
	var rep repeats
	for _, p := range parts {
		a := p.itemArgs()
		if !p.batch {
			s := len(m.argv)
			m.argv = append(m.argv, p.nkeys(), len(a))
			m.argv = append(m.argv, a...)
			m.argv = rep.fold(m.argv, s)
			continue
		}
		// A batch's items, each written in full then folded again: an
		// item may repeat the last one of the call before.
		var last []any // the part's item before, in full
		for len(a) > 0 {
			item := last
			if a[0] == any(repeatItem) {
				a = a[1:]
			} else {
				item, a = a[:2+a[1].(int)], a[2+a[1].(int):]
			}
			s := len(m.argv)
			m.argv = append(m.argv, item...)
			m.argv = rep.fold(m.argv, s)
			last = item
		}
	}
	argv := m.argv[a0:len(m.argv):len(m.argv)]
	m.calls = append(m.calls, call{batch: true, argv: argv, cmd: newDecideCmd(argv), parts: parts})
	return &m.calls[len(m.calls)-1]
}

// repeats writes batch items that repeat the item before as one slot,
// repeatItem (the common case: one limit, many clients). A Decide
// of several checks and a merged call fold alike, so a merged call is the
// batch one Decide of the same checks would send.
type repeats struct {
	prev []any // the last item written in full: nk, na, then its slots
}

// fold returns argv with its last item, which starts at argv[start] (nk,
// na, its slots), written as repeatItem when it is the same as the
// last item written in full.
func (r *repeats) fold(argv []any, start int) []any {
	item := argv[start:len(argv):len(argv)]
	if r.prev != nil && slices.Equal(item, r.prev) {
		return appendRepeatItem(argv[:start])
	}
	r.prev = item
	return argv
}

// split records the outcome of every call sent, and hands each part of
// every merged call its own reply: the merged
// call's error (the same for all: Redis refused or never answered the
// command, which decided none of them), or its descriptors' replies. A
// descriptor the script failed gets, in a single call, the error reply its
// own call would have got; a batch call reads it from its reply as before.
func (m *merger) split() {
	for _, w := range m.wire {
		if w.parts == nil {
			w.took()
			continue
		}
		err := w.cmd.Err()
		ints := w.cmd.Val()
		for i, p := range w.parts {
			if err != nil {
				p.fail(err)
				continue
			}
			start, size, ok := ints, 0, true
			var itemErr error
			for _, it := range p.items {
				n, good, ierr := nextBatchItem(ints[size:], it.rules)
				if !good {
					ok = false
					break
				}
				if ierr != nil {
					itemErr = scriptError(ierr.Error())
				}
				size += n
			}
			switch {
			case !ok:
				// A reply that does not add up: the call reads what is
				// left and finds it does not have the shape it expects.
				p.reply, p.err = start, nil
				ints = nil
			case !p.batch && itemErr != nil:
				p.fail(itemErr)
				ints = ints[size:]
			case i == len(w.parts)-1:
				// The last call reads the rest: values beyond its
				// descriptors' are found as its own call's would be.
				p.reply, p.err = start, nil
			default:
				p.reply, p.err = start[:size:size], nil
				ints = ints[size:]
			}
		}
	}
}

// release clears m's references and returns it to the pool.
func (m *merger) release() {
	clear(m.wire[:cap(m.wire)])
	clear(m.calls[:cap(m.calls)])
	clear(m.argv[:cap(m.argv)])
	clear(m.parts[:cap(m.parts)])
	clear(m.tags[:cap(m.tags)])
	mergers.Put(m)
}

// scriptError is the error reply the script gave a descriptor of a merged
// call, handed to a call of that one descriptor as a Redis error reply:
// its caller classifies it (isUnavailable, liveRefusal) exactly as the
// error reply of its own call.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as a Redis reply (goredis.Error).
func (scriptError) RedisError() {}
