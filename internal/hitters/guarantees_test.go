package hitters

import (
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// guaranteeStreams are the traffic shapes the guarantees are checked on:
// those of the differential tests, and one heavy item hidden in churn (a
// fortieth of the traffic among 100,000 items seen about once each: what
// an attack from one address among many looks like).
func guaranteeStreams() []stream {
	return append(streams(), stream{"hidden", func(r *rand.Rand) int {
		if r.IntN(40) == 0 {
			return 0
		}
		return 1 + r.IntN(100_000)
	}})
}

// guaranteeWeights are the costs: unit, small (0 included) and large.
var guaranteeWeights = append(weights[:len(weights):len(weights)], struct {
	name string
	next func(r *rand.Rand) uint64
}{"large", func(r *rand.Rand) uint64 { return 1 + uint64(r.IntN(1_000)) }})

// TestSummaryGuarantees checks a summary against exact counts of the same
// stream, at many points of it: every monitored count bounds its item's
// weight, count-err ≤ weight ≤ count; every item not monitored weighs at
// most its filter cell, and every cell is at most the smallest count; the
// counts add up to at most the total; every item heavier than
// total/capacity is monitored; and the memory is what was allocated at
// the start.
func TestSummaryGuarantees(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, capacity := range []int{1, 4, 16, 64} {
		for _, st := range guaranteeStreams() {
			for _, wt := range guaranteeWeights {
				t.Run(fmt.Sprintf("cap%d/%s/%s", capacity, st.name, wt.name), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(capacity), 5))
					s := newSummary(capacity)
					cells := len(s.alpha)
					exact := map[uint64]uint64{}
					ev := &event{domain: "api", entries: user("v"), maxValueLen: 128, descBytes: 1 << 20, now: now}
					checked := 0
					for step := range 20_000 {
						if step == 10_000 {
							s.reset()
							clear(exact)
						}
						key := splitmix(uint64(st.next(r)))
						w := wt.next(r)
						s.add(key, w, "r", ev, false, time.Time{})
						exact[key] += w
						if step%997 != 0 && step != 19_999 {
							continue
						}
						checked++
						if err := checkSummary(s, exact); err != nil {
							t.Fatalf("step %d: %v", step, err)
						}
						if len(s.alpha) != cells || cap(s.counters) != capacity || len(s.index.cells) < 4*capacity {
							t.Fatalf("step %d: %d cells, %d counters, %d index cells: memory grew", step, len(s.alpha), cap(s.counters), len(s.index.cells))
						}
					}
					if checked < 20 {
						t.Fatalf("checked %d times", checked)
					}
				})
			}
		}
	}
}

// checkSummary says how s breaks a guarantee for the exact weights, or
// returns nil.
func checkSummary(s *summary, exact map[uint64]uint64) error {
	var total, sum uint64
	for _, w := range exact {
		total += w
	}
	if total != s.total {
		return fmt.Errorf("total %d, exact %d", s.total, total)
	}
	full := len(s.counters) == cap(s.counters)
	var smallest uint64
	if len(s.heap) > 0 {
		smallest = s.heap[0].count
	}
	for i := range s.counters {
		c := &s.counters[i]
		count, w := s.count(c), exact[c.key]
		sum += count
		if count-c.err > w || w > count || c.err > count {
			return fmt.Errorf("key %x: count %d error %d, exact %d", c.key, count, c.err, w)
		}
	}
	if sum > total {
		return fmt.Errorf("counts add up to %d, more than the total %d", sum, total)
	}
	for i, a := range s.alpha {
		if a > smallest || (!full && a != 0) {
			return fmt.Errorf("filter cell %d holds %d, smallest count %d (full %v)", i, a, smallest, full)
		}
	}
	for key, w := range exact {
		if _, ok := s.index.find(key); ok {
			continue
		}
		if a := *s.cell(key); w > a {
			return fmt.Errorf("key %x not monitored weighs %d, more than its cell's %d", key, w, a)
		}
		if w > 0 && w*uint64(cap(s.counters)) > total {
			return fmt.Errorf("key %x weighs %d of %d, more than total/%d, and is not monitored", key, w, total, cap(s.counters))
		}
	}
	return nil
}

