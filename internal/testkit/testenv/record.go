// Package tbrecord tests test helpers: it runs a helper against a
// testing.TB that records how the helper ended the test (failed, skipped,
// or neither) instead of ending the real one, so the helper's own tests
// can check that it fails, skips or passes when it should.

package testenv

import (
	"fmt"
	"runtime"
	"testing"
)

// HelperResult is how a helper run by RunHelper ended the test.
type HelperResult struct {
	// Failed is the message of the first Error, Errorf, Fatal or Fatalf;
	// "" if there was none.
	Failed string
	// Skipped is the message of Skip or Skipf; "" if there was none.
	Skipped string
}

// recorder is a testing.TB whose failure and skip methods record; Fatal,
// Fatalf, Skip and Skipf then stop the calling goroutine, as the real ones
// do. Every other method is the real test's.
type recorder struct {
	testing.TB
	res HelperResult
}

func (r *recorder) Helper() {}

func (r *recorder) fail(msg string) {
	if r.res.Failed == "" {
		r.res.Failed = msg
	}
}

func (r *recorder) Error(args ...any)                 { r.fail(fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) { r.fail(fmt.Sprintf(format, args...)) }
func (r *recorder) Fatal(args ...any)                 { r.fail(fmt.Sprint(args...)); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (r *recorder) Skip(args ...any) { r.res.Skipped = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Skipf(format string, args ...any) {
	r.res.Skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// RunHelper calls helper with a recording testing.TB on a goroutine of its own,
// waits for it to return or to be stopped, and returns how it ended. t
// serves every method the recorder does not replace (Name, TempDir,
// Cleanup, ...).
func RunHelper(t testing.TB, helper func(testing.TB)) HelperResult {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		helper(r)
	}()
	<-done
	return r.res
}
