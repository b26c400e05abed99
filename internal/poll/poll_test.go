package poll

import (
	"sync/atomic"
	"testing"
	"time"
)

// fatalT records a Fatalf instead of ending the test that runs Until.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = format
	panic(f) // Fatalf does not return
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	Until(t, 10*time.Second, "the third call", func() bool { return calls.Add(1) == 3 })
	if got := calls.Load(); got != 3 {
		t.Fatalf("cond called %d times, want 3", got)
	}
}

func TestUntilFailsAfterTheTimeout(t *testing.T) {
	f := &fatalT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != f {
				t.Fatalf("recovered %v, want the Fatalf", r)
			}
		}()
		Until(f, 0, "never", func() bool { return false })
	}()
	if f.msg == "" {
		t.Fatal("Until returned although the condition never held")
	}
}
