package denycache

import (
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend/memory"
)

// A host whose wall clock steps back (NTP correcting a fast clock, a VM
// resumed from a snapshot) must not stretch a cached denial: the store
// (Redis decides by its own TIME) ends the window on its own schedule, and
// the cache must stop answering for it then. The cache reads only its
// monotonic clock, which keeps going forward through the step.
func TestWallClockStepBack(t *testing.T) {
	for _, step := range []time.Duration{time.Second, time.Hour, 24 * time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			store := testenv.NewClock(start) // the store's clock: Redis TIME, unaffected
			mono := testenv.NewClock(start)  // the host's monotonic clock
			wall := testenv.NewClock(start)  // the host's wall clock: steps back
			inner := &counting{Backend: memory.New(memory.Options{Now: store.Now, SweepInterval: -1})}
			b := New(inner, Options{Clock: elapsed(mono.Now)})
			f := &fixture{t: t, clock: store, inner: inner, b: b}
			advance := func(d time.Duration) { store.Advance(d); mono.Advance(d); wall.Advance(d) }

			for range 3 {
				f.do("k", fixed3, 1, false)
			}
			if d, cached := f.do("k", fixed3, 1, false); d.Allowed || cached {
				t.Fatalf("4th of 3: allowed %v cached %v, want a denial from the store", d.Allowed, cached)
			}
			if d, cached := f.do("k", fixed3, 1, false); d.Allowed || !cached {
				t.Fatalf("5th of 3: allowed %v cached %v, want a cached denial", d.Allowed, cached)
			}
			wall.Advance(-step)
			advance(40 * time.Second) // 20 s into the minute + 40 s: the window ends
			d, cached := f.do("k", fixed3, 1, false)
			if cached || !d.Allowed {
				t.Fatalf("after the window ended (wall clock stepped back %v): allowed %v cached %v, want the store's admission", step, d.Allowed, cached)
			}
		})
	}
}

// The default clock is the monotonic clock: it starts near zero and never
// reads a wall-clock time.
func TestDefaultClockIsMonotonic(t *testing.T) {
	b := New(memory.New(memory.Options{SweepInterval: -1}), Options{})
	defer b.Close()
	if now := b.now(); now < 0 || now > int64(time.Minute/time.Microsecond) {
		t.Fatalf("default clock reads %d µs: want the time since New, not a wall-clock time", now)
	}
}
