package hitters

import (
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// stream draws the item of each step: an index into the items of a test.
type stream struct {
	name string
	next func(r *rand.Rand) int
}

// streams are the traffic shapes both differential tests replay: many
// distinct items (nearly every count a takeover), a zipf-skewed mix, a few
// hot items in noise, fewer items than counters, and a cycle just above
// the capacity where every count ties.
func streams() []stream {
	return []stream{
		{"uniform", func(r *rand.Rand) int { return r.IntN(10_000) }},
		{"zipf", func() func(r *rand.Rand) int {
			var z *rand.Zipf
			return func(r *rand.Rand) int {
				if z == nil {
					z = rand.NewZipf(r, 1.2, 1, 9_999)
				}
				return int(z.Uint64())
			}
		}()},
		{"hot", func(r *rand.Rand) int {
			if r.IntN(2) == 0 {
				return r.IntN(5)
			}
			return 5 + r.IntN(50_000)
		}},
		{"few", func(r *rand.Rand) int { return r.IntN(10) }},
		{"ties", func() func(r *rand.Rand) int {
			i := 0
			return func(*rand.Rand) int { i++; return i % 67 }
		}()},
	}
}

// weights are the costs a stream's steps carry.
var weights = []struct {
	name string
	next func(r *rand.Rand) uint64
}{
	{"unit", func(*rand.Rand) uint64 { return 1 }},
	{"weighted", func(r *rand.Rand) uint64 { return uint64(r.IntN(10)) }}, // 0 included
}

// splitmix spreads i over 64 bits, standing in for a key's hash.
func splitmix(i uint64) uint64 {
	i += 0x9e3779b97f4a7c15
	i = (i ^ i>>30) * 0xbf58476d1ce4e5b9
	i = (i ^ i>>27) * 0x94d049bb133111eb
	return i ^ i>>31
}

// TestSummaryMatchesReference feeds the summary and the reference
// implementation the same streams of (key, weight, item) and checks after
// every count that they hold the same counters in the same heap order,
// with the same counts, errors and items, the same filter cells, and that
// the index finds every counter and nothing else. Equal heap order after every step means ties
// are broken alike, so the same item is evicted at every takeover. Keys
// are spread, or clustered on a few index cells to exercise long probe
// chains and the backward shift on removal.
func TestSummaryMatchesReference(t *testing.T) {
	keyings := []struct {
		name string
		key  func(i int) uint64
	}{
		{"spread", func(i int) uint64 { return splitmix(uint64(i)) }},
		{"clustered", func(i int) uint64 { return uint64(i%4)<<62 | splitmix(uint64(i))>>24 }},
	}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, capacity := range []int{1, 2, 16, 64} {
		for _, st := range streams() {
			for _, wt := range weights {
				for _, kg := range keyings {
					name := fmt.Sprintf("cap%d/%s/%s/%s", capacity, st.name, wt.name, kg.name)
					t.Run(name, func(t *testing.T) {
						r := rand.New(rand.NewPCG(uint64(capacity), 7))
						ref, got := newRefSummary(capacity), newSummary(capacity)
						for step := range 6_000 {
							if step%2_000 == 1_999 {
								ref.reset()
								got.reset()
							}
							i := st.next(r)
							key, w := kg.key(i), wt.next(r)
							domain, rule := "d"+strconv.Itoa(i%3), "r"+strconv.Itoa(i%2)
							entries := user("v-" + strconv.Itoa(i))
							now := start.Add(time.Duration(step) * time.Millisecond)
							denial := r.IntN(3) == 0
							resetAt := now.Add(time.Duration(r.IntN(5)) * time.Second)
							mk := func() Item { return Item{Domain: domain, Rule: rule, Descriptor: "user=v-" + strconv.Itoa(i)} }
							update := func(it *Item) { it.LastSeen = now }
							if denial {
								update = func(it *Item) { it.LastSeen, it.ResetAt = now, resetAt }
							}
							ref.add(key, w, mk, update)
							got.add(key, w, rule, &event{domain: domain, entries: entries, maxValueLen: 128, descBytes: 1 << 20, now: now}, denial, resetAt)
							if err := sameSummary(ref, got); err != nil {
								t.Fatalf("step %d (item %d, weight %d): %v", step, i, w, err)
							}
						}
					})
				}
			}
		}
	}
}

// sameSummary says how got differs from ref, or returns nil.
func sameSummary(ref *refSummary, got *summary) error {
	if ref.total != got.total {
		return fmt.Errorf("total %d, reference %d", got.total, ref.total)
	}
	if len(ref.heap.items) != len(got.heap) || len(got.heap) != len(got.counters) {
		return fmt.Errorf("%d nodes and %d counters, reference %d", len(got.heap), len(got.counters), len(ref.heap.items))
	}
	for pos, want := range ref.heap.items {
		n := got.heap[pos]
		c := &got.counters[n.slot]
		if c.pos != pos {
			return fmt.Errorf("node %d names slot %d whose counter says position %d", pos, n.slot, c.pos)
		}
		item := Item{Domain: c.domain, Rule: c.rule, Descriptor: string(c.desc), LastSeen: c.lastSeen, ResetAt: c.resetAt}
		if c.key != want.key || n.count != want.count || c.err != want.err || item != want.item {
			return fmt.Errorf("heap position %d: key %x count %d error %d %+v, reference key %x count %d error %d %+v",
				pos, c.key, n.count, c.err, item, want.key, want.count, want.err, want.item)
		}
		if slot, ok := got.index.find(c.key); !ok || slot != n.slot {
			return fmt.Errorf("index finds key %x at slot %d (%v), counter is in slot %d", c.key, slot, ok, n.slot)
		}
	}
	if n := got.index.occupied(); n != len(got.counters) {
		return fmt.Errorf("index holds %d keys for %d counters", n, len(got.counters))
	}
	if !slices.Equal(got.alpha, ref.alpha) {
		for i := range ref.alpha {
			if got.alpha[i] != ref.alpha[i] {
				return fmt.Errorf("filter cell %d: %d, reference %d", i, got.alpha[i], ref.alpha[i])
			}
		}
		return fmt.Errorf("%d filter cells, reference %d", len(got.alpha), len(ref.alpha))
	}
	return nil
}

// TestTrackerMatchesReference replays the same streams of Records into a
// Tracker and the reference tracker (same seed, so the same keys and
// shards) on one clock that crosses minute and hour buckets, with several
// domains, single and multiple rules, denials bound by one of them, costs
// values long enough to be cut and descriptors longer than the key's stack
// buffer, and checks that every Top query (each
// kind, window and filter, short and long lists) answers the same.
func TestTrackerMatchesReference(t *testing.T) {
	rulesets := []struct{ rules, bindings string }{
		{"per_user", "per_user"},
		{"per_user+daily", "per_user daily"},
		{"per_ip", "per_ip"},
	}
	queries := []struct{ domain, rule string }{
		{"", ""}, {"api", ""}, {"", "per_user"}, {"web", "per_user+daily"}, {"", "daily"},
	}
	// Values are cut to 12 bytes, or kept up to 300 so that the long
	// descriptors (an extra entry of 200 to 400 bytes) are hashed in
	// pieces and their buffers are released at a bucket's reset.
	for _, opts := range []struct{ capacity, maxValueLen int }{{4, 12}, {64, 12}, {16, 300}} {
		capacity := opts.capacity
		for _, st := range streams() {
			for _, wt := range weights {
				t.Run(fmt.Sprintf("cap%d/cut%d/%s/%s", capacity, opts.maxValueLen, st.name, wt.name), func(t *testing.T) {
					clock := testenv.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
					got := New(Options{Capacity: capacity, MaxValueLen: opts.maxValueLen, Now: clock.Now})
					ref := newRefTracker(got.opts, got.seed)
					r := rand.New(rand.NewPCG(uint64(capacity), 11))
					for step := range 10_000 {
						clock.Advance(time.Duration(r.IntN(100)) * time.Millisecond)
						if r.IntN(3_000) == 0 {
							clock.Advance(time.Duration(r.IntN(90)) * time.Minute)
						}
						i := st.next(r)
						// The number leads the value, so values cut to 12 bytes
						// (some in the middle of "é") stay distinct.
						entries := user(strconv.Itoa(i) + strings.Repeat([]string{"", "x", "é"}[i%3], i%11))
						if i%5 == 0 {
							entries = append(entries, descriptor.Entry{Key: "path", Value: "/v1/items"})
						}
						if i%7 == 0 {
							entries = append(entries, descriptor.Entry{Key: "note", Value: strings.Repeat("n", 200+i%200)})
						}
						domain := []string{"api", "web"}[i%2]
						rs := rulesets[i%len(rulesets)]
						bindings := strings.Fields(rs.bindings)
						binding, denied := bindings[r.IntN(len(bindings))], r.IntN(4) == 0
						cost, reset := wt.next(r), time.Duration(r.IntN(60))*time.Second
						ref.Record(domain, entries, rs.rules, cost, denied, binding, reset)
						got.Record(domain, entries, rs.rules, cost, denied, binding, reset)
						if step%1_000 != 999 {
							continue
						}
						for _, kind := range []Kind{Hits, Denials} {
							for _, window := range []Window{Minute, Hour} {
								for _, q := range queries {
									for _, n := range []int{5, 10_000} {
										want, have := ref.Top(kind, window, q.domain, q.rule, n), got.Top(kind, window, q.domain, q.rule, n)
										if !reflect.DeepEqual(have, want) {
											t.Fatalf("step %d, Top(%d, %v, %q, %q, %d):\n got %+v\nwant %+v", step, kind, window, q.domain, q.rule, n, have, want)
										}
									}
								}
							}
						}
					}
				})
			}
		}
	}
}
