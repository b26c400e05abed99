package hitters

import (
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// TestIndexMatchesMap drives the index with random inserts and removals
// (some of absent keys, key 0 among them) and checks after each that it
// answers like a Go map, for spread keys and for keys that all share a few
// home cells, so that removals shift long chains back.
func TestIndexMatchesMap(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		key      func(i int) uint64
	}{
		{"spread", 16, func(i int) uint64 { return splitmix(uint64(i)) }},
		{"one home cell", 16, func(i int) uint64 { return uint64(i) }},
		{"two home cells", 64, func(i int) uint64 { return uint64(i%2)<<63 | uint64(i) }},
		{"wrapping at the end", 8, func(i int) uint64 { return ^uint64(0) - uint64(i) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			x := newIndex(tc.capacity)
			want := map[uint64]int{}
			for step := range 20_000 {
				key := tc.key(r.IntN(3 * tc.capacity))
				if _, ok := want[key]; ok || len(want) == tc.capacity {
					x.remove(key)
					delete(want, key)
				} else {
					i, found := x.find(key)
					if found {
						t.Fatalf("step %d: absent key %x found", step, key)
					}
					x.insertAt(i, key, step)
					want[key] = step
				}
				if got := x.occupied(); got != len(want) {
					t.Fatalf("step %d: %d cells occupied, want %d", step, got, len(want))
				}
				for k, slot := range want {
					if got, ok := x.find(k); !ok || got != slot {
						t.Fatalf("step %d: key %x at slot %d (%v), want %d", step, k, got, ok, slot)
					}
				}
			}
		})
	}
}

// TestConcurrentRecords: goroutines record hits and denials (under two
// rules, so a denial's key is in another shard than its hit's) while
// others query; with fewer descriptors than counters every count is exact.
func TestConcurrentRecords(t *testing.T) {
	tr := New(Options{Now: func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }})
	const workers, each, users = 4, 2_000, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				tr.Record("api", user(fmt.Sprint(i%users)), "per_user+daily", 2, i%2 == w%2, "per_user", time.Second)
			}
		})
		wg.Go(func() {
			for range 50 {
				tr.Top(Hits, Minute, "", "", 5)
				tr.Top(Denials, Hour, "api", "per_user", 5)
			}
		})
	}
	wg.Wait()
	for _, tc := range []struct {
		kind Kind
		want uint64
	}{{Hits, 2 * workers * each / users}, {Denials, workers * each / 2 / users}} {
		top := tr.Top(tc.kind, Hour, "", "", users+1)
		if len(top) != users {
			t.Fatalf("kind %d: %d entries, want %d", tc.kind, len(top), users)
		}
		for _, e := range top {
			if e.Count != tc.want || e.Error != 0 {
				t.Errorf("kind %d: %s count %d error %d, want %d exactly", tc.kind, e.Descriptor, e.Count, e.Error, tc.want)
			}
		}
	}
}

// TestRecordAllocatesNothing: once its counters have held descriptors as
// long, a tracker counts new descriptors (takeovers in every summary, hits
// and two-rule denials) without allocating.
func TestRecordAllocatesNothing(t *testing.T) {
	clock := testenv.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	tr := New(Options{Capacity: 4, Now: clock.Now})
	values := make([][]descriptor.Entry, 1_000)
	for i := range values {
		values[i] = user(fmt.Sprintf("user-%04d", i))
	}
	i := 0
	record := func() {
		tr.Record("api", values[i%len(values)], "per_user+daily", 1, true, "per_user", time.Second)
		i++
	}
	for range 2 * len(values) {
		record()
	}
	if got := testing.AllocsPerRun(1_000, record); got != 0 {
		t.Errorf("%v allocations per Record, want 0", got)
	}
}

// TestResetReleasesLongBuffers: a bucket's reset keeps the descriptor
// buffers of ordinary counters for reuse and releases the long ones.
func TestResetReleasesLongBuffers(t *testing.T) {
	s := newSummary(2)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, value := range []string{"short", strings.Repeat("x", maxKeptDesc)} {
		s.add(uint64(i), 1, "r", &event{domain: "api", entries: user(value), maxValueLen: 2 * maxKeptDesc, descBytes: 4 * maxKeptDesc, now: now}, false, time.Time{})
	}
	s.reset()
	if len(s.counters) != 0 || s.index.occupied() != 0 || s.total != 0 {
		t.Fatalf("after reset: %d counters, %d keys indexed, total %d", len(s.counters), s.index.occupied(), s.total)
	}
	if short, long := cap(s.counters[:2][0].desc), cap(s.counters[:2][1].desc); short == 0 || long != 0 {
		t.Errorf("after reset: short buffer capacity %d (want kept), long %d (want released)", short, long)
	}
}
