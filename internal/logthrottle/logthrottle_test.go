package logthrottle

import (
	"bytes"
	"errors"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// One warning per interval, with the error's words, and the count of
// those held back on the next one.
func TestThrottledLog(t *testing.T) {
	clock, buf, log, tl := newTestLog()
	err := errors.New("WRONGPASS invalid username-password pair")
	for range 3 {
		tl.Warn(log, "backend could not decide", err)
	}
	clock.Advance(Interval - time.Millisecond)
	tl.Warn(log, "backend could not decide", err)
	clock.Advance(time.Millisecond)
	tl.Warn(log, "backend could not decide", err)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "WRONGPASS") || strings.Contains(lines[0], "held_back") {
		t.Errorf("first line %q", lines[0])
	}
	if !strings.Contains(lines[1], "similar_warnings_held_back=3") {
		t.Errorf("second line %q, want 3 held back", lines[1])
	}
}

// Error throttles the same way, at error level, sharing the interval with
// Warn.
func TestThrottledLogError(t *testing.T) {
	clock, buf, log, tl := newTestLog()
	tl.Error(log, "token file unreadable", errors.New("permission denied"))
	tl.Warn(log, "token file unreadable", nil)
	clock.Advance(Interval)
	tl.Error(log, "token file unreadable", nil)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=error") || !strings.Contains(lines[0], "permission denied") ||
		!strings.Contains(lines[1], "level=error") || !strings.Contains(lines[1], "similar_warnings_held_back=1") {
		t.Errorf("lines:\n%s\nwant two at error level, the second counting 1 held back", buf.String())
	}
}

// newTestLog returns a fake clock, a logger writing text lines without
// timestamps into the returned buffer, and a Log on that clock.
func newTestLog() (*testenv.Clock, *bytes.Buffer, *logrus.Logger, *Log) {
	clock := testenv.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	buf := &bytes.Buffer{}
	log := logrus.New()
	log.SetOutput(buf)
	log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	return clock, buf, log, &Log{Now: clock.Now}
}
