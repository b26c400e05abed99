package testenv

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	Until(t, 10*time.Second, "the third call", func() bool { return calls.Add(1) == 3 })
	if got := calls.Load(); got != 3 {
		t.Fatalf("cond called %d times, want 3", got)
	}
}

func TestUntilFailsAfterTheTimeout(t *testing.T) {
	r := RunHelper(t, func(tb testing.TB) { Until(tb, 0, "never", func() bool { return false }) })
	if !strings.Contains(r.Failed, "waiting for never") {
		t.Fatalf("failure %q, want the timeout naming what it waited for", r.Failed)
	}
}
