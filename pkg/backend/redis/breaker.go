package redis

import (
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// breaker is a circuit breaker over Redis round trips. Closed, it lets
// everything through and counts consecutive failures; at the threshold it
// opens and fails calls at once for the open period; then it lets one
// probe through (half-open): the probe's success closes it, its failure
// opens it again. A caller giving up (its own context cancelled) proves
// nothing either way.
type breaker struct {
	threshold int // <= 0: never opens
	openFor   time.Duration
	now       func() time.Time
	log       *logrus.Logger

	mu        sync.Mutex
	failures  int
	open      bool
	openUntil time.Time
	probing   bool // a half-open probe is in flight
}

// verdict is what one round trip says about Redis.
type verdict int

const (
	healthy verdict = iota // Redis answered
	failed                 // Redis did not answer in time, or refused
	neutral                // the caller gave up first; says nothing
)

// allow reports whether a call may go to Redis now; probe is true for the
// one call let through to test a breaker that was open.
func (b *breaker) allow() (ok, probe bool) {
	if b.threshold <= 0 {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true, false
	}
	if b.probing || b.now().Before(b.openUntil) {
		return false, false
	}
	b.probing = true
	return true, true
}

// done records the verdict of a call allow let through.
func (b *breaker) done(v verdict, probe bool) {
	if b.threshold <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	switch v {
	case healthy:
		if b.open {
			b.log.Info("redis: circuit breaker closed, Redis answers again")
		}
		b.failures, b.open = 0, false
	case failed:
		b.failures++
		if (b.open && probe) || (!b.open && b.failures >= b.threshold) {
			if !b.open {
				b.log.WithField("failures", b.failures).Warn("redis: circuit breaker open, failing calls fast")
			}
			b.open = true
			b.openUntil = b.now().Add(b.openFor)
		}
	case neutral:
		// A probe whose caller left lets the next call probe at once.
	}
}

// isOpen reports whether the breaker is failing calls fast (for tests and
// health reporting).
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}
