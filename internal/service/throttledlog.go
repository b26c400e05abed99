package service

import (
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// errLogInterval is the least time between two warnings of one
// throttledLog: a Redis that fails every call must not write a line per
// call, but the first failure and its words show at once.
const errLogInterval = 10 * time.Second

// throttledLog writes at most one warning per errLogInterval and counts
// the ones it held back. The zero value is ready to use.
type throttledLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
	// now is the clock; nil means time.Now. Tests set it.
	now func() time.Time
}

// warn logs msg with err (if not nil) at warning level, unless a warning was logged
// less than errLogInterval ago; the next warning logged says how many were
// held back.
func (t *throttledLog) warn(log logrus.FieldLogger, msg string, err error) {
	now := time.Now
	if t.now != nil {
		now = t.now
	}
	t.mu.Lock()
	at := now()
	if !t.last.IsZero() && at.Sub(t.last) < errLogInterval {
		t.suppressed++
		t.mu.Unlock()
		return
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
	e.Warn(msg)
}
