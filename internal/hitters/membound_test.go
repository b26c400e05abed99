package hitters

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// long is a key or value beyond MaxValueLen: kept, it is cut to that as a
// 64 KiB one would be.
var long = strings.Repeat("x", 2*DefaultMaxValueLen)

// widest is a descriptor as wide as a request may carry: one entry per
// level of the deepest config (descriptor.MaxDepth, beyond the 32 entries
// a request has by default), each key and value far beyond MaxValueLen,
// and distinct by i (in its first value).
func widest(i int) []descriptor.Entry {
	entries := make([]descriptor.Entry, descriptor.MaxDepth)
	for j := range entries {
		entries[j] = descriptor.Entry{Key: long, Value: long}
	}
	entries[0].Value = fmt.Sprint(i, long)
	return entries
}

// A Tracker holds at most MaxBytes, with every counter of every shard,
// kind, window and bucket holding a distinct descriptor of the widest a
// request may carry: its live heap, measured, stays within the bound
// (before the bound, these summaries could hold about 150 MB).
func TestTrackerMemoryBound(t *testing.T) {
	for _, bound := range []int{0} {
		t.Run(fmt.Sprintf("MaxBytes=%d", bound), func(t *testing.T) {
			want := bound
			if want == 0 {
				want = DefaultMaxBytes
			}
			end := time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)
			clock := testenv.NewClock(end.Add(-time.Hour))
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			tr := New(Options{MaxBytes: bound, Now: clock.Now})
			// Every bucket of the hour (5 minutes each), then every bucket
			// of the last minute (10 s each), gets more distinct items
			// than its counters hold, each denied under a rule of its own.
			item := 0
			fill := func() {
				for range 3 * shards * DefaultCapacity {
					tr.Record("api", widest(item), "per_user+daily", 1, true, "per_user", time.Second)
					item++
				}
			}
			clock.Advance(time.Minute)
			for range 11 {
				fill()
				clock.Advance(5 * time.Minute)
			}
			// Now at end-4m: on to the last minute's six buckets.
			clock.Advance(3*time.Minute + time.Second)
			for range 6 {
				fill()
				clock.Advance(10 * time.Second)
			}
			full, longest := 0, 0
			for s := range tr.shards {
				for k := range kinds {
					for w := range windows {
						for _, sum := range tr.shards[s].rings[k][w].sums {
							if len(sum.counters) == cap(sum.counters) {
								full++
							}
							for _, c := range sum.counters {
								longest = max(longest, len(c.desc))
							}
						}
					}
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("MaxBytes %d: %d of 288 summaries full, descriptors kept up to %d bytes, live heap %d bytes", want, full, longest, held)
			if full < 280 {
				t.Fatalf("only %d of 288 summaries full: the test does not fill the tracker", full)
			}
			if held > int64(want) {
				t.Errorf("the tracker holds %d bytes, over its bound of %d", held, want)
			}
			if top := tr.Top(Denials, Minute, "api", "", 1); len(top) != 1 || !strings.HasSuffix(top[0].Descriptor, "…") {
				t.Errorf("top %+v: want a descriptor cut with …", top)
			}
			runtime.KeepAlive(tr)
		})
	}
}
