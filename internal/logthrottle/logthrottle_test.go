package logthrottle

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/fakeclock"
)

// One warning per interval, with the error's words, and the count of
// those held back on the next one.
func TestThrottledLog(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var buf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	tl := Log{Now: clock.Now}
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
