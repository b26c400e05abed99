// Package poll waits in tests for a condition another goroutine or process
// brings about: a listener that comes up, a reload that lands, load that
// resumes after a fault. It polls the condition; it never waits for time
// itself to pass, so it is for real processes and real I/O, not for clocks
// (inject a fake clock for those). It depends on nothing of sluice, so any
// package's tests can use it.

package testenv

import (
	"testing"
	"time"
)

// PollEvery is how often Until checks its condition.
const PollEvery = 10 * time.Millisecond

// Until checks cond every PollEvery until it holds and fails t (naming what it
// waited for) if it still does not hold after timeout.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(PollEvery)
	}
}
