// Package logthrottle writes warnings that a client or a failing
// dependency can cause at any rate: the first at once, with its words,
// then at most one per Interval, saying how many were held back.
package logthrottle

import (
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Interval is the least time between two warnings of one Log: a Redis
// that fails every call must not write a line per call, but the first
// failure and its words show at once.
const Interval = 10 * time.Second

// Log writes at most one warning per Interval and counts the ones it held
// back. The zero value is ready to use.
type Log struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
	// Now is the clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// Warn logs msg with err (if not nil) at warning level, unless a line
// was logged less than Interval ago; the next line logged says how many
// were held back (field similar_warnings_held_back).
func (t *Log) Warn(log logrus.FieldLogger, msg string, err error) {
	if e := t.entry(log, err); e != nil {
		e.Warn(msg)
	}
}

// Error is Warn at error level.
func (t *Log) Error(log logrus.FieldLogger, msg string, err error) {
	if e := t.entry(log, err); e != nil {
		e.Error(msg)
	}
}

// entry returns the entry to log a line with, or nil when the line is
// held back.
func (t *Log) entry(log logrus.FieldLogger, err error) *logrus.Entry {
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	t.mu.Lock()
	at := now()
	if !t.last.IsZero() && at.Sub(t.last) < Interval {
		t.suppressed++
		t.mu.Unlock()
		return nil
	}
	held := t.suppressed
	t.last, t.suppressed = at, 0
	t.mu.Unlock()
	e := log.WithFields(nil)
	if err != nil {
		e = e.WithError(err)
	}
	if held > 0 {
		e = e.WithField("similar_warnings_held_back", held)
	}
	return e
}
