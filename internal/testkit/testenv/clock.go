// Package fakeclock is the settable clock tests inject wherever sluice
// takes a clock (func() time.Time), so that time passes only when a test
// says so. It depends on nothing of sluice, so any package's tests can use
// it.

package testenv

import (
	"sync"
	"time"
)

// Clock is a fake clock that moves only when told to. It is safe for
// concurrent use (a backend's sweeper may read it while a test moves it).
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock standing at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
