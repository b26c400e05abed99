package sluicetest

import (
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"math/rand/v2"
	"regexp"
	"testing"
	"time"
)

// This file holds what the black-box suites share beyond running the
// binary: names that keep tests apart on shared Redis deployments and the
// wall-clock alignment a test needs before counting on one window.

// Unique returns a descriptor value no other test or run uses: prefix and
// 64 random bits.
func Unique(prefix string) string { return fmt.Sprintf("%s-%016x", prefix, rand.Uint64()) }

// KeyPrefix is a CACHE_KEY_PREFIX unique to t and to this run, for Redis
// deployments shared between tests.
func KeyPrefix(t testing.TB) string {
	name := regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "_")
	return fmt.Sprintf("%s_%08x:", name, rand.Uint32())
}

// AwayFromEdge waits, if needed, until the next edge of the windows of
// period (aligned to the epoch, offset by off) is at least margin away, so
// a short sequence of calls that counts on one window cannot straddle two.
// It polls the wall clock, which Redis shares on this machine, and never
// waits much more than margin.
func AwayFromEdge(t testing.TB, period, off, margin time.Duration) {
	t.Helper()
	untilEdge := func() time.Duration {
		now := time.Now().UnixNano() - int64(off)
		return period - time.Duration(((now%int64(period))+int64(period))%int64(period))
	}
	if untilEdge() >= margin {
		return
	}
	testenv.Until(t, margin+time.Second, fmt.Sprintf("the %v window edge to pass", period), func() bool { return untilEdge() >= margin })
}