// TestTrackerGuarantees replays Records on a clock that crosses minute and
// hour buckets and checks every Top answer against exact counts of the
// events in the window's live buckets: Count-Error ≤ exact ≤ Count for
// every entry (an item monitored in some buckets only is bounded by its
// filter cells in the others), and every item heavier than its shard's
// window total over Capacity is listed. The heavy item of "hidden" must
// be first by hits and by denials (from capacity 16, where that follows
// from the bounds).
func TestTrackerGuarantees(t *testing.T) {
	type event struct {
		at     time.Time
		kind   Kind
		name   string // domain/rule/descriptor
		shard  uint64
		weight uint64
	}
	for _, capacity := range []int{4, 16, 64} {
		for _, st := range guaranteeStreams() {
			for _, wt := range guaranteeWeights {
				t.Run(fmt.Sprintf("cap%d/%s/%s", capacity, st.name, wt.name), func(t *testing.T) {
					clock := testenv.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
					tr := New(Options{Capacity: capacity, Now: clock.Now})
					r := rand.New(rand.NewPCG(uint64(capacity), 13))
					var log []event
					queries := 0
					for step := range 12_000 {
						clock.Advance(time.Duration(r.IntN(60)) * time.Millisecond)
						if r.IntN(4_000) == 0 {
							clock.Advance(time.Duration(r.IntN(20)) * time.Minute)
						}
						i := st.next(r)
						entries := user(strconv.Itoa(i))
						domain, rules, binding := "api", "per_user", "per_user"
						if i%3 == 1 {
							rules = "per_user+daily" // the denial has its own key
						}
						cost, denied := wt.next(r), r.IntN(3) == 0 || i == 0
						tr.Record(domain, entries, rules, cost, denied, binding, time.Second)
						desc := "user=" + strconv.Itoa(i)
						log = append(log, event{clock.Now(), Hits, domain + "/" + rules + "/" + desc, tr.key(domain, rules, entries) % shards, cost})
						if denied {
							log = append(log, event{clock.Now(), Denials, domain + "/" + binding + "/" + desc, tr.key(domain, binding, entries) % shards, 1})
						}
						if step%1_500 != 1_499 {
							continue
						}
						for _, kind := range []Kind{Hits, Denials} {
							for _, window := range []Window{Minute, Hour} {
								queries++
								shape := windowShapes[window]
								cur := clock.Now().UnixNano() / int64(shape.width)
								exact := map[string]uint64{}
								shardOf := map[string]uint64{}
								var shardTotal [shards]uint64
								for _, ev := range log {
									if n := ev.at.UnixNano() / int64(shape.width); ev.kind != kind || n <= cur-int64(shape.n) {
										continue
									}
									exact[ev.name] += ev.weight
									shardOf[ev.name] = ev.shard
									shardTotal[ev.shard] += ev.weight
								}
								top := tr.Top(kind, window, "", "", 1<<30)
								listed := map[string]bool{}
								for _, e := range top {
									name := e.Domain + "/" + e.Rule + "/" + e.Descriptor
									listed[name] = true
									if w := exact[name]; e.Count-e.Error > w || w > e.Count || e.Error > e.Count {
										t.Fatalf("step %d, kind %d, %v: %s count %d error %d, exact %d", step, kind, window, name, e.Count, e.Error, w)
									}
								}
								for name, w := range exact {
									if heavy := w*uint64(capacity) > shardTotal[shardOf[name]]; heavy && !listed[name] {
										t.Fatalf("step %d, kind %d, %v: %s weighs %d of its shard's %d, more than 1/%d, and is not listed", step, kind, window, name, w, shardTotal[shardOf[name]], capacity)
									}
								}
								// First, not only listed: about a sixth of its shard's
								// weight, while a light item's count is at most about
								// total/capacity, under a sixteenth from capacity 16.
								if st.name == "hidden" && capacity >= 16 && exact["api/per_user/user=0"] > 0 {
									if len(top) == 0 || top[0].Descriptor != "user=0" {
										t.Fatalf("step %d, kind %d, %v: the heavy item is not first: %+v", step, kind, window, top[:min(3, len(top))])
									}
								}
							}
						}
					}
					if queries == 0 {
						t.Fatal("nothing checked")
					}
				})
			}
		}
	}
}
