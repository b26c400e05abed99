package heapfloor_test

import (
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/sluice-rl/sluice/internal/heapfloor"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	cases := []struct {
		name        string
		live, floor uint64
		base, want  int
	}{
		{"small heap lifted to the floor", 10 * mib, 64 * mib, 100, 540},
		{"heap whose goal reaches the floor keeps the base", 32 * mib, 64 * mib, 100, 100},
		{"heap above the floor keeps the base", 200 * mib, 64 * mib, 100, 100},
		{"a higher base that reaches the floor is kept", 20 * mib, 64 * mib, 300, 300},
		{"a higher base that does not is lifted", 10 * mib, 64 * mib, 300, 540},
		{"a lower base is lifted too", 40 * mib, 64 * mib, 50, 60},
		{"tiny heap: the runtime's least goal becomes the floor", 1 * mib, 64 * mib, 100, 1600},
		{"not yet measured: the runtime's least goal becomes the floor", 0, 64 * mib, 100, 1600},
		{"GOGC=off is left alone", 10 * mib, 64 * mib, -1, -1},
		{"no floor", 10 * mib, 0, 100, 100},
		{"a floor under the runtime's least goal changes nothing", 1 * mib, 2 * mib, 100, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := heapfloor.Percent(tc.live, tc.floor, tc.base); got != tc.want {
				t.Errorf("Percent(%d MiB, %d MiB, %d) = %d, want %d", tc.live/mib, tc.floor/mib, tc.base, got, tc.want)
			}
		})
	}
}

// gcPercent reads the runtime's GC percentage.
func gcPercent(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("runtime/metrics has no %s", s[0].Name)
	}
	return int(s[0].Value.Uint64())
}

// liveHeap reads the live heap the last GC cycle found.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// collect runs GC cycles until tu has adjusted after one of them (its
// finalizer runs on the runtime's finalizer goroutine, after the cycle),
// at most 100 cycles.
func collect(t *testing.T, tu *heapfloor.Tuner) {
	t.Helper()
	before := tu.Cycles()
	for range 100 {
		runtime.GC()
		runtime.Gosched()
		if tu.Cycles() > before {
			return
		}
	}
	t.Fatalf("no adjustment after 100 GC cycles")
}

// TestTunerFollowsTheLiveHeap runs a Tuner on the test process's own
// runtime: the percentage follows the live heap after each cycle, and Stop
// puts the base back.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	const floor = 64 * mib
	base := gcPercent(t)
	tu := heapfloor.Start(floor, base)
	defer tu.Stop()

	collect(t, tu)
	small := liveHeap()
	if small >= floor/2 {
		t.Fatalf("the test's live heap is %d MiB already; the floor would change nothing", small/mib)
	}
	if got := gcPercent(t); got <= base || got != tu.Percent() {
		t.Errorf("small live heap (%d MiB): GC percent %d (tuner says %d), want above the base %d", small/mib, got, tu.Percent(), base)
	}

	// A live heap whose goal at the base reaches the floor: the base again.
	hold := make([]byte, floor/2+mib)
	for i := range hold {
		hold[i] = 1 // touched, so that it is not a free zero page
	}
	collect(t, tu)
	if got := gcPercent(t); got != base {
		t.Errorf("live heap of %d MiB: GC percent %d, want the base %d", liveHeap()/mib, got, base)
	}
	runtime.KeepAlive(hold)
	hold = nil

	collect(t, tu)
	if got := gcPercent(t); got <= base {
		t.Errorf("live heap back to %d MiB: GC percent %d, want above the base %d", liveHeap()/mib, got, base)
	}

	tu.Stop()
	if got := gcPercent(t); got != base {
		t.Errorf("after Stop: GC percent %d, want the base %d", got, base)
	}
	cycles := tu.Cycles()
	runtime.GC()
	runtime.GC()
	if tu.Cycles() != cycles {
		t.Errorf("a stopped tuner adjusted again")
	}
}

func TestTunerThatChangesNothing(t *testing.T) {
	cases := []struct {
		name  string
		floor uint64
		base  int
	}{
		{"no floor", 0, 100},
		{"GOGC=off", 64 * mib, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := gcPercent(t)
			tu := heapfloor.Start(tc.floor, tc.base)
			runtime.GC()
			runtime.GC()
			if got := gcPercent(t); got != before {
				t.Errorf("GC percent %d, want it left at %d", got, before)
			}
			if tu.Percent() != tc.base || tu.Cycles() != 0 {
				t.Errorf("tuner: percent %d after %d cycles, want %d after none", tu.Percent(), tu.Cycles(), tc.base)
			}
			tu.Stop()
		})
	}
}

// TestTunerKeepsFollowing holds many small objects, some allocated between
// the tuner's cycles, as a service does: the finalizer that adjusts must
// run after every cycle all the same (an object of the runtime's tiny
// allocator, sharing a block with live ones, would never be finalized).
func TestTunerKeepsFollowing(t *testing.T) {
	base := gcPercent(t)
	tu := heapfloor.Start(64*mib, base)
	defer tu.Stop()
	var keep [][]byte
	for i := range 50 {
		for range 1000 {
			keep = append(keep, make([]byte, 1+i%15)) // tiny, reachable
		}
		collect(t, tu)
	}
	runtime.KeepAlive(keep)
}
