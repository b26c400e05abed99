// Package heapfloor keeps the Go garbage collector from collecting a small
// heap more often than a heap of a given size would be: a floor under the
// GC's heap goal.
//
// A rate-limit service's live heap is small (about 10 MB on the Redis
// backend) while gRPC allocates a few kilobytes per call, so at the
// runtime's default GOGC=100 the collector runs some 17 times a second
// under load, and every cycle also shrinks the stacks of the stream
// workers, which grow them again on their next calls. Raising GOGC would
// multiply a large heap too (the embedded backend's counters); a floor
// only lifts the goal while the heap is small: the goal is the larger of
// what GOGC gives and Floor, so it costs at most Floor bytes of memory,
// and nothing once the live heap is half the floor or more.
//
// The runtime has no setting for it, so a Tuner sets the GC percentage
// after every cycle, from the live heap that cycle found
// (runtime/metrics /gc/heap/live:bytes). A memory limit (GOMEMLIMIT) still
// bounds the heap: the runtime collects before it whatever the percentage.
package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// runtimeHeapMinimum is the Go runtime's least heap goal at GOGC=100
// (defaultHeapMinimum, 4 MiB). The runtime scales it with the percentage,
// so that a percentage above 100*floor/runtimeHeapMinimum would make the
// least goal itself exceed the floor.
const runtimeHeapMinimum = 4 << 20

// Percent returns the GC percentage that makes the heap goal the larger of
// what base gives and floor, for a live heap of live bytes: base itself
// once live*(1+base/100) reaches floor; for a live heap so small (or not
// yet measured, 0) that it would take more, the percentage at which the
// runtime's least goal is the floor. base below 0 (GOGC=off), or a floor
// of 0, is returned as it is.
func Percent(live, floor uint64, base int) int {
	if base < 0 || floor == 0 {
		return base
	}
	most := float64(floor) * 100 / runtimeHeapMinimum
	p := most
	if live > 0 {
		// goal = live * (1 + p/100) >= floor  <=>  p >= 100*floor/live - 100
		p = min(math.Ceil(100*float64(floor)/float64(live))-100, math.Floor(most))
	}
	if p <= float64(base) {
		return base
	}
	return int(p)
}

// Tuner sets the GC percentage after every GC cycle (Percent of the live
// heap that cycle found). Start one per process: the GC percentage is the
// runtime's, not the Tuner's.
type Tuner struct {
	floor uint64
	base  int

	mu      sync.Mutex
	stopped bool
	percent int // the percentage set last
	cycles  int // adjustments made, the one at Start included
	sample  []metrics.Sample
}

// Start sets the GC percentage for the live heap now and after every GC
// cycle from now on, so that the heap goal is at least floor bytes. base
// is the percentage the process runs at without a floor (100, or GOGC's
// value). A floor of 0, or a negative base (GOGC=off), starts a Tuner that
// changes nothing.
func Start(floor uint64, base int) *Tuner {
	t := &Tuner{floor: floor, base: base, percent: base,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	if floor == 0 || base < 0 {
		t.stopped = true
		return t
	}
	t.adjust()
	t.arm()
	return t
}

// arm registers a finalizer on a fresh object, which the next GC cycle
// finds unreachable: the finalizer adjusts the percentage and arms again.
func (t *Tuner) arm() {
	runtime.SetFinalizer(&sentinel{t}, func(s *sentinel) {
		if s.t.adjust() {
			s.t.arm()
		}
	})
}

// sentinel is the object whose finalizer runs once per GC cycle. It holds
// a pointer: an object without one, smaller than 16 bytes, would come from
// the runtime's tiny allocator, which packs several into one block, and a
// block is freed (and the finalizer run) only when none of them is
// reachable, which may be never.
type sentinel struct{ t *Tuner }

// adjust sets the percentage for the live heap the last cycle found and
// reports whether the Tuner still runs.
func (t *Tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	t.cycles++
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	if p := Percent(live, t.floor, t.base); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
	return true
}

// Percent returns the GC percentage the Tuner set last (its base when it
// changed nothing).
func (t *Tuner) Percent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// Stop stops adjusting and puts the base percentage back.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	if t.percent != t.base {
		debug.SetGCPercent(t.base)
		t.percent = t.base
	}
}
