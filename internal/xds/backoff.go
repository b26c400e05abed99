package xds

import (
	"math"
	"time"
)

// backoff computes the waits between failed streams: initial, doubling
// per attempt up to max, each spread over ±factor when jitter is on.
type backoff struct {
	initial, max time.Duration
	factor       float64
	jitter       bool
	rand         func() float64 // in [0, 1)

	attempt int
}

// next returns the wait before the next attempt and counts the attempt.
func (b *backoff) next() time.Duration {
	d := float64(b.initial) * math.Pow(2, float64(b.attempt))
	if d > float64(b.max) {
		d = float64(b.max)
	} else {
		b.attempt++
	}
	if b.jitter && b.factor > 0 {
		d += d * b.factor * (2*b.rand() - 1)
	}
	return time.Duration(d)
}

// reset starts over from initial, after a stream that worked.
func (b *backoff) reset() { b.attempt = 0 }
